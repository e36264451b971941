// Command sessiond is the session store daemon: it serves
// sessiond.v1.SessionStoreService, grpc.health.v1 and server reflection over
// gRPC, on loopback TCP or a unix socket, backed by a storage.Store.
//
// Every flag can also be set by an environment variable SESSIOND_<FLAG>
// (upper case, dashes as underscores); a flag on the command line wins.
// SIGINT and SIGTERM drain in-flight calls, close the store and exit 0.
//
// --auth-tokens turns on bearer tokens (server.Authorizer, internal/auth);
// --tls-cert and --tls-key serve TLS, --tls-client-ca mutual TLS. The token
// file and the certificate files are reloaded when they change and on
// SIGHUP. A non-loopback --listen without TLS and tokens is refused unless
// --insecure.
//
// --metrics-listen serves Prometheus metrics (internal/metrics) on a second
// listener, under the same rule and with the same TLS and tokens, and
// --pprof adds net/http/pprof there (metrics.go).
//
// Exit codes: 0 ok (and --help), 1 runtime error, 2 usage error.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3";
// otherwise it comes from the module's build info.
var version string

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// exitCode reports err on stderr and maps it to the exit code.
func exitCode(err error, stderr interface{ Write([]byte) (int, error) }) int {
	var ue *usageError
	switch {
	case err == nil, errors.Is(err, pflag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "sessiond: %v\nRun 'sessiond --help' for usage.\n", err)
		return 2
	default:
		fmt.Fprintf(stderr, "sessiond: %v\n", err)
		return 1
	}
}

// usageError is a bad command line or environment: exit code 2.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return &usageError{err: fmt.Errorf(format, args...)}
}
