package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sessiond/sessiond/clienttest"
	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/internal/syncbuf"
)

// sessiondBin is the daemon binary every test runs against, built once.
var sessiondBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sessionctl-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The tests never read the developer's own config file and contexts.
	os.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, "config"))
	os.Unsetenv(configEnv)
	sessiondBin, err = clienttest.BuildDaemon(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// daemon is a running sessiond process on a temp data dir, with a
// connection to it.
type daemon struct {
	t      *testing.T
	addr   string
	proc   *clienttest.Daemon
	conn   *grpc.ClientConn
	client sessiondv1.SessionStoreServiceClient
}

// startDaemon starts sessiond on dataDir listening on listen (a free
// loopback port when ""), waits for its "sessiond started" log line, and
// stops it when the test ends.
func startDaemon(t *testing.T, dataDir, listen string, opts ...clienttest.DaemonOption) *daemon {
	t.Helper()
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	d := &daemon{t: t, proc: clienttest.StartDaemon(t, sessiondBin, dataDir, listen, opts...)}
	d.addr = d.proc.Addr
	if strings.HasPrefix(listen, "unix:") {
		d.addr = listen
	}
	var err error
	d.conn, err = grpc.NewClient(d.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	d.client = sessiondv1.NewSessionStoreServiceClient(d.conn)
	t.Cleanup(func() { d.stop() })
	return d
}

// stop sends SIGTERM and checks that the daemon exits 0, as it promises.
func (d *daemon) stop() {
	d.t.Helper()
	if d.proc.Exited() {
		return
	}
	d.conn.Close()
	err := d.proc.SignalWait(syscall.SIGTERM, 20*time.Second)
	if err != nil && !errors.Is(err, clienttest.ErrExited) {
		d.t.Errorf("stop sessiond: %v\n%s", err, d.proc.Logs())
		return
	}
	if err := d.proc.Err(); err != nil {
		d.t.Errorf("sessiond exited after SIGTERM: %v\n%s", err, d.proc.Logs())
	}
}

// result is what one sessionctl run left behind.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// ctl runs sessionctl in-process against the daemon, with empty stdin.
func (d *daemon) ctl(args ...string) result {
	d.t.Helper()
	return ctlIn(d.t, strings.NewReader(""), append([]string{"--addr", d.addr}, args...)...)
}

// ctlIn runs sessionctl in-process with the given stdin and arguments.
func ctlIn(t *testing.T, stdin io.Reader, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(t.Context(), args, stdin, &out, &errb)
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// must fails the test unless sessionctl exited 0.
func must(t *testing.T, r result) result {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("sessionctl failed: %v", r)
	}
	return r
}

// create makes a session through the daemon's API.
func (d *daemon) create(req *sessiondv1.CreateSessionRequest) *sessiondv1.Session {
	d.t.Helper()
	resp, err := d.client.CreateSession(d.t.Context(), req)
	if err != nil {
		d.t.Fatalf("CreateSession: %v", err)
	}
	return resp.GetSession()
}

// load reads a whole session through the daemon's API.
func (d *daemon) load(ns, id string) (*sessiondv1.Session, error) {
	d.t.Helper()
	stream, err := d.client.LoadSession(d.t.Context(), &sessiondv1.LoadSessionRequest{
		Ref: &sessiondv1.SessionRef{Namespace: ns, Key: &sessiondv1.SessionRef_Id{Id: id}},
	})
	if err != nil {
		return nil, err
	}
	var s *sessiondv1.Session
	for {
		resp, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if s == nil {
			s = resp.GetSession()
		}
		s.Messages = append(s.Messages, resp.GetMessages()...)
	}
	return s, nil
}

func text(role sessiondv1.Role, id, content string) *sessiondv1.Message {
	return &sessiondv1.Message{Id: id, Role: role, Content: content,
		CreatedAt: timestamppb.New(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC))}
}

var (
	user      = sessiondv1.Role_ROLE_USER
	assistant = sessiondv1.Role_ROLE_ASSISTANT
	toolRole  = sessiondv1.Role_ROLE_TOOL
	system    = sessiondv1.Role_ROLE_SYSTEM
)

// checkOneLineError checks the promise that errors are one line on stderr.
func checkOneLineError(t *testing.T, r result) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "sessionctl: ") {
		t.Errorf("want one error line starting \"sessionctl: \" on stderr, got %q", r.stderr)
	}
}

// waitFor polls cond until it holds or 15s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// asyncRun is a sessionctl run on its own goroutine (watch).
type asyncRun struct {
	out, errb *syncbuf.Buffer
	cancel    context.CancelFunc // the interrupt
	done      chan struct{}
	code      int
}

// wait returns the exit code, failing the test if the run does not end
// within 10s.
func (a *asyncRun) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-a.done:
		return a.code
	case <-time.After(10 * time.Second):
		t.Fatalf("sessionctl did not end within 10s; stdout: %s\nstderr: %s", a.out.String(), a.errb.String())
		return -1
	}
}

func runAsync(t *testing.T, args ...string) *asyncRun {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	a := &asyncRun{out: &syncbuf.Buffer{}, errb: &syncbuf.Buffer{}, cancel: cancel, done: make(chan struct{})}
	go func() {
		a.code = run(ctx, args, strings.NewReader(""), a.out, a.errb)
		close(a.done)
	}()
	t.Cleanup(func() {
		cancel()
		a.wait(t)
	})
	return a
}

// mkShortTemp makes a temp dir with a short path, for unix sockets.
func mkShortTemp(t *testing.T) (string, error) {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "sctl")
	if err != nil {
		return "", err
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir, nil
}
