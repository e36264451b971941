// Command sessiond-load drives a running sessiond (on loopback only) and
// reports throughput and latency, so that its performance targets can be
// checked side by side with the floor (fsync, health) and with other stores
// (scripts/bench-compare.sh runs it).
//
//	sessiond-load [--addr 127.0.0.1:7437] [--namespace NS] [--cleanup] [--json] MODE [FLAGS]
//
// The modes and their flags are in run.go (`sessiond-load --help`). A run
// writes into a namespace of its own, sessiond-load-TIME-RANDOM, unless
// --namespace names one ("" is the default namespace); --cleanup removes what it wrote. Every loop is
// bounded by a count and a duration. --json writes the report as one JSON
// object.
//
// Exit codes: 0 ok, 1 error (including failed calls or a count mismatch
// after an append run), 2 usage.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	flag "github.com/spf13/pflag"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// exitCode reports err on stderr and maps it to the exit code.
func exitCode(err error, stderr io.Writer) int {
	var ue *usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "sessiond-load: %v\nRun 'sessiond-load --help' for usage.\n", err)
		return 2
	default:
		fmt.Fprintf(stderr, "sessiond-load: %v\n", err)
		return 1
	}
}

// usageError is a bad command line: exit code 2.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return &usageError{err: fmt.Errorf(format, args...)}
}
