// Command sessionctl administers a sessiond daemon over gRPC: it lists,
// shows, creates, appends to, updates, searches, renames, forks, rewinds,
// deletes, purges, exports, imports and watches sessions, edits token files,
// and checks a stopped file store's data dir (fsck).
//
//	sessionctl [--addr ADDR] [--namespace NS] [--json] [--timeout D] COMMAND [ARGS]
//
// The command tree is built with cobra (cli.go), so help, shell completion
// and the man pages come from the same definitions. docs/sessionctl.md is the
// user guide (contexts, tokens and TLS, output, exit codes); docs/formats.md
// describes the JSON lines export format.
//
// Exit codes: 0 ok, 1 error, 2 usage, 3 not found; fsck follows e2fsck: 0
// clean, 1 errors corrected, 4 errors left, 8 not checked.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	codepb "google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Exit codes that scripts may rely on.
const (
	exitOK       = 0
	exitError    = 1
	exitUsage    = 2
	exitNotFound = 3
)

// fsck's exit codes, as e2fsck's: 1 is "damage repaired", never a failure
// to check, which is 8.
const (
	exitFsckClean       = 0
	exitFsckCorrected   = 1
	exitFsckLeft        = 4
	exitFsckOperational = 8
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one sessionctl invocation and returns its exit code. It is
// main without the process: tests call it in-process.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := &env{stdin: stdin, stdout: stdout, stderr: stderr}
	defer e.close()
	root := newRoot(e)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err != nil && !e.started {
		// cobra's own complaints about the command line (an unknown
		// command, a bad flag) come before any command runs.
		var ee *exitErr
		if !errors.As(err, &ee) {
			err = usageErrorf("%v; see 'sessionctl help'", err)
		}
	}
	code := exitCode(err)
	if err != nil && !errors.Is(err, errSilent) {
		e.printError(err, code, args)
	}
	return code
}

// printError writes err on stderr: one line for people, or with --json
// (even when the flags did not parse) one JSON object.
func (e *env) printError(err error, code int, args []string) {
	msg := safeLine(oneLine(err.Error()))
	if !e.json && !jsonRequested(args) {
		fmt.Fprintf(e.stderr, "sessionctl: %s\n", msg)
		return
	}
	b, _ := json.Marshal(struct {
		Code     string `json:"code"`
		Message  string `json:"message"`
		ExitCode int    `json:"exit_code"`
	}{codeName(grpcCode(err, code)), msg, code})
	fmt.Fprintf(e.stderr, "%s\n", b)
}

// jsonRequested reports whether --json is among args, for errors found
// before the flags were parsed.
func jsonRequested(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if a == "--json" || a == "--json=true" {
			return true
		}
	}
	return false
}

// errSilent ends a command with a non-zero code whose explanation the command
// has already printed (fsck's findings).
var errSilent = errors.New("already reported")

// exitErr carries an exit code other than the one exitCode would derive, and
// the gRPC code that --json errors report.
type exitErr struct {
	code int
	grpc codes.Code
	err  error
}

func (e *exitErr) Error() string { return e.err.Error() }
func (e *exitErr) Unwrap() error { return e.err }

// usageErrorf reports a mistake in the command line (exit code 2).
func usageErrorf(format string, a ...any) error {
	return &exitErr{code: exitUsage, grpc: codes.InvalidArgument, err: fmt.Errorf(format, a...)}
}

// notFoundErrorf reports a session that does not exist (exit code 3).
func notFoundErrorf(format string, a ...any) error {
	return &exitErr{code: exitNotFound, grpc: codes.NotFound, err: fmt.Errorf(format, a...)}
}

func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	var ee *exitErr
	if errors.As(err, &ee) {
		return ee.code
	}
	if s, ok := status.FromError(err); ok && s.Code() == codes.NotFound {
		return exitNotFound
	}
	return exitError
}

// grpcCode is the code a --json error reports: the failed call's, else
// what the exit code means.
func grpcCode(err error, exit int) codes.Code {
	var ee *exitErr
	if errors.As(err, &ee) && ee.grpc != codes.OK {
		return ee.grpc
	}
	if s, ok := status.FromError(err); ok && s.Code() != codes.OK && s.Code() != codes.Unknown {
		return s.Code()
	}
	switch exit {
	case exitUsage:
		return codes.InvalidArgument
	case exitNotFound:
		return codes.NotFound
	}
	return codes.Unknown
}

// codeName is a gRPC code's canonical name (NOT_FOUND), as every gRPC
// implementation and google.rpc.Code spell it.
func codeName(c codes.Code) string {
	if n, ok := codepb.Code_name[int32(c)]; ok {
		return n
	}
	return c.String()
}

// oneLine keeps an error message on one line, as scripts read stderr by line.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
}
