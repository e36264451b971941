// Package integration tests the real sessiond binary: it is built once per
// test run, started on a free loopback port with a temporary data dir, and
// driven over real sockets by real clients (the generated Go client, grpcurl,
// sessionctl, the Python and Node.js clients, and curl and net/http on the
// HTTP side).
//
// The harness in this file is shared by every test of the package:
// startDaemon starts a daemon and waits until it logs "sessiond started",
// stop sends SIGTERM and expects a clean exit, kill sends SIGKILL, and
// restartDaemon starts a new daemon on the same data dir.
package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sessiond/sessiond/clienttest"
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

// stopTimeout is how long a daemon may take to exit after a signal. Generous
// because the machines that run the tests are small and shared.
const stopTimeout = 30 * time.Second

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
	// sessionctl must not pick up the developer's own contexts
	// ($XDG_CONFIG_HOME/sessiond/config.toml).
	_ = os.Setenv("XDG_CONFIG_HOME", filepath.Join(binDir, "config"))

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

// daemon is one running sessiond process; the embedded clienttest.Daemon
// gives Addr (host:port it listens on) and DataDir.
type daemon struct {
	*clienttest.Daemon

	args []string // extra arguments, reused by restartDaemon
	env  []string // extra environment, reused by restartDaemon
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
	d := &daemon{
		Daemon: clienttest.StartDaemon(t, sessiondBin, dataDir, "127.0.0.1:0",
			clienttest.WithArgs(extraArgs...), clienttest.WithEnv(append(cleanEnv(), env...))),
		args: extraArgs,
		env:  env,
	}
	// Runs before clienttest's cleanup, which then finds the daemon gone.
	t.Cleanup(func() {
		if err := d.SignalWait(syscall.SIGTERM, stopTimeout); err != nil && !errors.Is(err, clienttest.ErrExited) {
			t.Errorf("sessiond did not exit within %v of SIGTERM: %v", stopTimeout, err)
		}
	})
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
	if err := d.SignalWait(syscall.SIGTERM, stopTimeout); err != nil {
		t.Fatalf("stop sessiond: %v; log:\n%s", err, d.Logs())
	}
	if err := d.Err(); err != nil {
		t.Fatalf("sessiond exited with %v after SIGTERM, want status 0; log:\n%s", err, d.Logs())
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (d *daemon) kill(t *testing.T) {
	t.Helper()
	if err := d.SignalWait(syscall.SIGKILL, stopTimeout); err != nil {
		t.Fatalf("kill sessiond: %v", err)
	}
}

// logLines returns the JSON log lines the daemon has written so far, decoded;
// lines that are not JSON objects are left out.
func (d *daemon) logLines() []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(d.Logs()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			out = append(out, m)
		}
	}
	return out
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
