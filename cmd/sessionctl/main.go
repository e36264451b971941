// Command sessionctl administers a sessiond daemon: it lists, shows, searches,
// renames, forks, rewinds, deletes, exports, imports and watches sessions over
// gRPC, and checks a file data dir offline (fsck).
//
// Usage:
//
//	sessionctl [--addr ADDR] [--namespace NS] [--json] COMMAND [ARGS]
//
// --addr (or SESSIOND_ADDR, default 127.0.0.1:7437) is host:port or
// unix:/path/to.sock; --namespace (or SESSIOND_NAMESPACE) selects the
// namespace, "" being the default one. Global flags come before the command;
// each command's own flags may come before or after its arguments. A session
// argument (ID|ALIAS) that is shaped like a UUID is an id, anything else an
// alias. `sessionctl help` lists the commands, `sessionctl CMD --help` their
// flags.
//
// # Exit codes
//
//	0  ok
//	1  error (daemon unreachable, refused request, damaged data ...)
//	2  usage (bad flags or arguments; rm without --yes and no terminal)
//	3  not found (the session named does not exist)
//	4  fsck found damage (also when --repair repaired it)
//
// Errors are one line on stderr that says what to do next.
//
// # Output for scripts
//
// With --json, ls, search and watch write one proto3 JSON object per line
// (sessiond.v1.Session, SearchSessionsResponse, WatchSessionResponse), show
// writes the session with its messages as one line, and fork, rename, rewind
// write the session after the change. watch prints its "watching" notice on
// stderr then, and when the daemon says OUT_OF_RANGE it reloads the session
// and writes an EVENT_TYPE_REPLACED event carrying the session as it now is
// (a reader should reload) before it carries on.
//
// # Export format
//
// `export` writes JSON lines (one JSON object per line, UTF-8) that `import`
// reads back losslessly. Every line has a "type":
//
//	{"type":"sessiond-export","version":1,"namespace":"NS","exported_at":"RFC3339","sessionctl":"VERSION"}
//	{"type":"session","session":{SESSION},"proto":"BASE64"}
//	{"type":"message","session_id":"ID","index":0,"message":{MESSAGE},"proto":"BASE64"}
//	...
//	{"type":"end","session_id":"ID","message_count":N}
//	... more sessions ...
//	{"type":"trailer","sessions":K}
//
// The first line is the header. Each session is a "session" line, its
// messages in order, then an "end" line that lets import detect a cut file.
// The "trailer" closes the file. SESSION and MESSAGE are proto3 JSON
// (sessiond.v1.Session without its messages, sessiond.v1.Message), for people
// and jq. "proto" is the same object's protobuf encoding in standard base64:
// it is what import reads, because it also carries the fields this version of
// sessionctl does not know (a newer client's message fields survive an
// export/import round trip). A line without "proto" is read from its JSON,
// so a hand-written file works too; after editing the JSON of a line with
// "proto", delete its "proto" so that the edit takes effect. Import keeps
// each session's id, alias, title, summary, metadata, labels, created_at and
// fork parent; revision and updated_at are set anew by the daemon. Sessions
// go into the namespace recorded in the session line, unless --namespace (or
// SESSIOND_NAMESPACE) is given, which overrides it.
//
// `export --format markdown` writes the same sessions for people to read; it
// cannot be imported.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Exit codes that scripts may rely on.
const (
	exitOK       = 0
	exitError    = 1
	exitUsage    = 2
	exitNotFound = 3
	exitDamage   = 4
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
	err := dispatch(ctx, args, stdin, stdout, stderr)
	code := exitCode(err)
	if err != nil && !errors.Is(err, errSilent) {
		fmt.Fprintf(stderr, "sessionctl: %s\n", oneLine(err.Error()))
	}
	return code
}

// errSilent ends a command with a non-zero code whose explanation the command
// has already printed (fsck's findings).
var errSilent = errors.New("already reported")

// exitErr carries an exit code other than the one exitCode would derive.
type exitErr struct {
	code int
	err  error
}

func (e *exitErr) Error() string { return e.err.Error() }
func (e *exitErr) Unwrap() error { return e.err }

// usageErrorf reports a mistake in the command line (exit code 2).
func usageErrorf(format string, a ...any) error {
	return &exitErr{code: exitUsage, err: fmt.Errorf(format, a...)}
}

// notFoundErrorf reports a session that does not exist (exit code 3).
func notFoundErrorf(format string, a ...any) error {
	return &exitErr{code: exitNotFound, err: fmt.Errorf(format, a...)}
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

// oneLine keeps an error message on one line, as scripts read stderr by line.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
}
