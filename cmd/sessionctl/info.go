package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/internal/buildinfo"
)

// version is set at release time with -ldflags "-X main.version=v1.2.3";
// otherwise ctlVersion falls back to what the Go toolchain recorded.
var version = ""

func ctlVersion() string { return buildinfo.Version(version) }

func healthCmd(e *env) *cobra.Command {
	var service string
	cmd := &cobra.Command{
		Use:   "health",
		Short: "check the daemon's gRPC health",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return e.health(cmd.Context(), service)
		},
	}
	cmd.Flags().StringVar(&service, "service", "", "the service to check; empty means the whole daemon")
	return cmd
}

func (e *env) health(ctx context.Context, service string) error {
	if _, err := e.dial(ctx); err != nil {
		return err
	}
	resp, err := healthpb.NewHealthClient(e.conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if status.Code(err) == codes.NotFound {
		// The health service's NOT_FOUND is an unknown service, not a
		// missing session (exit code 3): it is a plain failure.
		return &exitErr{code: exitError, grpc: codes.NotFound, err: fmt.Errorf("health: sessiond at %s does not serve %q; check --service", e.addr, service)}
	}
	if err != nil {
		return e.rpcError("health", err)
	}
	st := resp.GetStatus()
	if err := e.printResult(resp, "%s\n", st); err != nil {
		return err
	}
	if st != healthpb.HealthCheckResponse_SERVING {
		return &exitErr{code: exitError, grpc: codes.Unavailable, err: fmt.Errorf("health: sessiond at %s is %s; see its logs", e.addr, st)}
	}
	return nil
}

func versionCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "print sessionctl's and the daemon's versions",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return e.version(cmd.Context())
		},
	}
}

func (e *env) version(ctx context.Context) error {
	own := ctlVersion()
	if !e.json {
		// Print our own version first: it is useful even when the daemon
		// is down.
		fmt.Fprintf(e.stdout, "sessionctl %s\n", own)
	}
	c, err := e.dial(ctx)
	var info *sessiondv1.GetServerInfoResponse
	if err == nil {
		if info, err = c.GetServerInfo(ctx, &sessiondv1.GetServerInfoRequest{}); err != nil {
			err = e.rpcError("version", err)
		}
	}
	if err != nil {
		if e.json {
			_ = json.NewEncoder(e.stdout).Encode(map[string]string{"sessionctl": own})
		}
		return err
	}
	return e.printResult(map[string]string{"sessionctl": own, "sessiond": info.GetVersion(), "backend": info.GetBackend()},
		"sessiond %s (backend %s)\n", info.GetVersion(), info.GetBackend())
}
