package main

import (
	"context"
	"encoding/json"
	"fmt"

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

func cmdHealth(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet("health", e)
	service := fs.String("service", "", "the service to check; empty means the whole daemon")
	if _, err := parseArgs(e, fs, args, 0, 0); err != nil {
		return err
	}
	if _, err := e.dial(); err != nil {
		return err
	}
	resp, err := healthpb.NewHealthClient(e.conn).Check(ctx, &healthpb.HealthCheckRequest{Service: *service})
	if status.Code(err) == codes.NotFound {
		// The health service's NOT_FOUND is an unknown service, not a
		// missing session (exit code 3): it is a plain failure.
		return fmt.Errorf("health: sessiond at %s does not serve %q; check --service", e.addr, *service)
	}
	if err != nil {
		return e.rpcError("health", err)
	}
	st := resp.GetStatus()
	if e.json {
		if err := writeJSONLine(e.stdout, resp); err != nil {
			return err
		}
	} else {
		fmt.Fprintln(e.stdout, st.String())
	}
	if st != healthpb.HealthCheckResponse_SERVING {
		return &exitErr{code: exitError, err: fmt.Errorf("health: sessiond at %s is %s; see its logs", e.addr, st)}
	}
	return nil
}

func cmdVersion(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet("version", e)
	if _, err := parseArgs(e, fs, args, 0, 0); err != nil {
		return err
	}
	own := ctlVersion()
	if !e.json {
		// Print our own version first: it is useful even when the daemon
		// is down.
		fmt.Fprintf(e.stdout, "sessionctl %s\n", own)
	}
	c, err := e.dial()
	if err != nil {
		return err
	}
	info, err := c.GetServerInfo(ctx, &sessiondv1.GetServerInfoRequest{})
	if err != nil {
		if e.json {
			b, _ := json.Marshal(map[string]string{"sessionctl": own})
			fmt.Fprintf(e.stdout, "%s\n", b)
		}
		return e.rpcError("version", err)
	}
	if e.json {
		b, err := json.Marshal(map[string]string{"sessionctl": own, "sessiond": info.GetVersion(), "backend": info.GetBackend()})
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "%s\n", b)
		return nil
	}
	fmt.Fprintf(e.stdout, "sessiond %s (backend %s)\n", info.GetVersion(), info.GetBackend())
	return nil
}
