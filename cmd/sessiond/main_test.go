package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"

	"github.com/sessiond/sessiond/internal/syncbuf"
	"github.com/sessiond/sessiond/storage"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

func TestParseConfig(t *testing.T) {
	home := env(map[string]string{"HOME": "/home/u"})
	tests := []struct {
		name  string
		args  []string
		env   map[string]string
		check func(t *testing.T, c *config)
	}{
		{"defaults", nil, map[string]string{"HOME": "/home/u"}, func(t *testing.T, c *config) {
			if c.listen != "127.0.0.1:7437" || c.dataDir != "/home/u/.local/share/sessiond" || c.storage != "file" ||
				c.logLevel != "info" || c.logFormat != "json" || c.shutdownTimeout != 10*time.Second || c.limits != storage.DefaultLimits() {
				t.Fatalf("defaults: %+v", c)
			}
		}},
		{"XDG_DATA_HOME", nil, map[string]string{"HOME": "/home/u", "XDG_DATA_HOME": "/xdg"}, func(t *testing.T, c *config) {
			if c.dataDir != "/xdg/sessiond" {
				t.Fatalf("data dir %q", c.dataDir)
			}
		}},
		{"relative XDG_DATA_HOME is ignored", nil, map[string]string{"HOME": "/home/u", "XDG_DATA_HOME": "rel"}, func(t *testing.T, c *config) {
			if c.dataDir != "/home/u/.local/share/sessiond" {
				t.Fatalf("data dir %q", c.dataDir)
			}
		}},
		{"environment", nil, map[string]string{
			"SESSIOND_LISTEN": "unix:/run/s.sock", "SESSIOND_DATA_DIR": "/d", "SESSIOND_LOG_LEVEL": "debug",
			"SESSIOND_LOG_FORMAT": "console", "SESSIOND_MAX_TITLE_BYTES": "99", "SESSIOND_SHUTDOWN_TIMEOUT": "3s",
			"SESSIOND_MAX_FRAME_BYTES": "12345", "SESSIOND_STORAGE": "file", "SESSIOND_MAX_OPEN_JOURNALS": "64",
			"SESSIOND_MAX_QUERY_BYTES": "77",
		}, func(t *testing.T, c *config) {
			if c.listen != "unix:/run/s.sock" || c.dataDir != "/d" || c.logLevel != "debug" || c.logFormat != "console" ||
				c.limits.MaxTitleBytes != 99 || c.limits.MaxFrameBytes != 12345 || c.shutdownTimeout != 3*time.Second ||
				c.maxOpenJournals != 64 || c.limits.MaxQueryBytes != 77 {
				t.Fatalf("from environment: %+v", c)
			}
		}},
		{"flags win over environment", []string{"--listen", "127.0.0.1:1", "--data-dir=/f", "--max-message-bytes", "7"},
			map[string]string{"SESSIOND_LISTEN": "127.0.0.1:2", "SESSIOND_DATA_DIR": "/e"}, func(t *testing.T, c *config) {
				if c.listen != "127.0.0.1:1" || c.dataDir != "/f" || c.limits.MaxMessageBytes != 7 {
					t.Fatalf("flags over env: %+v", c)
				}
			}},
		{"retention", []string{"--retention", "a=30d", "--retention", "=12h,b=1d12h", "--retention", "env=1h"},
			map[string]string{"SESSIOND_RETENTION": "env=2d,other=90m"}, func(t *testing.T, c *config) {
				want := retentionFlag{"a": 30 * 24 * time.Hour, "": 12 * time.Hour, "b": 36 * time.Hour, "env": time.Hour, "other": 90 * time.Minute}
				if !maps.Equal(c.retention, want) || c.retentionInterval != storage.DefaultSweepInterval {
					t.Fatalf("retention %v every %v, want %v every %v", c.retention, c.retentionInterval, want, storage.DefaultSweepInterval)
				}
			}},
		{"postgres has no data dir", []string{"--storage", "postgres", "--postgres-dsn", "postgres://h/db"}, nil, func(t *testing.T, c *config) {
			if c.dataDir != "" || dataDirField(c).Type != zapcore.SkipType {
				t.Fatalf("a PostgreSQL daemon has data dir %q", c.dataDir)
			}
		}},
		{"version ignores environment", []string{"--version"}, map[string]string{"SESSIOND_VERSION": "false"}, func(t *testing.T, c *config) {
			if !c.showVersion {
				t.Fatal("--version not set")
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseConfig(tt.args, env(tt.env), &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}

	usage := []struct {
		name   string
		args   []string
		env    map[string]string
		msgHas string
	}{
		{"unknown flag", []string{"--nope"}, nil, "nope"},
		{"one dash", []string{"-data-dir", "/d"}, nil, "flags take two dashes: --data-dir"},
		{"one dash with a value", []string{"--listen", "127.0.0.1:1", "-log-level=debug"}, nil, "--log-level=debug"},
		{"positional argument", []string{"serve"}, nil, "serve"},
		{"unknown storage", []string{"--storage", "s3"}, nil, "file, postgres"},
		{"postgres without a DSN", []string{"--storage", "postgres"}, nil, "--postgres-dsn"},
		{"postgres pool", []string{"--storage", "postgres", "--postgres-dsn", "postgres://h/db", "--postgres-max-conns", "0"}, nil, "--postgres-max-conns"},
		{"bad log level", []string{"--log-level", "loud"}, nil, "debug, info, warn, error"},
		{"bad log format", []string{"--log-format", "xml"}, nil, "json, console"},
		{"zero limit", []string{"--max-title-bytes", "0"}, nil, "max_title_bytes"},
		{"bad number", []string{"--max-frame-bytes", "lots"}, nil, "max-frame-bytes"},
		{"bad env value", nil, map[string]string{"SESSIOND_MAX_MESSAGE_BYTES": "big"}, "SESSIOND_MAX_MESSAGE_BYTES"},
		{"negative timeout", []string{"--shutdown-timeout", "-1s"}, nil, "shutdown-timeout"},
		{"tiny cache", []string{"--cache-bytes", "256"}, nil, "--cache-bytes 256 must be at least"},
		{"no open journals", []string{"--max-open-journals", "0"}, nil, "max-open-journals"},
		{"negative connections", []string{"--max-connections", "-1"}, nil, "max-connections"},
		{"no streams", []string{"--max-concurrent-streams", "0"}, nil, "max-concurrent-streams"},
		{"no loads", []string{"--max-concurrent-loads", "0"}, nil, "max-concurrent-loads"},
		{"negative idle", []string{"--max-connection-idle", "-1s"}, nil, "max-connection-idle"},
		{"tiny watch history", []string{"--watch-history-bytes", "1024"}, nil, "watch-history-bytes"},
		{"empty listen", []string{"--listen", ""}, nil, "listen"},
		{"retention without a namespace", []string{"--retention", "30d"}, nil, "NAMESPACE=DURATION"},
		{"retention of zero", []string{"--retention", "a=0s"}, nil, "zero"},
		{"retention too short", []string{"--retention", "a=10ms"}, nil, "at least 1s"},
		{"retention in a bad namespace", []string{"--retention", "a/b=1d"}, nil, "namespace"},
		{"bad retention env", nil, map[string]string{"SESSIOND_RETENTION": "a=soon"}, "SESSIOND_RETENTION"},
		{"retention interval", []string{"--retention-interval", "10ms"}, nil, "retention-interval"},
	}
	for _, tt := range usage {
		t.Run(tt.name, func(t *testing.T) {
			e := home
			if tt.env != nil {
				tt.env["HOME"] = "/home/u"
				e = env(tt.env)
			}
			var stdout, stderr bytes.Buffer
			_, err := parseConfig(tt.args, e, &stdout)
			var ue *usageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.msgHas) {
				t.Fatalf("err = %v; want a usage error naming %q", err, tt.msgHas)
			}
			if code := exitCode(err, &stderr); code != 2 {
				t.Fatalf("exit code %d, want 2", code)
			}
			// The error and a one-line hint on stderr; no usage dump.
			if stdout.Len() != 0 {
				t.Fatalf("a usage error wrote to stdout:\n%s", stdout.String())
			}
			lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
			if len(lines) != 2 || !strings.HasPrefix(lines[0], "sessiond: ") || !strings.Contains(lines[0], tt.msgHas) || !strings.Contains(lines[1], "sessiond --help") {
				t.Fatalf("stderr of a usage error:\n%s", stderr.String())
			}
		})
	}
}

func TestHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"--help"}, &stdout, &stderr)
	if !errors.Is(err, pflag.ErrHelp) || exitCode(err, &stderr) != 0 {
		t.Fatalf("--help: %v", err)
	}
	for _, want := range []string{"--listen", "SESSIOND_LISTEN", "--data-dir", "SESSIOND_DATA_DIR", "--max-message-bytes", "--shutdown-timeout", "--storage", "--metrics-listen", "SESSIOND_METRICS_LISTEN", "--pprof", "SESSIOND_PPROF", "--http-listen", "--version"} {
		if !strings.Contains(stdout.String(), want) {
			t.Fatalf("--help output lacks %q:\n%s", want, stdout.String())
		}
	}
	if stderr.Len() != 0 {
		t.Fatalf("--help wrote to stderr: %q", stderr.String())
	}
	if n := strings.Count(stdout.String(), "Usage: sessiond"); n != 1 {
		t.Fatalf("--help printed the usage %d times:\n%s", n, stdout.String())
	}
}

// daemon is run() on its own goroutine.
type daemon struct {
	addr   string // from the "sessiond started" log line
	stdout *syncbuf.Buffer
	stderr *syncbuf.Buffer
	cancel context.CancelFunc
	done   chan error
}

// start runs the daemon with args (plus JSON logs) and waits for its
// start-up line.
func start(t *testing.T, args ...string) *daemon {
	t.Helper()
	d, err := tryStart(t, args...)
	if err != nil {
		t.Fatalf("daemon did not start: %v", err)
	}
	return d
}

func tryStart(t *testing.T, args ...string) (*daemon, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	d := &daemon{stdout: &syncbuf.Buffer{}, stderr: &syncbuf.Buffer{}, cancel: cancel, done: make(chan error, 1)}
	go func() { d.done <- run(ctx, append([]string{"--log-format", "json"}, args...), d.stdout, d.stderr) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-d.done:
		case <-time.After(30 * time.Second):
			t.Error("daemon did not stop")
		}
	})
	deadline := time.After(30 * time.Second)
	for {
		select {
		case err := <-d.done:
			cancel()
			d.done <- err // for the cleanup
			return nil, err
		case <-deadline:
			return nil, errors.New("no start-up line in 30s: " + d.stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
		sc := bufio.NewScanner(strings.NewReader(d.stderr.String()))
		for sc.Scan() {
			var line map[string]any
			if json.Unmarshal(sc.Bytes(), &line) == nil && line["msg"] == "sessiond started" {
				for _, k := range []string{"addr", "data_dir", "storage", "version"} {
					if s, _ := line[k].(string); s == "" {
						t.Errorf("start-up line lacks %q: %s", k, sc.Text())
					}
				}
				d.addr = line["addr"].(string)
				return d, nil
			}
		}
	}
}

// stop cancels the daemon (as SIGTERM does) and returns run's error.
func (d *daemon) stop(t *testing.T) error {
	t.Helper()
	d.cancel()
	select {
	case err := <-d.done:
		d.done <- err
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("daemon did not stop within 30s")
		return nil
	}
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func TestRunServesAndStops(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "new", "data")
	d := start(t, "--listen", "127.0.0.1:0", "--data-dir", dataDir, "--max-title-bytes", "77")
	if !strings.HasPrefix(d.addr, "127.0.0.1:") || strings.HasSuffix(d.addr, ":0") {
		t.Fatalf("start-up line addr %q is not the bound address", d.addr)
	}
	fi, err := os.Stat(dataDir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("data dir: %v, %v; want mode 0700", fi, err)
	}
	conn := dial(t, d.addr)
	ctx := t.Context()

	for _, svc := range []string{"", "sessiond.v1.SessionStoreService"} {
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health %q = %v, %v", svc, resp, err)
		}
	}
	info, err := sessiondv1.NewSessionStoreServiceClient(conn).GetServerInfo(ctx, &sessiondv1.GetServerInfoRequest{})
	if err != nil || info.GetBackend() != "file" || info.GetVersion() == "" || info.GetLimits().GetMaxTitleBytes() != 77 {
		t.Fatalf("GetServerInfo = %v, %v", info, err)
	}
	// Reflection lists the services, so grpcurl needs no proto files.
	rs, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{ListServices: ""}}); err != nil {
		t.Fatal(err)
	}
	rr, err := rs.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range rr.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	for _, want := range []string{"sessiond.v1.SessionStoreService", "grpc.health.v1.Health"} {
		if !strings.Contains(strings.Join(names, " "), want) {
			t.Fatalf("reflection lists %v, not %s", names, want)
		}
	}
	_ = rs.CloseSend()

	// A write survives a clean stop and a restart on the same data dir.
	c := sessiondv1.NewSessionStoreServiceClient(conn)
	if _, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Alias: "kept"}); err != nil {
		t.Fatal(err)
	}
	// A watch in flight must not hold up the shutdown: it ends UNAVAILABLE.
	w, err := c.WatchSession(ctx, &sessiondv1.WatchSessionRequest{Ref: &sessiondv1.SessionRef{Key: &sessiondv1.SessionRef_Alias{Alias: "kept"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Header(); err != nil {
		t.Fatal(err)
	}
	stopStart := time.Now()
	if err := d.stop(t); err != nil {
		t.Fatalf("run after cancel = %v; want nil (exit 0)", err)
	}
	if took := time.Since(stopStart); took > 5*time.Second {
		t.Fatalf("shutdown took %v with a watch open", took)
	}
	if _, err := w.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("watch during shutdown ended with %v; want UNAVAILABLE", err)
	}
	if d.stdout.String() != "" {
		t.Fatalf("the daemon wrote to stdout: %q", d.stdout.String())
	}

	d2 := start(t, "--listen", "127.0.0.1:0", "--data-dir", dataDir)
	c2 := sessiondv1.NewSessionStoreServiceClient(dial(t, d2.addr))
	if _, err := c2.GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: &sessiondv1.SessionRef{Key: &sessiondv1.SessionRef_Alias{Alias: "kept"}}}); err != nil {
		t.Fatalf("after restart: %v", err)
	}
	if err := d2.stop(t); err != nil {
		t.Fatal(err)
	}
}

func TestRunStartupErrors(t *testing.T) {
	t.Run("busy port", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		_, err = tryStart(t, "--listen", l.Addr().String(), "--data-dir", t.TempDir())
		if err == nil || !strings.Contains(err.Error(), "address already in use") || exitCode(err, &bytes.Buffer{}) != 1 {
			t.Fatalf("busy port: %v", err)
		}
	})
	t.Run("locked data dir", func(t *testing.T) {
		dir := t.TempDir()
		start(t, "--listen", "127.0.0.1:0", "--data-dir", dir)
		_, err := tryStart(t, "--listen", "127.0.0.1:0", "--data-dir", dir)
		if !errors.Is(err, storage.ErrLocked) || !strings.Contains(err.Error(), "in use by another sessiond") || exitCode(err, &bytes.Buffer{}) != 1 {
			t.Fatalf("second daemon on one data dir: %v", err)
		}
		// One sentence: the cause is not repeated down the chain.
		if strings.Count(err.Error(), dir) != 1 || strings.Contains(err.Error(), "store is locked") || !strings.Contains(err.Error(), "--data-dir") {
			t.Errorf("second daemon on one data dir: %q; want the dir named once and what to do", err)
		}
	})
	t.Run("unusable data dir", func(t *testing.T) {
		notDir := filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(notDir, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := tryStart(t, "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(notDir, "data"))
		if err == nil || !strings.Contains(err.Error(), "data dir") || exitCode(err, &bytes.Buffer{}) != 1 {
			t.Fatalf("data dir under a file: %v", err)
		}
	})
	t.Run("metrics usage errors", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"--pprof"}, "--pprof needs --metrics-listen"},
			{[]string{"--metrics-listen", "nonsense"}, "--metrics-listen \"nonsense\": want host:port"},
			{[]string{"--metrics-listen", "unix:/tmp/m.sock"}, "--metrics-listen \"unix:/tmp/m.sock\": want host:port, not a unix socket"},
			{[]string{"--metrics-listen", "0.0.0.0:0"}, "refusing to serve metrics on 0.0.0.0:0 without TLS and --auth-tokens"},
		} {
			var stdout, stderr bytes.Buffer
			err := run(t.Context(), append([]string{"--listen", "127.0.0.1:0", "--data-dir", t.TempDir()}, tc.args...), &stdout, &stderr)
			if exitCode(err, &stderr) != 2 || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("%v: %v, stderr %q; want exit 2 saying %q", tc.args, err, stderr.String(), tc.want)
			}
		}
	})
	t.Run("busy metrics port", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		_, err = tryStart(t, "--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--metrics-listen", l.Addr().String())
		if err == nil || !strings.Contains(err.Error(), "--metrics-listen") || !strings.Contains(err.Error(), "address already in use") || exitCode(err, &bytes.Buffer{}) != 1 {
			t.Fatalf("busy metrics port: %v", err)
		}
	})
	t.Run("usage error", func(t *testing.T) {
		var stdout, stderr bytes.Buffer
		err := run(t.Context(), []string{"--storage", "sqlite"}, &stdout, &stderr)
		if exitCode(err, &stderr) != 2 || !strings.Contains(stderr.String(), "file") {
			t.Fatalf("bad --storage: %v, stderr %q", err, stderr.String())
		}
	})
}

func TestRunUnixSocket(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "s.sock")

	// A stale socket (its daemon died) is replaced.
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	_ = stale.Close()

	d := start(t, "--listen", "unix:"+sock, "--data-dir", filepath.Join(dir, "data"))
	if d.addr != "unix:"+sock {
		t.Fatalf("addr %q, want unix:%s", d.addr, sock)
	}
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket: %v, %v; want a socket with mode 0600", fi, err)
	}
	conn := dial(t, "unix://"+sock)
	resp, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health over the socket = %v, %v", resp, err)
	}

	// A socket something answers on is not taken over.
	_, err = tryStart(t, "--listen", "unix:"+sock, "--data-dir", filepath.Join(dir, "data2"))
	if err == nil || !strings.Contains(err.Error(), "another process") {
		t.Fatalf("second daemon on a live socket: %v", err)
	}

	if err := d.stop(t); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket file left after a clean stop: %v", err)
	}

	// A file that is not a socket is never removed.
	if err := os.WriteFile(sock, []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = tryStart(t, "--listen", "unix:"+sock, "--data-dir", filepath.Join(dir, "data3"))
	if err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("listen over a regular file: %v", err)
	}
	if b, _ := os.ReadFile(sock); string(b) != "mine" {
		t.Fatal("a regular file at the socket path was touched")
	}
}

// TestShutdownEndsHealthWatch checks that a health Watch (what gRPC
// client-side health checking keeps open) neither holds the shutdown until
// --shutdown-timeout nor misses the NOT_SERVING that tells it to go away.
func TestShutdownEndsHealthWatch(t *testing.T) {
	d := start(t, "--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--shutdown-timeout", "20s")
	w, err := healthpb.NewHealthClient(dial(t, d.addr)).Watch(t.Context(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := w.Recv(); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("first health status = %v, %v; want SERVING", r, err)
	}
	stopStart := time.Now()
	if err := d.stop(t); err != nil {
		t.Fatalf("run after cancel = %v; want nil", err)
	}
	if took := time.Since(stopStart); took > 5*time.Second {
		t.Fatalf("shutdown took %v with a health watch open", took)
	}
	r, err := w.Recv()
	if err != nil || r.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health status during shutdown = %v, %v; want NOT_SERVING", r, err)
	}
	if _, err := w.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("health watch ended with %v; want UNAVAILABLE", err)
	}
}
