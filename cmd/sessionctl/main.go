// Command sessionctl administers a sessiond daemon: it lists, shows, creates,
// appends to, updates, searches, renames, forks, rewinds, deletes, exports,
// imports and watches sessions over gRPC, and checks a file data dir offline
// (fsck).
//
// Usage:
//
//	sessionctl [--addr ADDR] [--namespace NS] [--json] [--timeout D] COMMAND [ARGS]
//
// The command tree is built with cobra (cli.go): `sessionctl help CMD` and
// `sessionctl CMD --help` list a command's flags, `sessionctl completion
// bash|zsh|fish` prints a shell completion script (session arguments
// complete to the aliases of a running daemon), and the hidden `sessionctl
// man DIR` writes one man page per command, generated from the same
// definitions.
//
// --addr (or SESSIOND_ADDR, default 127.0.0.1:7437) is host:port or
// unix:/path/to.sock; --namespace (or SESSIOND_NAMESPACE) selects the
// namespace, "" being the default one. --timeout (default 10s) bounds
// connecting and every single call, so that an address where something
// other than sessiond accepts TCP fails fast. Global flags may come before
// or after the command, and each command's flags before or after its
// arguments. A session argument (ID|ALIAS) that is shaped like a UUID is an
// id, anything else an alias.
//
// create, append and update write (write.go). append's message id is a
// UUIDv7 chosen by sessionctl, or --id: the same append run again with its
// --id is a no-op, so a script can retry one whose answer it lost.
//
// # Contexts
//
// $XDG_CONFIG_HOME/sessiond/config.toml (else ~/.config/sessiond/config.toml)
// names daemons as contexts (address, namespace, token-file, tls, tls-ca,
// tls-cert, tls-key); --context NAME (or SESSIOND_CONTEXT) picks one, else
// its current-context does; flags and environment variables win over it
// (config.go). `config view` lists the contexts, `config use NAME` sets
// current-context.
//
// # Tokens and TLS
//
// For a daemon with --auth-tokens and TLS, --token (or SESSIOND_TOKEN) is
// sent as "authorization: Bearer"; --tls-ca FILE (or --tls, trusting the
// system's CAs) connects with TLS, and --tls-cert and --tls-key present a
// client certificate for mutual TLS. A token is never sent without TLS to a
// host that is not loopback. `token add|ls|rm --file FILE` edit the token
// file itself (security.go); add prints the new secret alone on one line.
//
// # Exit codes
//
//	0  ok
//	1  error (daemon unreachable, refused request, damaged data ...)
//	2  usage (bad flags or arguments; rm or rewind without --yes and no terminal)
//	3  not found (the session named does not exist)
//
// fsck follows e2fsck: 0 no damage, 1 damage found and all of it repaired,
// 4 damage left (found without --repair, or not repairable), 8 not checked
// (no such data dir, or a running daemon holds it).
//
// Errors are one line on stderr that says what to do next; with --json
// they are one JSON object instead: {"code":"NOT_FOUND","message":"...",
// "exit_code":3}, where code is the gRPC code name of the failure
// (INVALID_ARGUMENT for a usage error, DATA_LOSS for fsck damage left).
//
// # Output for people
//
// Tables are aligned by display width (CJK and emoji titles included),
// times carry their zone, and every string that came from a client (titles,
// aliases, labels, message content) is printed with its control characters
// neutralised (shown as \x1b and the like), so a stored escape sequence can
// never drive the operator's terminal.
//
// # Output for scripts
//
// With --json, ls, search and watch write one proto3 JSON object per line
// (sessiond.v1.Session, SearchSessionsResponse, WatchSessionResponse), show
// writes the session with its messages as one line, fork, rename, rewind
// and import write the session after the change, rm writes each deleted
// session, fsck writes one line per finding and a last {"summary":...}
// line, and export --output FILE writes {"exported":N,"output":FILE}. watch
// prints its notices on stderr then, as JSON objects ({"watching":ID,...},
// {"reconnecting":ID,...}). When the daemon says OUT_OF_RANGE,
// watch reloads the session and writes an EVENT_TYPE_REPLACED event
// carrying the session as it now is (a reader should reload) before it
// carries on; when the daemon goes away, watch reconnects with exponential
// backoff and resumes after the last revision it printed, ending only on
// an interrupt, a delete, or an error that retrying cannot cure.
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
// fork parent, and its revision (CreateSessionRequest.revision; only a session
// with fewer revisions than import batches ends above it, never below);
// updated_at is set anew by the daemon. Sessions
// go into the namespace recorded in the session line, unless --namespace (or
// SESSIOND_NAMESPACE) names another: then each session is copied there under
// a new id, a name-based UUID of the namespace and the source id (the same
// on every run, so importing twice finds the copies: ALREADY_EXISTS, or a
// replacement with --force), with the source id and namespace in the
// metadata keys sessiond.source_id and sessiond.source_namespace, and a
// fork's parent pointing at its parent's copy. import's progress counter
// (on a terminal) counts sessions.
//
// `export --format markdown` writes the same sessions for people to read; it
// cannot be imported.
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
