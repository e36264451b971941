// Package integration tests the real sessiond binary: it is built once per
// test run, started on a free loopback port with a temporary data dir, and
// driven over real sockets by real clients (the generated Go client, grpcurl,
// sessionctl and the Python and Node.js clients).
//
// The harness in this file is shared by every test of the package:
// startDaemon starts a daemon and waits until it logs "sessiond started",
// stop sends SIGTERM and expects a clean exit, kill sends SIGKILL, and
// restartDaemon starts a new daemon on the same data dir.
package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

var (
	// moduleRoot is the directory holding go.mod.
	moduleRoot string
	// sessiondBin is the path of the daemon built for this test run.
	sessiondBin string
	// sessionctlBin is the path of the admin CLI built for this test run, or
	// "" when the tree has no cmd/sessionctl.
	sessionctlBin string
)

// Time limits of the harness. Generous because the machines that run the
// tests are small and shared; a healthy daemon starts in well under a second.
const (
	startTimeout = 30 * time.Second
	stopTimeout  = 30 * time.Second
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	root, err := findModuleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		return 1
	}
	moduleRoot = root
	binDir, err := os.MkdirTemp("", "sessiond-integration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		return 1
	}
	defer func() { _ = os.RemoveAll(binDir) }()

	sessiondBin = filepath.Join(binDir, "sessiond")
	if err := goBuild(sessiondBin, "./cmd/sessiond"); err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		return 1
	}
	// sessionctl is optional for this package's own tests; the tests that
	// need it skip when the tree has none.
	if _, err := os.Stat(filepath.Join(moduleRoot, "cmd", "sessionctl")); err == nil {
		sessionctlBin = filepath.Join(binDir, "sessionctl")
		if err := goBuild(sessionctlBin, "./cmd/sessionctl"); err != nil {
			fmt.Fprintln(os.Stderr, "integration:", err)
			return 1
		}
	}
	return m.Run()
}

// findModuleRoot asks the go command where go.mod is, so the tests work
// from any working directory inside the module.
func findModuleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside a Go module")
	}
	return filepath.Dir(gomod), nil
}

// goBuild builds a package of the module without the race detector: the
// daemon is a black box here, and a faster binary makes the crash tests
// cover more writes per cycle. Its own packages run under -race in their
// unit tests.
func goBuild(out, pkg string) error {
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = moduleRoot
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return nil
}

// daemon is one running sessiond process.
type daemon struct {
	Addr    string // host:port it listens on
	DataDir string

	cmd    *exec.Cmd
	args   []string // extra arguments, reused by restartDaemon
	env    []string // extra environment, reused by restartDaemon
	stderr *logBuffer
	done   chan struct{} // closed when the process has exited
	err    error         // cmd.Wait's result; read after done is closed
}

// startDaemon starts sessiond on 127.0.0.1:0 with dataDir and the extra
// arguments, waits until it logs "sessiond started", and registers a
// cleanup that stops it if the test has not.
func startDaemon(t *testing.T, dataDir string, extraArgs ...string) *daemon {
	t.Helper()
	return startDaemonEnv(t, dataDir, nil, extraArgs...)
}

// restartDaemon starts a new daemon on the data dir of d, which must have
// been stopped or killed, with the same arguments and environment.
func restartDaemon(t *testing.T, d *daemon) *daemon {
	t.Helper()
	return startDaemonEnv(t, d.DataDir, d.env, d.args...)
}

// startDaemonEnv is startDaemon with extra environment variables
// (KEY=VALUE). The test process's own SESSIOND_* variables are not passed
// on, so that a developer's shell cannot change what a test sees.
func startDaemonEnv(t *testing.T, dataDir string, env []string, extraArgs ...string) *daemon {
	t.Helper()
	args := append([]string{"--listen", "127.0.0.1:0", "--data-dir", dataDir, "--log-format", "json"}, extraArgs...)
	d := &daemon{
		DataDir: dataDir,
		args:    extraArgs,
		env:     env,
		stderr:  newLogBuffer(),
		done:    make(chan struct{}),
	}
	d.cmd = exec.Command(sessiondBin, args...)
	d.cmd.Env = append(cleanEnv(), env...)
	d.cmd.Stdout = d.stderr // the daemon should print nothing there; keep it anyway
	d.cmd.Stderr = d.stderr
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start sessiond: %v", err)
	}
	go func() {
		d.err = d.cmd.Wait()
		close(d.done)
	}()
	t.Cleanup(func() {
		select {
		case <-d.done:
		default:
			_ = d.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-d.done:
			case <-time.After(stopTimeout):
				_ = d.cmd.Process.Kill()
				<-d.done
				t.Errorf("sessiond did not exit within %v of SIGTERM; killed", stopTimeout)
			}
		}
		if t.Failed() {
			t.Logf("sessiond (data dir %s) log:\n%s", d.DataDir, d.stderr.String())
		}
	})

	select {
	case addr := <-d.stderr.started:
		d.Addr = addr
	case <-d.done:
		t.Fatalf("sessiond exited before it started (%v); log:\n%s", d.err, d.stderr.String())
	case <-time.After(startTimeout):
		t.Fatalf("sessiond did not log %q within %v; log:\n%s", "sessiond started", startTimeout, d.stderr.String())
	}
	return d
}

// cleanEnv is the test's environment without SESSIOND_* variables.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SESSIOND_") {
			env = append(env, kv)
		}
	}
	return env
}

// conn dials the daemon over plaintext TCP; the connection is closed when
// the test ends.
func (d *daemon) conn(t *testing.T) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(d.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial %s: %v", d.Addr, err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// client returns a SessionStoreService client on a new connection.
func (d *daemon) client(t *testing.T) sessiondv1.SessionStoreServiceClient {
	t.Helper()
	return sessiondv1.NewSessionStoreServiceClient(d.conn(t))
}

// stop sends SIGTERM and expects the daemon to drain and exit with status 0.
func (d *daemon) stop(t *testing.T) {
	t.Helper()
	if err := d.signalAndWait(syscall.SIGTERM); err != nil {
		t.Fatalf("stop sessiond: %v; log:\n%s", err, d.stderr.String())
	}
	if d.err != nil {
		t.Fatalf("sessiond exited with %v after SIGTERM, want status 0; log:\n%s", d.err, d.stderr.String())
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (d *daemon) kill(t *testing.T) {
	t.Helper()
	if err := d.signalAndWait(syscall.SIGKILL); err != nil {
		t.Fatalf("kill sessiond: %v", err)
	}
}

func (d *daemon) signalAndWait(sig syscall.Signal) error {
	select {
	case <-d.done:
		return fmt.Errorf("sessiond had already exited (%v)", d.err)
	default:
	}
	if err := d.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("send %v: %w", sig, err)
	}
	select {
	case <-d.done:
		return nil
	case <-time.After(stopTimeout):
		_ = d.cmd.Process.Kill()
		<-d.done
		return fmt.Errorf("no exit within %v of %v", stopTimeout, sig)
	}
}

// exited reports whether the process has ended.
func (d *daemon) exited() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// logLines returns the JSON log lines the daemon has written so far, decoded;
// lines that are not JSON objects are left out.
func (d *daemon) logLines() []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(d.stderr.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// logBuffer collects a daemon's output, safe for concurrent use, and
// announces the address from the "sessiond started" log line.
type logBuffer struct {
	mu      sync.Mutex // guards buf, partial and announced
	buf     bytes.Buffer
	partial []byte // the unfinished last line
	// announced is set once the start line has been seen.
	announced bool
	started   chan string // receives the address once
}

func newLogBuffer() *logBuffer {
	return &logBuffer{started: make(chan string, 1)}
}

// Write keeps p and looks at each complete line for the start message.
func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	b.partial = append(b.partial, p...)
	for {
		i := bytes.IndexByte(b.partial, '\n')
		if i < 0 {
			break
		}
		line := b.partial[:i]
		if !b.announced {
			var entry struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal(line, &entry) == nil && entry.Msg == "sessiond started" && entry.Addr != "" {
				b.announced = true
				b.started <- entry.Addr
			}
		}
		b.partial = b.partial[i+1:]
	}
	return len(p), nil
}

// String returns everything written so far.
func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// testContext returns a context that ends with the test or after d,
// whichever comes first, so that a hung daemon fails a test instead of
// hanging the run.
func testContext(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}
