package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/sessiond/sessiond/server"
	"github.com/sessiond/sessiond/storage"
	"github.com/sessiond/sessiond/storage/file"
)

// config is the daemon's configuration after flags and environment.
type config struct {
	listen          string
	dataDir         string
	storage         string
	logLevel        string
	logFormat       string
	limits          storage.Limits
	shutdownTimeout time.Duration
	maxOpenJournals int
	cacheBytes      int64
	security        securityConfig
	http            httpConfig
	metrics         metricsConfig
	watchHistory    int64
	maxConns        int
	maxStreams      uint
	maxConnIdle     time.Duration
	maxLoads        int
	showVersion     bool
	// retention is each namespace's default idle time to live (--retention),
	// retentionInterval how often the sweeper looks.
	retention         retentionFlag
	retentionInterval time.Duration
	// streamIdleTimeout closes an open message idle this long as interrupted.
	streamIdleTimeout time.Duration

	postgresDSN            string
	postgresMaxConns       int32
	postgresMinConns       int32
	postgresConnectTimeout time.Duration
	// ping, set by a backend that has a database to lose, says whether it
	// answers; health follows it.
	ping storage.Pinger
}

// envPrefix names the environment variable of every flag: --data-dir is
// SESSIOND_DATA_DIR.
const envPrefix = "SESSIOND_"

// minCacheBytes is the least --cache-bytes: below it a value is more
// likely a unit mistake than a budget.
const minCacheBytes = 1 << 20

func envName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// noEnv lists flags that are actions, not settings: an environment variable
// must not turn them on for every start.
var noEnv = map[string]bool{"version": true}

var logLevels = []string{"debug", "info", "warn", "error"}
var logFormats = []string{"json", "console"}

// parseConfig reads the command line over the environment (lookupEnv). The
// flags are GNU style (--flag VALUE, --flag=VALUE), as sessionctl's. A bad
// value is a usageError; --help prints usage on stdout and returns
// pflag.ErrHelp.
func parseConfig(args []string, lookupEnv func(string) (string, bool), stdout io.Writer) (*config, error) {
	cfg := &config{limits: storage.DefaultLimits()}
	fs := pflag.NewFlagSet("sessiond", pflag.ContinueOnError)
	// Errors are reported once, by main, as usage errors; usage goes to
	// stdout only when asked for.
	fs.SetOutput(io.Discard)

	fs.StringVar(&cfg.listen, "listen", "127.0.0.1:7437", "address to serve on: `host:port`, or unix:/path/to.sock for a unix socket (mode 0600)")
	fs.StringVar(&cfg.dataDir, "data-dir", "", "directory of the file store, created 0700 (default $XDG_DATA_HOME/sessiond, else ~/.local/share/sessiond)")
	fs.StringVar(&cfg.storage, "storage", "file", "storage backend: "+strings.Join(backendNames(), ", "))
	fs.StringVar(&cfg.logLevel, "log-level", "info", "log level: "+strings.Join(logLevels, ", "))
	fs.StringVar(&cfg.logFormat, "log-format", "json", "log format on stderr: "+strings.Join(logFormats, ", "))
	fs.DurationVar(&cfg.shutdownTimeout, "shutdown-timeout", 10*time.Second, "on SIGINT/SIGTERM, how long in-flight calls may finish before they are cut off")
	fs.Int64Var(&cfg.cacheBytes, "cache-bytes", file.DefaultCacheBytes, "with --storage file: most message bytes kept in memory for recently used sessions; a session beyond it is read from disk again at its next use, an append to it included")
	fs.IntVar(&cfg.maxOpenJournals, "max-open-journals", file.DefaultMaxOpenJournals, "most session journals the file store keeps open at once (keep well under ulimit -n)")
	fs.StringVar(&cfg.postgresDSN, "postgres-dsn", "", "with --storage postgres: the database, as postgres://user:password@host:port/db?sslmode=... or key=value pairs (the password is never logged)")
	maxConns, minConns := 16, 2
	fs.IntVar(&maxConns, "postgres-max-conns", maxConns, "with --storage postgres: most database connections this replica holds (one more while anything is watched)")
	fs.IntVar(&minConns, "postgres-min-conns", minConns, "with --storage postgres: connections kept open when idle")
	fs.DurationVar(&cfg.postgresConnectTimeout, "postgres-connect-timeout", 30*time.Second, "with --storage postgres: how long start-up waits for an unreachable database before it fails")
	fs.IntVar(&cfg.maxConns, "max-connections", 0, "most client connections at once; more are refused (clients get UNAVAILABLE, or HTTP 503, naming this limit). 0: from the descriptor limit (ulimit -n), leaving room for the store, at most 4096")
	fs.UintVar(&cfg.maxStreams, "max-concurrent-streams", 128, "most calls in progress on one connection (watches included); more wait for one to end")
	fs.DurationVar(&cfg.maxConnIdle, "max-connection-idle", 5*time.Minute, "close a connection with no call in progress for this long (clients reconnect when they next call); 0 keeps idle connections")
	fs.IntVar(&cfg.maxLoads, "max-concurrent-loads", server.DefaultMaxLoads, "most LoadSession calls served at once (each holds about one 1 MiB frame); more are answered RESOURCE_EXHAUSTED")
	fs.Int64Var(&cfg.watchHistory, "watch-history-bytes", storage.DefaultWatchHistoryTotal, "most bytes of change history kept, across all sessions, for watches that resume from a past revision (older ones answer OUT_OF_RANGE: reload)")
	fs.Int64Var(&cfg.limits.MaxMessageBytes, "max-message-bytes", cfg.limits.MaxMessageBytes, "largest encoded message, in bytes")
	fs.Int64Var(&cfg.limits.MaxFrameBytes, "max-frame-bytes", cfg.limits.MaxFrameBytes, "largest request frame, in bytes")
	fs.Int64Var(&cfg.limits.MaxTitleBytes, "max-title-bytes", cfg.limits.MaxTitleBytes, "longest title, in bytes")
	fs.Int64Var(&cfg.limits.MaxSummaryBytes, "max-summary-bytes", cfg.limits.MaxSummaryBytes, "longest summary, in bytes")
	fs.Int64Var(&cfg.limits.MaxMapEntries, "max-map-entries", cfg.limits.MaxMapEntries, "most entries in a session's metadata or labels")
	fs.Int64Var(&cfg.limits.MaxMapKeyBytes, "max-map-key-bytes", cfg.limits.MaxMapKeyBytes, "longest metadata or label key, in bytes")
	fs.Int64Var(&cfg.limits.MaxMapValueBytes, "max-map-value-bytes", cfg.limits.MaxMapValueBytes, "longest metadata or label value, in bytes")
	fs.Int64Var(&cfg.limits.MaxSessionBytes, "max-session-bytes", cfg.limits.MaxSessionBytes, "most message bytes one SaveSession may carry")
	fs.Int64Var(&cfg.limits.MaxQueryBytes, "max-query-bytes", cfg.limits.MaxQueryBytes, "longest search query, in bytes")
	fs.StringVar(&cfg.security.authTokens, "auth-tokens", "", "token `file` (made with 'sessionctl token add'): turns on authentication; every call but health checks needs \"authorization: Bearer <token>\"; reloaded on change and on SIGHUP")
	fs.StringVar(&cfg.security.tlsCert, "tls-cert", "", "serve TLS with this PEM certificate `file` (chain first), reloaded when it changes")
	fs.StringVar(&cfg.security.tlsKey, "tls-key", "", "PEM private key `file` of --tls-cert, reloaded when it changes")
	fs.StringVar(&cfg.security.tlsClientCA, "tls-client-ca", "", "mutual TLS: refuse clients without a certificate signed by a CA in this PEM `file`")
	fs.BoolVar(&cfg.security.insecure, "insecure", false, "allow a non-loopback --listen without TLS or without --auth-tokens (logs a warning)")
	cfg.metrics.addFlags(fs)
	cfg.http.addFlags(fs)
	fs.Var(&cfg.retention, "retention", "a namespace's default idle time to live, `NS=DURATION` (30d, 12h, 90m, 1d12h; =30d for the default namespace): its sessions without their own expire_after are deleted once not updated for that long; repeatable, or comma-separated")
	fs.DurationVar(&cfg.retentionInterval, "retention-interval", storage.DefaultSweepInterval, "how often the daemon looks for sessions past their idle time to live and deletes them (1s to 24h)")
	fs.DurationVar(&cfg.streamIdleTimeout, "stream-idle-timeout", storage.DefaultStreamIdleTimeout, "how long an open message (a live turn) may go without a delta before the daemon closes it as interrupted, keeping its text (1s to 24h)")
	fs.BoolVar(&cfg.showVersion, "version", false, "print the version and exit")

	fs.VisitAll(func(f *pflag.Flag) {
		if !noEnv[f.Name] {
			f.Usage += " (env " + envName(f.Name) + ")"
		}
	})
	// pflag calls Usage on every parse error, not only on --help; the
	// usage is printed below, for --help alone, so that a bad flag gets its
	// error and a one-line hint on stderr (exitCode).
	fs.Usage = func() {}
	printUsage := func() {
		fmt.Fprintf(stdout, "Usage: sessiond [flags]\n\nsessiond serves LLM chat sessions over gRPC (sessiond.v1.SessionStoreService,\ngrpc.health.v1, server reflection).\n\nFlags:\n%s", fs.FlagUsages())
	}

	// The environment first, then the command line over it.
	var envErr error
	fs.VisitAll(func(f *pflag.Flag) {
		if noEnv[f.Name] || envErr != nil {
			return
		}
		if v, ok := lookupEnv(envName(f.Name)); ok {
			if err := fs.Set(f.Name, v); err != nil {
				envErr = usagef("%s=%q: %v", envName(f.Name), v, err)
			}
		}
	})
	if envErr != nil {
		return nil, envErr
	}
	if err := singleDashFlag(fs, args); err != nil {
		return nil, err
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			printUsage()
			return nil, err
		}
		return nil, &usageError{err: err}
	}
	if fs.NArg() > 0 {
		return nil, usagef("unexpected argument %q; sessiond takes flags only", fs.Arg(0))
	}
	if cfg.showVersion {
		return cfg, nil
	}
	if maxConns < 1 || maxConns > 10000 || minConns < 0 || minConns > maxConns {
		return nil, usagef("--postgres-max-conns %d and --postgres-min-conns %d: want 1 <= max <= 10000 and 0 <= min <= max", maxConns, minConns)
	}
	cfg.postgresMaxConns, cfg.postgresMinConns = int32(maxConns), int32(minConns)
	return cfg, cfg.check(lookupEnv)
}

// singleDashFlag refuses a long flag given with one dash (-listen), which
// pflag would read as the shorthands -l -i -s ..., naming its GNU spelling.
func singleDashFlag(fs *pflag.FlagSet, args []string) error {
	for _, a := range args {
		if a == "--" {
			return nil
		}
		if len(a) < 3 || a[0] != '-' || a[1] == '-' {
			continue
		}
		name, _, _ := strings.Cut(a[1:], "=")
		if fs.Lookup(name) != nil {
			return usagef("%s: flags take two dashes: -%s", a, a)
		}
	}
	return nil
}

// check validates values and fills defaults that depend on the environment.
func (cfg *config) check(lookupEnv func(string) (string, bool)) error {
	if _, ok := backends[cfg.storage]; !ok {
		return usagef("--storage %q is not available in this build; choose one of: %s", cfg.storage, strings.Join(backendNames(), ", "))
	}
	if !slices.Contains(logLevels, cfg.logLevel) {
		return usagef("--log-level %q: choose one of: %s", cfg.logLevel, strings.Join(logLevels, ", "))
	}
	if !slices.Contains(logFormats, cfg.logFormat) {
		return usagef("--log-format %q: choose one of: %s", cfg.logFormat, strings.Join(logFormats, ", "))
	}
	if cfg.cacheBytes < minCacheBytes {
		return usagef("--cache-bytes %d must be at least %d (1 MiB)", cfg.cacheBytes, minCacheBytes)
	}
	if cfg.maxOpenJournals < 1 {
		return usagef("--max-open-journals %d must be at least 1", cfg.maxOpenJournals)
	}
	if cfg.storage == "postgres" && cfg.postgresDSN == "" {
		return usagef("--storage postgres needs --postgres-dsn (or %s)", envName("postgres-dsn"))
	}
	if cfg.postgresConnectTimeout < 0 {
		return usagef("--postgres-connect-timeout %v is negative", cfg.postgresConnectTimeout)
	}
	if cfg.maxConns < 0 {
		return usagef("--max-connections %d is negative (0 picks a value from ulimit -n)", cfg.maxConns)
	}
	if cfg.maxStreams < 1 {
		return usagef("--max-concurrent-streams must be at least 1")
	}
	if cfg.maxLoads < 1 {
		return usagef("--max-concurrent-loads %d must be at least 1", cfg.maxLoads)
	}
	if cfg.maxConnIdle < 0 {
		return usagef("--max-connection-idle %v is negative", cfg.maxConnIdle)
	}
	if cfg.watchHistory < storage.WatchHistoryBytes {
		return usagef("--watch-history-bytes %d must be at least %d", cfg.watchHistory, storage.WatchHistoryBytes)
	}
	if cfg.shutdownTimeout < 0 {
		return usagef("--shutdown-timeout %v is negative", cfg.shutdownTimeout)
	}
	if cfg.retentionInterval < time.Second || cfg.retentionInterval > 24*time.Hour {
		return usagef("--retention-interval %v: want 1s to 24h", cfg.retentionInterval)
	}
	if cfg.streamIdleTimeout < time.Second || cfg.streamIdleTimeout > 24*time.Hour {
		return usagef("--stream-idle-timeout %v: want 1s to 24h", cfg.streamIdleTimeout)
	}
	if err := cfg.security.check(); err != nil {
		return err
	}
	if err := cfg.metrics.check(); err != nil {
		return err
	}
	if err := cfg.limits.Validate(); err != nil {
		return &usageError{err: err}
	}
	if cfg.listen == "" {
		return usagef("--listen is empty")
	}
	if err := cfg.http.check(cfg.listen); err != nil {
		return err
	}
	// Only the file store has a data dir; a PostgreSQL daemon names none.
	if cfg.dataDir == "" && cfg.storage == "file" {
		dir, err := defaultDataDir(lookupEnv)
		if err != nil {
			return usagef("no --data-dir given and %v", err)
		}
		cfg.dataDir = dir
	}
	return nil
}

// dataDirField is the start-up log's data_dir: only a store that has one
// (the file store) names it.
func dataDirField(cfg *config) zap.Field {
	if cfg.dataDir == "" {
		return zap.Skip()
	}
	return zap.String("data_dir", cfg.dataDir)
}

// dataDirInUseError is a data dir another daemon holds: one sentence that
// says what to do, still matching storage.ErrLocked for errors.Is.
type dataDirInUseError struct {
	dir string
	err error
}

func (e *dataDirInUseError) Error() string {
	return fmt.Sprintf("data dir %s is in use by another sessiond; stop that daemon first, or give another --data-dir", e.dir)
}

func (e *dataDirInUseError) Unwrap() error { return e.err }

// defaultDataDir follows the XDG base directory spec: $XDG_DATA_HOME/sessiond
// when that is an absolute path, else ~/.local/share/sessiond.
func defaultDataDir(lookupEnv func(string) (string, bool)) (string, error) {
	if x, ok := lookupEnv("XDG_DATA_HOME"); ok && filepath.IsAbs(x) {
		return filepath.Join(x, "sessiond"), nil
	}
	home, ok := lookupEnv("HOME")
	if !ok || home == "" {
		var err error
		if home, err = os.UserHomeDir(); err != nil {
			return "", fmt.Errorf("no home directory: %w", err)
		}
	}
	return filepath.Join(home, ".local", "share", "sessiond"), nil
}

// retentionFlag is --retention: namespace defaults, later ones (the command
// line over the environment) winning for the same namespace.
type retentionFlag map[string]time.Duration

func (r *retentionFlag) String() string {
	if r == nil || len(*r) == 0 {
		return ""
	}
	var parts []string
	for _, ns := range slices.Sorted(maps.Keys(*r)) {
		parts = append(parts, ns+"="+(*r)[ns].String())
	}
	return strings.Join(parts, ",")
}

func (r *retentionFlag) Type() string { return "NS=DURATION" }

func (r *retentionFlag) Set(v string) error {
	if *r == nil {
		*r = make(retentionFlag)
	}
	for _, spec := range strings.Split(v, ",") {
		ns, ttl, err := storage.ParseRetention(strings.TrimSpace(spec))
		if err != nil {
			return err
		}
		(*r)[ns] = ttl
	}
	return nil
}

func backendNames() []string {
	return slices.Sorted(maps.Keys(backends))
}
