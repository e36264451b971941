package clienttest

import (
	"bytes"
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

	"github.com/sessiond/sessiond/internal/syncbuf"
)

// Time limits for the daemon. Generous because the machines that run the
// tests are small and shared; a healthy daemon starts in well under a second.
const (
	daemonStartTimeout = 30 * time.Second
	daemonStopTimeout  = 30 * time.Second
)

// ErrExited is returned by SignalWait when the daemon had already exited.
var ErrExited = errors.New("clienttest: daemon had already exited")

// BuildDaemon builds cmd/sessiond into dir and returns the binary's path. It
// suits TestMain, where no *testing.T exists yet.
func BuildDaemon(dir string) (string, error) {
	bin := filepath.Join(dir, "sessiond")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/sessiond/sessiond/cmd/sessiond")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("clienttest: go build cmd/sessiond: %w\n%s", err, out)
	}
	return bin, nil
}

// DaemonOption configures StartDaemon. Restart reuses the options.
type DaemonOption func(*daemonOptions)

type daemonOptions struct {
	args []string
	env  []string // nil: the test's environment
}

// WithArgs passes more arguments to the daemon, after --listen, --data-dir
// and --log-format.
func WithArgs(args ...string) DaemonOption {
	return func(o *daemonOptions) { o.args = append(o.args, args...) }
}

// WithEnv runs the daemon with env (KEY=VALUE) as its whole environment
// instead of the test's.
func WithEnv(env []string) DaemonOption {
	return func(o *daemonOptions) { o.env = env }
}

// Daemon is a running sessiond binary.
type Daemon struct {
	Bin     string
	DataDir string
	Addr    string // the bound address, from its "sessiond started" log line

	opts   []DaemonOption
	cmd    *exec.Cmd
	logs   *logBuffer
	exited chan struct{}
	err    error // the process's exit, once exited is closed
}

// StartDaemon runs bin with --listen listen (e.g. "127.0.0.1:0"),
// --data-dir dataDir and JSON logs, waits for its "sessiond started" log
// line, and kills it when the test ends if it still runs; if the test
// failed, its log is written to the test's output then.
func StartDaemon(t testing.TB, bin, dataDir, listen string, opts ...DaemonOption) *Daemon {
	t.Helper()
	var o daemonOptions
	for _, opt := range opts {
		opt(&o)
	}
	d := &Daemon{Bin: bin, DataDir: dataDir, opts: opts, logs: newLogBuffer(), exited: make(chan struct{})}
	args := append([]string{"--listen", listen, "--data-dir", dataDir, "--log-format", "json"}, o.args...)
	d.cmd = exec.Command(bin, args...)
	d.cmd.Env = o.env
	d.cmd.Stdout = d.logs // the daemon should print nothing there; keep it anyway
	d.cmd.Stderr = d.logs
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("clienttest: start %s: %v", bin, err)
	}
	go func() {
		d.err = d.cmd.Wait()
		close(d.exited)
	}()
	t.Cleanup(func() {
		if !d.Exited() {
			_ = d.cmd.Process.Kill()
			<-d.exited
		}
		if t.Failed() {
			t.Logf("clienttest: sessiond (data dir %s) log:\n%s", d.DataDir, d.Logs())
		}
	})
	select {
	case d.Addr = <-d.logs.started:
	case <-d.exited:
		t.Fatalf("clienttest: %s exited before it started (%v); log:\n%s", bin, d.err, d.Logs())
	case <-time.After(daemonStartTimeout):
		t.Fatalf("clienttest: %s did not log %q within %v; log:\n%s", bin, "sessiond started", daemonStartTimeout, d.Logs())
	}
	return d
}

// Exited reports whether the process has ended.
func (d *Daemon) Exited() bool {
	select {
	case <-d.exited:
		return true
	default:
		return false
	}
}

// Err returns the process's exit (nil for status 0) once Exited reports
// true.
func (d *Daemon) Err() error {
	<-d.exited
	return d.err
}

// Logs returns everything the daemon has written so far.
func (d *Daemon) Logs() string { return d.logs.String() }

// SignalWait sends sig and waits up to timeout for the process to end,
// killing it if it does not. It fails with ErrExited if the process had
// already ended; its exit is then, as otherwise, in Err.
func (d *Daemon) SignalWait(sig syscall.Signal, timeout time.Duration) error {
	if d.Exited() {
		return fmt.Errorf("%w (%v)", ErrExited, d.err)
	}
	if err := d.cmd.Process.Signal(sig); err != nil {
		if errors.Is(err, os.ErrProcessDone) {
			<-d.exited
			return fmt.Errorf("%w (%v)", ErrExited, d.err)
		}
		return fmt.Errorf("clienttest: send %v: %w", sig, err)
	}
	select {
	case <-d.exited:
		return nil
	case <-time.After(timeout):
		_ = d.cmd.Process.Kill()
		<-d.exited
		return fmt.Errorf("clienttest: daemon still running %v after %v; killed", timeout, sig)
	}
}

// Signal sends sig without waiting, e.g. SIGHUP to make the daemon reload
// its token file and certificates.
func (d *Daemon) Signal(sig syscall.Signal) error {
	if err := d.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("clienttest: send %v: %w", sig, err)
	}
	return nil
}

// Kill sends SIGKILL and waits for the process to end.
func (d *Daemon) Kill(t testing.TB) {
	t.Helper()
	if err := d.SignalWait(syscall.SIGKILL, daemonStopTimeout); err != nil && !errors.Is(err, ErrExited) {
		t.Fatalf("clienttest: kill: %v", err)
	}
}

// Stop sends SIGTERM, waits, and fails the test unless the daemon exits 0.
func (d *Daemon) Stop(t testing.TB) {
	t.Helper()
	if err := d.SignalWait(syscall.SIGTERM, daemonStopTimeout); err != nil && !errors.Is(err, ErrExited) {
		t.Fatalf("clienttest: stop: %v", err)
	}
	if d.err != nil {
		t.Fatalf("clienttest: daemon exit after SIGTERM: %v", d.err)
	}
}

// Restart starts the same binary again on the same data dir and address
// (the port a killed daemon held, so clients reconnect to it), with the same
// options.
func (d *Daemon) Restart(t testing.TB) *Daemon {
	t.Helper()
	listen := d.Addr
	if strings.HasPrefix(listen, "unix:") {
		_ = os.Remove(strings.TrimPrefix(listen, "unix:"))
	}
	return StartDaemon(t, d.Bin, d.DataDir, listen, d.opts...)
}

// logBuffer collects a daemon's output, safe for concurrent use, and
// announces the address from the first "sessiond started" log line.
type logBuffer struct {
	syncbuf.Buffer            // everything written so far
	mu             sync.Mutex // guards the fields below
	partial        []byte     // the unfinished last line
	announced      bool       // the start line has been seen
	started        chan string
}

func newLogBuffer() *logBuffer {
	return &logBuffer{started: make(chan string, 1)}
}

// Write keeps p and looks at each complete line for the start message.
func (b *logBuffer) Write(p []byte) (int, error) {
	_, _ = b.Buffer.Write(p)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.partial = append(b.partial, p...)
	for {
		i := bytes.IndexByte(b.partial, '\n')
		if i < 0 {
			break
		}
		if !b.announced {
			var entry struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal(b.partial[:i], &entry) == nil && entry.Msg == "sessiond started" && entry.Addr != "" {
				b.announced = true
				b.started <- entry.Addr
			}
		}
		b.partial = b.partial[i+1:]
	}
	return len(p), nil
}
