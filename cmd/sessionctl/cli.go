package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"golang.org/x/term"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// defaultAddr is where sessiond listens unless told otherwise.
const defaultAddr = "127.0.0.1:7437"

// maxRecvBytes bounds one response frame. LoadSession sends a message bigger
// than its ~1 MiB batch alone, and the daemon accepts messages of 16 MiB by
// default (configurable), so gRPC's 4 MiB default would refuse big ones.
const maxRecvBytes = 1 << 30

// env is one invocation's context: global options, I/O, and the connection,
// which is opened on first use so that fsck and version need no daemon.
type env struct {
	addr         string
	namespace    string
	namespaceSet bool // --namespace or SESSIOND_NAMESPACE given (import uses it)
	json         bool

	stdin          io.Reader
	stdout, stderr io.Writer

	conn   *grpc.ClientConn
	client sessiondv1.SessionStoreServiceClient
}

// command is one sessionctl subcommand.
type command struct {
	name    string
	args    string // synopsis of the arguments and flags
	summary string
	run     func(ctx context.Context, e *env, args []string) error
}

// commands returns the subcommands in the order help lists them.
func commands() []command {
	return []command{
		{"ls", "[ALIAS_PREFIX] [--label K=V]... [--since DURATION|RFC3339] [--limit N]", "list sessions, newest-updated first", cmdLs},
		{"show", "ID|ALIAS [--tail N]", "show a session's header and conversation", cmdShow},
		{"rm", "ID|ALIAS... [--yes]", "delete sessions (asks unless --yes)", cmdRm},
		{"rename", "ID|ALIAS NEWALIAS", "set a session's alias (\"\" removes it)", cmdRename},
		{"fork", "ID|ALIAS [--messages N] [--alias A] [--title T]", "copy a session's first N messages into a new session", cmdFork},
		{"rewind", "ID|ALIAS N", "keep a session's first N messages", cmdRewind},
		{"search", "QUERY [--limit N]", "find sessions and messages containing a text", cmdSearch},
		{"export", "[ID|ALIAS] [--all] [--output FILE] [--format jsonl|markdown]", "write sessions as JSON lines (for import) or Markdown", cmdExport},
		{"import", "FILE|- [--force]", "read sessions from an export, keeping ids and aliases", cmdImport},
		{"watch", "ID|ALIAS [--from-revision N]", "print a session's changes as they happen, until interrupted", cmdWatch},
		{"health", "[--service NAME]", "check the daemon's gRPC health", cmdHealth},
		{"version", "", "print sessionctl's and the daemon's versions", cmdVersion},
		{"fsck", "DATA_DIR [--repair]", "check (and repair) a file data dir offline", cmdFsck},
	}
}

func dispatch(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	e := &env{stdin: stdin, stdout: stdout, stderr: stderr}
	fs := flag.NewFlagSet("sessionctl", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	addrEnv, nsEnv := os.Getenv("SESSIOND_ADDR"), os.Getenv("SESSIOND_NAMESPACE")
	if addrEnv == "" {
		addrEnv = defaultAddr
	}
	fs.StringVar(&e.addr, "addr", addrEnv, "daemon address: host:port or unix:/path (env SESSIOND_ADDR)")
	fs.StringVar(&e.namespace, "namespace", nsEnv, "namespace; empty is the default one (env SESSIOND_NAMESPACE)")
	fs.BoolVar(&e.json, "json", false, "machine-readable output (JSON lines, proto3 JSON)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printHelp(stdout, fs)
			return nil
		}
		return usageErrorf("%v; see 'sessionctl help'", err)
	}
	e.namespaceSet = nsEnv != ""
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "namespace" {
			e.namespaceSet = true
		}
	})
	if err := storage.ValidateNamespace(e.namespace); err != nil {
		return usageErrorf("--namespace: %v", err)
	}
	if fs.NArg() == 0 {
		return usageErrorf("no command given; 'sessionctl help' lists the commands")
	}
	name, rest := fs.Arg(0), fs.Args()[1:]
	if name == "help" {
		if len(rest) > 0 {
			for _, c := range commands() {
				if c.name == rest[0] {
					printCommandHelp(stdout, c, newFlagSet(c.name, e))
					return nil
				}
			}
			return usageErrorf("unknown command %q; see 'sessionctl help'", rest[0])
		}
		printHelp(stdout, fs)
		return nil
	}
	for _, c := range commands() {
		if c.name == name {
			defer e.close()
			err := c.run(ctx, e, rest)
			if errors.Is(err, flag.ErrHelp) {
				// The command printed its own help on request.
				return nil
			}
			return err
		}
	}
	return usageErrorf("unknown command %q; see 'sessionctl help'", name)
}

func printHelp(w io.Writer, global *flag.FlagSet) {
	fmt.Fprintln(w, "usage: sessionctl [--addr ADDR] [--namespace NS] [--json] COMMAND [ARGS]")
	fmt.Fprintln(w, "\nCommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nGlobal flags:")
	global.SetOutput(w)
	global.PrintDefaults()
	global.SetOutput(io.Discard)
	fmt.Fprintln(w, "\nExit codes: 0 ok, 1 error, 2 usage, 3 not found, 4 fsck found damage.")
	fmt.Fprintln(w, "Run 'sessionctl help COMMAND' for a command's flags.")
}

func printCommandHelp(w io.Writer, c command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage: sessionctl [global flags] %s %s\n\n%s\n", c.name, c.args, c.summary)
	hasFlags := false
	fs.VisitAll(func(*flag.Flag) { hasFlags = true })
	if hasFlags {
		fmt.Fprintln(w, "\nFlags:")
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
}

// newFlagSet makes a command's flag set. Every command accepts --json too,
// so that `sessionctl ls --json` works as well as `sessionctl --json ls`.
func newFlagSet(name string, e *env) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.BoolVar(&e.json, "json", e.json, "machine-readable output (JSON lines, proto3 JSON)")
	return fs
}

// parseArgs parses a command's flags wherever they appear among its
// arguments (`fork X --messages 3` as well as `fork --messages 3 X`) and
// checks the number of positional arguments. Everything after "--" is
// positional.
func parseArgs(e *env, fs *flag.FlagSet, args []string, minPos, maxPos int) ([]string, error) {
	c := findCommand(fs.Name())
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				printCommandHelp(e.stdout, c, fs)
				return nil, err
			}
			return nil, usageErrorf("%s: %v; see 'sessionctl help %s'", fs.Name(), err, fs.Name())
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	if len(pos) < minPos || maxPos >= 0 && len(pos) > maxPos {
		return nil, usageErrorf("%s: wrong number of arguments; usage: sessionctl %s %s", fs.Name(), c.name, c.args)
	}
	return pos, nil
}

func findCommand(name string) command {
	for _, c := range commands() {
		if c.name == name {
			return c
		}
	}
	return command{name: name}
}

// dial opens the connection on first use. grpc.NewClient connects lazily, so
// an unreachable daemon shows as UNAVAILABLE on the first call; describe
// turns that into advice.
func (e *env) dial() (sessiondv1.SessionStoreServiceClient, error) {
	if e.client != nil {
		return e.client, nil
	}
	target := e.addr
	if target == "" {
		return nil, usageErrorf("--addr is empty; give host:port or unix:/path")
	}
	conn, err := grpc.NewClient(target,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxRecvBytes), grpc.MaxCallSendMsgSize(maxRecvBytes)),
	)
	if err != nil {
		return nil, usageErrorf("--addr %q: %v; give host:port or unix:/path", target, err)
	}
	e.conn = conn
	e.client = sessiondv1.NewSessionStoreServiceClient(conn)
	return e.client, nil
}

func (e *env) close() {
	if e.conn != nil {
		_ = e.conn.Close()
	}
}

// sessionArg is an ID|ALIAS argument as the user typed it, with the ref it
// names.
type sessionArg struct {
	text string
	ref  *sessiondv1.SessionRef
}

// parseSessionArg turns ID|ALIAS into a ref: a UUID-shaped argument is an id
// (aliases are never UUID-shaped, so this is never ambiguous), anything else
// an alias, checked here so that a typo is a usage error, not a round trip.
func (e *env) parseSessionArg(s string) (sessionArg, error) {
	if u, err := uuid.Parse(s); err == nil {
		return sessionArg{text: s, ref: &sessiondv1.SessionRef{Namespace: e.namespace, Key: &sessiondv1.SessionRef_Id{Id: u.String()}}}, nil
	}
	if err := storage.ValidateAlias(s); err != nil {
		return sessionArg{}, usageErrorf("%q is neither a session id (UUID) nor a valid alias: %v", s, err)
	}
	return sessionArg{text: s, ref: &sessiondv1.SessionRef{Namespace: e.namespace, Key: &sessiondv1.SessionRef_Alias{Alias: s}}}, nil
}

// idRef names a session by id in the invocation's namespace.
func (e *env) idRef(id string) *sessiondv1.SessionRef {
	return &sessiondv1.SessionRef{Namespace: e.namespace, Key: &sessiondv1.SessionRef_Id{Id: id}}
}

// nsLabel names the namespace in messages.
func (e *env) nsLabel() string {
	if e.namespace == "" {
		return "the default namespace"
	}
	return fmt.Sprintf("namespace %q", e.namespace)
}

// isTerminal reports whether r or w is a terminal (an *os.File on a tty).
func isTerminal(f any) bool {
	type fder interface{ Fd() uintptr }
	if x, ok := f.(fder); ok {
		return term.IsTerminal(int(x.Fd()))
	}
	return false
}

// parseLabels turns repeated K=V flags into a map.
type labelsFlag map[string]string

func (l labelsFlag) String() string { return sortedPairs(l) }

func (l labelsFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("label %q is not KEY=VALUE", s)
	}
	l[k] = v
	return nil
}

// parseCount parses a non-negative integer argument.
func parseCount(what, s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, usageErrorf("%s %q is not a non-negative integer", what, s)
	}
	return n, nil
}
