// Command sessiond-load drives a running sessiond with the generated gRPC
// client and reports throughput and latency, so that sessiond's performance
// targets can be checked side by side with the floor and with the stores a
// user would pick instead (scripts/bench-compare.sh runs it).
//
// Usage:
//
//	sessiond-load [--addr 127.0.0.1:7437] [--namespace NS] [--cleanup] [--json] MODE [FLAGS]
//
// Modes:
//
//	append  N clients append one message of --size bytes per call, each with a
//	        unique id, to M sessions (client i's k-th append goes to session
//	        (i + k*N) mod M, every session when M > N); reports
//	        ops/s and p50/p90/p99 latency, then checks that the sessions hold
//	        exactly the messages acknowledged. With --metrics HOST:PORT (the
//	        daemon's --metrics-listen) it also reports, from the daemon's
//	        metrics over the timed run, the flushes, appends per flush (group
//	        commit) and mean flush and server-side handling times. The
//	        appends use a minimal gRPC client (--client lean, lean.go) unless
//	        --client grpc asks for grpc-go's.
//	health  sequential grpc.health.v1 Check calls: the unary round trip, the
//	        RPC part of the append floor.
//	list    optionally creates --populate sessions, then times ListSessions
//	        of the namespace: time to the first frame and to the last.
//	load    creates one session of --messages messages, then times
//	        LoadSession of all of them: messages/s.
//	fsync   no daemon: appends --size bytes to a file in --dir (default a
//	        temp folder, removed after) and fdatasyncs, each call; the disk
//	        part of the append floor.
//	deltas  live turns: --sessions open messages each get --rate 16-byte
//	        deltas a second; after a second a watcher per session joins
//	        mid-stream (load, then watch from that revision). Checks that
//	        every delta arrived once and in order, and reports the lag from
//	        a delta's send to its arrival.
//	soak    starts --sessiond over --dir (default a new temp folder) itself,
//	        runs appenders, watchers
//	        and stalled readers for --duration, kills it with SIGKILL and
//	        restarts it every --kill-every, checking that every acknowledged
//	        append survived; prints the daemon's RSS every --sample.
//
// A run writes into a namespace of its own, sessiond-load-TIME-RANDOM (named
// on stderr), unless --namespace names one, so that it never mixes its
// sessions with a daemon's real ones; --cleanup deletes the sessions it
// created when it ends, and soak's temp data dir. Without --cleanup they
// stay, and the run says where.
//
// Every loop is bounded by a count and a duration. The daemon must be on
// loopback: this tool generates load and must not be aimed at a shared
// server by mistake. --json writes one JSON object (the mode's report) on
// stdout instead of the table.
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
