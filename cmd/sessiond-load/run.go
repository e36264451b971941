package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/sessiond/sessiond/internal/buildinfo"
	"github.com/sessiond/sessiond/storage"
)

// The append mode's clients (--client).
const (
	clientLean = "lean"
	clientGRPC = "grpc"
)

// The append mode's RPCs (--rpc).
const (
	rpcUnary  = "unary"
	rpcStream = "stream"
)

// config is the command line of one run. Each mode registers only the flags
// it reads.
type config struct {
	addr      string
	namespace string
	json      bool

	clients  int
	sessions int
	duration time.Duration
	count    int
	size     int
	warmup   int
	populate int
	prefill  int
	turns    bool
	messages int
	batch    int
	repeat   int
	dir      string
	tempDir  bool          // dir was made by this run (no --dir given)
	cleanup  bool          // --cleanup: remove what the run wrote
	timeout  time.Duration // per call, so that a hung daemon ends the run
	metrics  string        // append: the daemon's --metrics-listen address, or ""
	client   string        // append: clientLean or clientGRPC
	rpc      string        // append: rpcUnary or rpcStream

	// deltas
	rate int

	// soak
	sessiond  string
	watchers  int
	stalled   int
	killEvery time.Duration
	sample    time.Duration

	// searchlag
	samples     int
	sampleEvery time.Duration
	wait        time.Duration
	within      time.Duration

	createdMu sync.Mutex
	created   []string // ids of the sessions the run created, for --cleanup
}

// mode is one kind of measurement.
type mode struct {
	name  string
	help  string
	flags func(fs *flag.FlagSet, c *config)
	run   func(ctx context.Context, c *config, stderr io.Writer) (report, error)
	// daemon reports whether the mode talks to sessiond (fsync does not).
	daemon bool
}

// report is what a mode measured: JSON with --json, else a table.
type report interface {
	rows() [][2]string
}

var modes = []mode{
	{
		name: "append", daemon: true,
		help: "N clients append one message per call to M sessions; ops/s and latency",
		flags: func(fs *flag.FlagSet, c *config) {
			appendFlags(fs, c, 1, 10*time.Second, 100000)
			fs.IntVar(&c.warmup, "warmup", 5, "untimed appends per client before the run")
			fs.StringVar(&c.client, "client", clientLean, "the appends' gRPC client: "+clientLean+" (a minimal one, one call at a time per connection, like redis-benchmark's) or "+clientGRPC+" (grpc-go's)")
			fs.StringVar(&c.metrics, "metrics", "", "the daemon's --metrics-listen `host:port` (loopback): also report its flushes over the timed run (appends per flush, mean flush and handling time)")
			fs.IntVar(&c.prefill, "prefill", 0, "messages (of --size bytes) each session holds before the run: the cost of appending to long sessions")
			fs.BoolVar(&c.turns, "turns", false, "every second append of a client is an assistant's answer naming its model and token usage, as a chat's turns are stored (each session's tally changes), instead of only user messages")
		},
		run: runAppend,
	},
	{
		name: "searchlag", daemon: true,
		help: "N clients append messages, each starting with a 22-byte token of its own, to M sessions at full rate while a prober searches for the latest acknowledged: the lag until each is found (p50/p90/p99/max, share within --within) and appends/s",
		flags: func(fs *flag.FlagSet, c *config) {
			appendFlags(fs, c, 16, 30*time.Second, 1000000)
			fs.IntVar(&c.samples, "samples", 2000, "messages sampled at most")
			fs.DurationVar(&c.sampleEvery, "sample-every", 50*time.Millisecond, "sample the latest acknowledged message this often (or as often as the searches allow)")
			fs.DurationVar(&c.wait, "wait", 10*time.Second, "give a sampled message up as not found this long after its acknowledgement")
			fs.DurationVar(&c.within, "within", 2*time.Second, "report the share of sampled messages found within this lag")
		},
		run: runSearchLag,
	},
	{
		name: "health", daemon: true,
		help: "sequential grpc.health.v1 Check calls: the unary round trip",
		flags: func(fs *flag.FlagSet, c *config) {
			fs.DurationVar(&c.duration, "duration", 10*time.Second, "stop after this long")
			fs.IntVar(&c.count, "count", 2000, "stop after this many calls")
			fs.IntVar(&c.warmup, "warmup", 50, "untimed calls before the run")
		},
		run: runHealth,
	},
	{
		name: "list", daemon: true,
		help: "times ListSessions of the namespace (after creating --populate sessions)",
		flags: func(fs *flag.FlagSet, c *config) {
			fs.IntVar(&c.populate, "populate", 0, "sessions to create first")
			fs.IntVar(&c.clients, "clients", 16, "concurrent clients creating sessions")
			fs.IntVar(&c.repeat, "repeat", 3, "listings timed")
		},
		run: runList,
	},
	{
		name: "load", daemon: true,
		help: "creates a session of N messages, then times LoadSession: messages/s",
		flags: func(fs *flag.FlagSet, c *config) {
			fs.IntVar(&c.messages, "messages", 10000, "messages in the session")
			fs.IntVar(&c.size, "size", 1024, "bytes of content per message")
			fs.IntVar(&c.batch, "batch", 500, "messages per AppendMessages while filling the session")
			fs.IntVar(&c.repeat, "repeat", 3, "loads timed")
		},
		run: runLoad,
	},
	{
		name: "fsync",
		help: "no daemon: appends --size bytes to a file in --dir and fdatasyncs, each call",
		flags: func(fs *flag.FlagSet, c *config) {
			fs.StringVar(&c.dir, "dir", "", "directory on the filesystem to measure (default: a new temp folder, removed after; $TMPDIR may be tmpfs: give the data dir's filesystem to measure its disk)")
			fs.DurationVar(&c.duration, "duration", 10*time.Second, "stop after this long")
			fs.IntVar(&c.count, "count", 1000, "stop after this many appends")
			fs.IntVar(&c.size, "size", 1024, "bytes per append")
			fs.IntVar(&c.warmup, "warmup", 10, "untimed appends before the run")
		},
		run: runFsync,
	},
	{
		name: "deltas", daemon: true,
		help: "live turns: writers stream 16-byte deltas into open messages while a watcher per session joins mid-stream; checks every delta arrived once and in order, and reports the watchers' lag",
		flags: func(fs *flag.FlagSet, c *config) {
			fs.IntVar(&c.sessions, "sessions", 100, "sessions, each with an open message and its writer")
			fs.IntVar(&c.rate, "rate", 50, "deltas a second per session")
			fs.IntVar(&c.size, "size", 16, "bytes per delta (16: each carries its send time)")
			fs.DurationVar(&c.duration, "duration", 10*time.Second, "how long the writers write")
		},
		run: runDeltas,
	},
	{
		name: "startup",
		help: "starts sessiond over an existing --dir --repeat times, timing each start until it is ready (a SERVING health check, then a listing's first answer), after a clean stop and (with --load) after kill -9 under append load; the sessions the load creates stay",
		flags: func(fs *flag.FlagSet, c *config) {
			fs.StringVar(&c.sessiond, "sessiond", "sessiond", "the sessiond binary to run")
			fs.StringVar(&c.dir, "dir", "", "the daemon's data dir (required: the sessions to start with)")
			fs.IntVar(&c.repeat, "repeat", 3, "start-ups timed (each kind)")
			fs.DurationVar(&c.duration, "load", 0, "append for this long before each kill -9 (0: time clean start-ups only)")
			fs.IntVar(&c.clients, "clients", 16, "appending clients, each on its own new session")
			fs.IntVar(&c.size, "size", 1024, "bytes of content per appended message")
		},
		run: runStartup,
	},
	{
		name: "soak",
		help: "starts sessiond over --dir and runs appenders, watchers and stalled readers for --duration, kill -9 and restart every --kill-every; prints the daemon's RSS over time and fails if an acknowledged append is lost",
		flags: func(fs *flag.FlagSet, c *config) {
			fs.StringVar(&c.sessiond, "sessiond", "sessiond", "the sessiond binary to run")
			fs.StringVar(&c.dir, "dir", "", "data dir for the daemon, created if missing (default: a new temp folder, kept for inspection unless --cleanup)")
			fs.DurationVar(&c.duration, "duration", 10*time.Minute, "stop after this long")
			fs.IntVar(&c.clients, "clients", 8, "appenders, each on its own session")
			fs.IntVar(&c.watchers, "watchers", 16, "watches of the appenders' sessions, reconnecting after each restart")
			fs.IntVar(&c.stalled, "stalled", 4, "readers that load a 4 MiB session, read one frame and stop reading")
			fs.IntVar(&c.size, "size", 1024, "bytes of content per appended message")
			fs.DurationVar(&c.killEvery, "kill-every", 2*time.Minute, "kill -9 and restart the daemon this often")
			fs.DurationVar(&c.sample, "sample", 10*time.Second, "print the daemon's RSS this often")
		},
		run: runSoak,
	},
}

// appendFlags are the flags of the modes that append at full rate (append,
// searchlag), with their defaults.
func appendFlags(fs *flag.FlagSet, c *config, clients int, duration time.Duration, count int) {
	fs.IntVar(&c.clients, "clients", clients, "concurrent clients, each on its own connection")
	fs.IntVar(&c.sessions, "sessions", 0, "sessions written (client i's k-th append goes to session (i + k*N) mod M; 0 = one per client)")
	fs.DurationVar(&c.duration, "duration", duration, "stop after this long")
	fs.IntVar(&c.count, "count", count, "stop after this many appends in all")
	fs.IntVar(&c.size, "size", 1024, "bytes of content per message")
	fs.StringVar(&c.rpc, "rpc", rpcUnary, "how appends are sent: "+rpcUnary+" (an AppendMessages call each) or "+rpcStream+" (each client's over one AppendStream call, one in flight)")
}

// commonFlags are accepted before the mode and after it.
func commonFlags(fs *flag.FlagSet, c *config) {
	fs.StringVar(&c.addr, "addr", c.addr, "sessiond address, host:port on loopback")
	fs.StringVar(&c.namespace, "namespace", c.namespace, "namespace of the sessions the run creates (\"\" is the default namespace; without the flag: a new one per run, sessiond-load-TIME-RANDOM, so that a run never mixes with other sessions)")
	fs.BoolVar(&c.cleanup, "cleanup", c.cleanup, "remove what the run wrote when it ends: the sessions it created, and the data dir it made")
	fs.BoolVar(&c.json, "json", c.json, "write the report as one JSON object")
	fs.DurationVar(&c.timeout, "timeout", c.timeout, "deadline of each call")
}

// version is set at release time with -ldflags "-X main.version=v1.2.3";
// otherwise buildinfo falls back to what the Go toolchain recorded.
var version string

// run is the whole command; main only maps its error to an exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := &config{addr: "127.0.0.1:7437", timeout: 60 * time.Second}
	global := flag.NewFlagSet("sessiond-load", flag.ContinueOnError)
	global.SetOutput(io.Discard)
	// Flags up to the mode are the command's; the rest are the mode's.
	global.SetInterspersed(false)
	commonFlags(global, c)
	showVersion := global.Bool("version", false, "print the version and exit")
	if err := parseFlags(global, args, func() { usage(stdout, global) }); err != nil {
		return err
	}
	if *showVersion {
		_, err := fmt.Fprintln(stdout, "sessiond-load", buildinfo.Version(version))
		return err
	}
	if global.NArg() == 0 {
		return usagef("no mode given; choose one of %s", modeNames())
	}
	name := global.Arg(0)
	var m *mode
	for i := range modes {
		if modes[i].name == name {
			m = &modes[i]
		}
	}
	if m == nil {
		return usagef("unknown mode %q; choose one of %s", name, modeNames())
	}

	fs := flag.NewFlagSet("sessiond-load "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	commonFlags(fs, c)
	m.flags(fs, c)
	modeUsage := func() {
		fmt.Fprintf(stdout, "Usage: sessiond-load %s [FLAGS]\n\n%s.\n\nFlags:\n", name, m.help)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	if err := parseFlags(fs, global.Args()[1:], modeUsage); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	if err := c.check(m); err != nil {
		return err
	}
	var err error
	// --namespace "" names the default namespace; only an absent flag asks
	// for a namespace of the run's own.
	if !global.Changed("namespace") && !fs.Changed("namespace") {
		if m.name == "list" && c.populate == 0 {
			return usagef("list without --populate lists an existing namespace: give --namespace (\"\" for the default one)")
		}
		if c.namespace, err = runNamespace(time.Now()); err != nil {
			return err
		}
	}
	if m.name != "health" && m.name != "fsync" {
		fmt.Fprintf(stderr, "sessiond-load: writing into namespace %s\n", c.namespace)
	}
	if c.dir == "" && (m.name == "soak" || m.name == "fsync") {
		if c.dir, err = os.MkdirTemp("", "sessiond-load-"+m.name+"-"); err != nil {
			return err
		}
		c.tempDir = true
	}

	rep, err := m.run(ctx, c, stderr)
	if cerr := c.clean(m, stderr); cerr != nil && err == nil {
		err = cerr
	}
	if rep != nil {
		if werr := write(stdout, c.json, rep); werr != nil && err == nil {
			err = werr
		}
	}
	return err
}

// parseFlags parses args, printing the usage (once) on -h and turning a bad
// flag into a usage error, which main reports with a one-line hint.
func parseFlags(fs *flag.FlagSet, args []string, usage func()) error {
	// pflag calls fs.Usage on every parse error and on -h; the usage is
	// printed here instead, for -h alone.
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage()
			return err
		}
		for _, a := range args {
			// -clients 16, as Go's flag package took it: pflag reads it as
			// the shorthands c, l, i, ... and names only the first.
			if len(a) > 2 && a[0] == '-' && a[1] != '-' && strings.Contains(err.Error(), "shorthand") {
				name, _, _ := strings.Cut(a[1:], "=")
				return usagef("%v; flags take two dashes: --%s", err, name)
			}
		}
		return usagef("%v", err)
	}
	return nil
}

func usage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: sessiond-load [FLAGS] MODE [MODE FLAGS]\n\nModes:\n")
	for _, m := range modes {
		fmt.Fprintf(w, "  %-9s %s\n", m.name, m.help)
	}
	fmt.Fprintf(w, "\nFlags (also accepted after the mode):\n")
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	fmt.Fprintf(w, "\n'sessiond-load MODE --help' lists a mode's flags.\n")
}

func modeNames() string {
	names := make([]string, len(modes))
	for i, m := range modes {
		names[i] = m.name
	}
	return strings.Join(names, ", ")
}

// runNamespace names a run's own namespace: its start time and a random
// suffix, so that two runs started in the same second differ.
func runNamespace(now time.Time) (string, error) {
	var b [3]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return "sessiond-load-" + now.UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b[:]), nil
}

// created records a session the run made, for --cleanup.
func (c *config) recordCreated(id string) {
	c.createdMu.Lock()
	c.created = append(c.created, id)
	c.createdMu.Unlock()
}

// clean removes, with --cleanup, what the run wrote: the sessions it created
// in a running daemon, and the data dir it made. Without --cleanup it says
// what it left. fsync's temp folder holds nothing once its file is removed,
// so it goes either way.
func (c *config) clean(m *mode, stderr io.Writer) error {
	if c.tempDir && (c.cleanup || m.name == "fsync") {
		if err := os.RemoveAll(c.dir); err != nil {
			return fmt.Errorf("cleanup: %w", err)
		}
	} else if c.tempDir {
		fmt.Fprintf(stderr, "sessiond-load: the daemon's data dir %s is kept; --cleanup removes it\n", c.dir)
	}
	if !m.daemon || len(c.created) == 0 {
		return nil
	}
	if !c.cleanup {
		fmt.Fprintf(stderr, "sessiond-load: %d sessions left in namespace %s; --cleanup deletes them at the end of a run\n", len(c.created), c.namespace)
		return nil
	}
	return deleteSessions(c, c.created)
}

// check refuses values that would make a run unbounded or meaningless, and
// any address that is not loopback.
func (c *config) check(m *mode) error {
	if m.daemon {
		if err := checkLoopback(c.addr); err != nil {
			return err
		}
	}
	if c.metrics != "" {
		if err := checkLoopback(c.metrics); err != nil {
			return usagef("--metrics %q: want the daemon's --metrics-listen host:port on loopback", c.metrics)
		}
	}
	if c.timeout <= 0 {
		return usagef("--timeout must be positive")
	}
	switch m.name {
	case "append", "searchlag":
		if c.sessions == 0 {
			c.sessions = c.clients
		}
		if c.clients < 1 || c.clients > 1024 || c.sessions < 1 || c.sessions > 100000 {
			return usagef("--clients must be 1..1024 and --sessions 1..100000 (got %d, %d)", c.clients, c.sessions)
		}
		if c.rpc != rpcUnary && c.rpc != rpcStream {
			return usagef("--rpc must be %s or %s (got %q)", rpcUnary, rpcStream, c.rpc)
		}
		if m.name == "searchlag" {
			if c.samples < 1 || c.samples > 100000 {
				return usagef("--samples must be 1..100000 (got %d)", c.samples)
			}
			if c.sampleEvery <= 0 || c.wait <= 0 || c.within <= 0 {
				return usagef("--sample-every, --wait and --within must be positive")
			}
			break
		}
		if c.prefill < 0 || c.prefill > 100000 {
			return usagef("--prefill must be 0..100000 (got %d)", c.prefill)
		}
		if c.client != clientLean && c.client != clientGRPC {
			return usagef("--client must be %s or %s (got %q)", clientLean, clientGRPC, c.client)
		}
	case "list":
		if c.populate < 0 || c.clients < 1 || c.clients > 1024 {
			return usagef("--populate must be >= 0 and --clients 1..1024")
		}
	case "load":
		if c.messages < 1 || c.batch < 1 {
			return usagef("--messages and --batch must be positive")
		}
	case "startup":
		if c.sessiond == "" || c.dir == "" {
			return usagef("startup needs --sessiond, the daemon's binary, and --dir, its data dir")
		}
		if c.clients < 1 || c.clients > 1024 || c.duration < 0 {
			return usagef("--clients must be 1..1024 and --load >= 0")
		}
	case "soak":
		if c.sessiond == "" {
			return usagef("soak needs --sessiond, the daemon's binary")
		}
		if c.clients < 1 || c.clients > 256 || c.watchers < 0 || c.watchers > 4096 || c.stalled < 0 || c.stalled > 256 {
			return usagef("--clients must be 1..256, --watchers 0..4096 and --stalled 0..256")
		}
		if c.duration <= 0 || c.duration > 24*time.Hour || c.killEvery <= 0 || c.sample <= 0 {
			return usagef("--duration must be within 24h, and --kill-every and --sample positive")
		}
	}
	if c.namespace != "" {
		if err := storage.ValidateNamespace(c.namespace); err != nil {
			return usagef("--namespace: %v", err)
		}
	}
	if c.size < 0 || c.size > 16<<20 {
		return usagef("--size must be 0..16777216")
	}
	if c.warmup < 0 {
		return usagef("--warmup must be >= 0")
	}
	// Every loop ends by count and by time; zero would mean "never".
	switch m.name {
	case "append", "searchlag", "health", "fsync":
		if c.count < 1 || c.duration <= 0 {
			return usagef("--count and --duration must be positive")
		}
	case "list", "load", "startup":
		if c.repeat < 1 || c.repeat > 1000 {
			return usagef("--repeat must be 1..1000")
		}
	}
	return nil
}

// checkLoopback accepts host:port whose host is a loopback IP or localhost.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return usagef("--addr %q: %v; give host:port on loopback, e.g. 127.0.0.1:7437", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return usagef("--addr %q is not on loopback; sessiond-load only loads a daemon on this machine", addr)
	}
	return nil
}

// write prints rep as JSON or as a two-column table.
func write(w io.Writer, asJSON bool, rep report) error {
	if asJSON {
		return json.NewEncoder(w).Encode(rep)
	}
	rows := rep.rows()
	width := 0
	for _, r := range rows {
		width = max(width, len(r[0]))
	}
	var b strings.Builder
	for _, r := range rows {
		fmt.Fprintf(&b, "%-*s  %s\n", width, r[0], r[1])
	}
	_, err := io.WriteString(w, b.String())
	return err
}
