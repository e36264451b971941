package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"golang.org/x/term"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"

	"github.com/sessiond/sessiond/client"
	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// defaultTimeout bounds connecting to the daemon and each unary call.
const defaultTimeout = 10 * time.Second

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
	timeout      time.Duration
	security     securityFlags // --token, --tls*
	contextName  string        // --context or SESSIOND_CONTEXT
	context      string        // the config file's context in use, if any

	stdin          io.Reader
	stdout, stderr io.Writer

	// started: a command's own code ran, so an error is the command's, not
	// the command line's (cobra's unknown-command and argument errors).
	started bool

	conn   *grpc.ClientConn
	client sessiondv1.SessionStoreServiceClient
}

// terminal tells whether stdin is a terminal (rm and rewind may ask for
// confirmation) or stderr is one (progress counters are drawn). A variable
// so that tests can stand in for a person at a terminal.
var terminal = isTerminal

// usageTemplate is cobra's default with "usage:" in lower case, as the
// errors say it.
const usageTemplate = `usage:{{if .HasAvailableSubCommands}} {{.CommandPath}} [flags] COMMAND [ARGS]{{else if .Runnable}} {{.UseLine}}{{end}}{{if gt (len .Aliases) 0}}

Aliases:
  {{.NameAndAliases}}{{end}}{{if .HasExample}}

Examples:
{{.Example}}{{end}}{{if .HasAvailableSubCommands}}

Commands:{{range .Commands}}{{if (or .IsAvailableCommand (eq .Name "help"))}}
  {{rpad .Name .NamePadding }} {{.Short}}{{end}}{{end}}{{end}}{{if .HasAvailableLocalFlags}}

Flags:
{{.LocalFlags.FlagUsages | trimTrailingWhitespaces}}{{end}}{{if .HasAvailableInheritedFlags}}

Global flags:
{{.InheritedFlags.FlagUsages | trimTrailingWhitespaces}}{{end}}{{if .HasAvailableSubCommands}}

Run 'sessionctl help COMMAND' (or 'sessionctl COMMAND --help') for a command's flags.{{end}}
`

func init() {
	cobra.EnableCommandSorting = false // help lists the commands in the README's order
}

// newRoot builds the command tree for one invocation. Every command, its
// flags and its help come from here: help, shell completion and the man
// pages are generated from the same definitions.
func newRoot(e *env) *cobra.Command {
	root := &cobra.Command{
		Use:   "sessionctl",
		Short: "administer a sessiond daemon",
		Long: `sessionctl administers a sessiond daemon: it lists, shows, creates, appends to,
updates, searches, renames, forks, rewinds, deletes, purges, exports, imports and
watches sessions over gRPC, and checks a file data dir offline (fsck).

A session argument (ID|ALIAS) shaped like a UUID is an id, anything else an
alias. Flags may come before or after the arguments.

Exit codes: 0 ok, 1 error, 2 usage, 3 not found; fsck: 0 clean, 1 errors
corrected, 4 errors left, 8 not checked (data dir in use or unreadable). With --json, an error is a JSON object on stderr:
{"code":"NOT_FOUND","message":"...","exit_code":3}.`,
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usageErrorf("no command given; 'sessionctl help' lists the commands")
		},
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			e.namespaceSet = os.Getenv("SESSIOND_NAMESPACE") != "" || cmd.Flags().Changed("namespace")
			if err := e.applyContext(cmd); err != nil {
				return err
			}
			if err := storage.ValidateNamespace(e.namespace); err != nil {
				return usageErrorf("--namespace: %v", err)
			}
			if e.timeout < 0 {
				return usageErrorf("--timeout must not be negative")
			}
			e.started = true
			return nil
		},
	}
	root.SetIn(e.stdin)
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	root.SetUsageTemplate(usageTemplate)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		if !c.HasParent() {
			return usageErrorf("%v; see 'sessionctl help'", err)
		}
		path := strings.TrimPrefix(c.CommandPath(), root.Name()+" ")
		return usageErrorf("%s: %v; see 'sessionctl help %s'", path, err, path)
	})
	root.Version = ctlVersion()
	root.SetVersionTemplate("sessionctl {{.Version}}\n")

	addr := cmp.Or(os.Getenv("SESSIOND_ADDR"), client.DefaultAddr)
	pf := root.PersistentFlags()
	pf.StringVar(&e.addr, "addr", addr, "daemon address: host:port or unix:/path (env SESSIOND_ADDR)")
	pf.StringVar(&e.namespace, "namespace", os.Getenv("SESSIOND_NAMESPACE"), "namespace; empty is the default one (env SESSIOND_NAMESPACE)")
	pf.BoolVar(&e.json, "json", false, "machine-readable output: JSON lines on stdout, errors as a JSON object on stderr")
	addSecurityFlags(root, &e.security)
	pf.StringVar(&e.contextName, "context", os.Getenv(configEnv), "the config file's context to use instead of its current-context (env "+configEnv+"); see 'sessionctl help config'")
	pf.DurationVar(&e.timeout, "timeout", defaultTimeout, "limit for connecting to the daemon and for each single call (0: none); streams (ls, export, watch) run as long as they need once connected")

	root.AddCommand(
		lsCmd(e), showCmd(e), createCmd(e), appendCmd(e), updateCmd(e), rmCmd(e), renameCmd(e), forkCmd(e), rewindCmd(e), searchCmd(e),
		exportCmd(e), importCmd(e), purgeCmd(e), watchCmd(e), healthCmd(e), versionCmd(e), fsckCmd(e),
		tokenCmd(e), configCmd(e), manCmd(root),
	)
	root.SetHelpCommand(helpCmd(root))
	return root
}

// helpCmd replaces cobra's help command so that help for an unknown command
// is a usage error (exit 2), as it was before cobra.
func helpCmd(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:   "help [COMMAND]",
		Short: "show the help of sessionctl or of a command",
		ValidArgsFunction: func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			var names []string
			for _, c := range root.Commands() {
				if c.IsAvailableCommand() && strings.HasPrefix(c.Name(), toComplete) {
					names = append(names, c.Name()+"\t"+c.Short)
				}
			}
			return names, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			c, rest, err := root.Find(args)
			if err != nil || len(rest) > 0 {
				return usageErrorf("unknown command %q; see 'sessionctl help'", strings.Join(args, " "))
			}
			c.InitDefaultHelpFlag() // as 'COMMAND --help' shows it
			return c.Help()
		},
	}
}

// noArgs, exactArgs and rangeArgs check a command's positional arguments,
// failing with a usage error (exit 2) that shows the synopsis.
func noArgs(cmd *cobra.Command, args []string) error { return rangeArgs(0, 0)(cmd, args) }

func exactArgs(n int) cobra.PositionalArgs { return rangeArgs(n, n) }

func rangeArgs(minPos, maxPos int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < minPos || maxPos >= 0 && len(args) > maxPos {
			if !cmd.HasParent() && len(args) > 0 {
				return usageErrorf("unknown command %q; see 'sessionctl help'", args[0])
			}
			return usageErrorf("%s: wrong number of arguments; usage: %s", cmd.Name(), cmd.UseLine())
		}
		return nil
	}
}

// dial opens the connection on first use and waits, up to --timeout, until
// it is ready, so that an address where something other than a gRPC server
// accepts TCP fails fast instead of after gRPC's 20 s handshake limit. A
// daemon that refuses connections is reported by the first call, with its
// reason.
func (e *env) dial(ctx context.Context) (sessiondv1.SessionStoreServiceClient, error) {
	if e.client != nil {
		return e.client, nil
	}
	target := e.addr
	if target == "" {
		return nil, usageErrorf("--addr is empty; give host:port or unix:/path")
	}
	creds, err := e.security.dialOptions(target)
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(target, append(creds,
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxRecvBytes), grpc.MaxCallSendMsgSize(maxRecvBytes)),
		grpc.WithUnaryInterceptor(e.unaryTimeout),
	)...)
	if err != nil {
		return nil, usageErrorf("--addr %q: %v; give host:port or unix:/path", target, err)
	}
	if err := e.waitConnected(ctx, conn); err != nil {
		_ = conn.Close()
		return nil, err
	}
	e.conn = conn
	e.client = sessiondv1.NewSessionStoreServiceClient(conn)
	return e.client, nil
}

// waitConnected waits until conn is ready or has failed to connect (the
// first call then says why), within --timeout.
func (e *env) waitConnected(ctx context.Context, conn *grpc.ClientConn) error {
	conn.Connect()
	wctx := ctx
	if e.timeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, e.timeout)
		defer cancel()
	}
	for {
		st := conn.GetState()
		if st == connectivity.Ready || st == connectivity.TransientFailure {
			return nil
		}
		if !conn.WaitForStateChange(wctx, st) {
			if ctx.Err() != nil {
				return &exitErr{code: exitError, grpc: codes.Canceled, err: fmt.Errorf("interrupted while connecting to %s", e.addr)}
			}
			return &exitErr{code: exitError, grpc: codes.DeadlineExceeded, err: fmt.Errorf(
				"no gRPC answer from %s within %s (--timeout); is sessiond listening there, and not another program?", e.addr, e.timeout)}
		}
	}
}

// unaryTimeout bounds every unary call by --timeout unless its context
// already has a deadline.
func (e *env) unaryTimeout(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if _, ok := ctx.Deadline(); !ok && e.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, e.timeout)
		defer cancel()
	}
	return invoker(ctx, method, req, reply, cc, opts...)
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
		return sessionArg{}, usageErrorf("%q is neither a session id (UUID) nor a valid alias: %v", safeLine(s), err)
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

// labelsFlag collects repeated K=V flags into a map (a pflag.Value).
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

func (l labelsFlag) Type() string { return "K=V" }

// parseCount parses a non-negative integer argument.
func parseCount(what, s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, usageErrorf("%s %q is not a non-negative integer", what, s)
	}
	return n, nil
}
