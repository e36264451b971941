package client_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sessiond/sessiond/client"
)

// The examples run against the real daemon, built from the repository this
// module sits in (../cmd/sessiond). The SDK's module does not depend on the
// daemon's: its tests against an in-process daemon with fault injection live
// in the root module, next to package clienttest.
var (
	buildOnce sync.Once
	daemonBin string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if daemonBin != "" {
		_ = os.RemoveAll(filepath.Dir(daemonBin))
	}
	os.Exit(code)
}

// startSessiond starts sessiond on a unix socket over a fresh data dir and
// returns its address and a func that stops it and removes the dir. args
// are more flags for the daemon.
func startSessiond(args ...string) (addr string, stop func()) {
	buildOnce.Do(func() {
		var dir string
		if dir, buildErr = os.MkdirTemp("", "sessiond-sdk-bin"); buildErr != nil {
			return
		}
		daemonBin = filepath.Join(dir, "sessiond")
		out, err := exec.Command("go", "build", "-C", "..", "-o", daemonBin, "./cmd/sessiond").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build ../cmd/sessiond: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		panic(buildErr)
	}
	dir, err := os.MkdirTemp("", "sessiond-sdk-example")
	if err != nil {
		panic(err)
	}
	sock := filepath.Join(dir, "sessiond.sock")
	cmd := exec.Command(daemonBin, "--listen", "unix:"+sock, "--data-dir", filepath.Join(dir, "data"), "--log-format", "json")
	cmd.Args = append(cmd.Args, args...)
	if err := cmd.Start(); err != nil {
		panic(err)
	}
	stop = func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = os.RemoveAll(dir)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if conn, err := net.Dial("unix", sock); err == nil {
			conn.Close()
			return "unix://" + sock, stop
		}
		if time.Now().After(deadline) {
			stop()
			panic("sessiond did not listen on " + sock + " within 30s")
		}
	}
}

// dialSessiond starts sessiond (with args) for the test and returns a
// client of it and a ctx that ends with the test or after 30 seconds.
func dialSessiond(t *testing.T, args ...string) (*client.Client, context.Context) {
	t.Helper()
	addr, ctx, _ := runSessiond(t, args...)
	return dial(t, ctx, addr), ctx
}

// runSessiond starts sessiond (with args) for the test and returns its
// address, a ctx that ends with the test or after 30 seconds, and a func
// that kills the daemon before the test's end does.
func runSessiond(t *testing.T, args ...string) (addr string, ctx context.Context, stop func()) {
	t.Helper()
	addr, stop = startSessiond(args...)
	t.Cleanup(stop)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return addr, ctx, stop
}

// dial connects to addr with opts and closes the client when the test ends.
func dial(t *testing.T, ctx context.Context, addr string, opts ...client.DialOption) *client.Client {
	t.Helper()
	c, err := client.Dial(ctx, addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}
