package integration

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sessiond/sessiond/clienttest"
	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// startLimited starts the real sessiond with its descriptor limit
// (RLIMIT_NOFILE, soft and hard) lowered to nofile, through sh's ulimit.
func startLimited(t *testing.T, nofile int, args ...string) *daemon {
	t.Helper()
	wrapper := filepath.Join(t.TempDir(), "sessiond-limited")
	script := fmt.Sprintf("#!/bin/sh\nulimit -n %d || exit 1\nexec %q \"$@\"\n", nofile, sessiondBin)
	if err := os.WriteFile(wrapper, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	return &daemon{Daemon: clienttest.StartDaemon(t, wrapper, t.TempDir(), "127.0.0.1:0",
		clienttest.WithArgs(args...), clienttest.WithEnv(cleanEnv()))}
}

// TestDescriptorCap holds far more idle connections than the daemon's
// descriptor limit allows (as 1,100 idle connections under ulimit -n 1024
// did): the daemon keeps serving the connection it has, refuses new ones
// with UNAVAILABLE, never INTERNAL, and serves new ones again once the
// flood is gone. With a --max-connections set too high for the limit,
// calls that find no descriptor left are UNAVAILABLE too.
func TestDescriptorCap(t *testing.T) {
	const nofile, flood = 256, 400
	ctx := testContext(t, 2*time.Minute)

	// floodConns opens n raw TCP connections that never speak.
	floodConns := func(t *testing.T, addr string, n int) []net.Conn {
		var cs []net.Conn
		for range n {
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				break // the backlog is full: enough
			}
			cs = append(cs, c)
		}
		t.Cleanup(func() {
			for _, c := range cs {
				_ = c.Close()
			}
		})
		time.Sleep(500 * time.Millisecond) // let the daemon accept what it will
		return cs
	}
	// work creates sessions and appends to them: every one opens files.
	work := func(c sessiondv1.SessionStoreServiceClient, n int) error {
		for i := range n {
			s, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Title: fmt.Sprint("s", i)})
			if err != nil {
				return err
			}
			if _, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{
				Ref: byID("", s.GetSession().GetId()), Messages: []*sessiondv1.Message{textMsg("m", sessiondv1.Role_ROLE_USER, "hi")},
			}); err != nil {
				return err
			}
		}
		return nil
	}

	t.Run("default cap", func(t *testing.T) {
		d := startLimited(t, nofile)
		c := d.client(t)
		if err := work(c, 1); err != nil {
			t.Fatal(err)
		}
		cs := floodConns(t, d.Addr, flood)
		t.Logf("%d idle connections open against a descriptor limit of %d", len(cs), nofile)
		if err := work(c, 40); err != nil {
			t.Fatalf("the connection already open, during the flood: %v (code %v), want OK", err, status.Code(err))
		}
		fresh, err := grpc.NewClient(d.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer fresh.Close()
		_, err = sessiondv1.NewSessionStoreServiceClient(fresh).GetServerInfo(testContext(t, 10*time.Second), &sessiondv1.GetServerInfoRequest{})
		if code := status.Code(err); code != codes.Unavailable && code != codes.ResourceExhausted {
			t.Fatalf("a new connection during the flood: %v (code %v), want UNAVAILABLE or RESOURCE_EXHAUSTED", err, code)
		}
		for _, c := range cs {
			_ = c.Close()
		}
		deadline := time.Now().Add(20 * time.Second)
		for {
			_, err = sessiondv1.NewSessionStoreServiceClient(fresh).GetServerInfo(testContext(t, 5*time.Second), &sessiondv1.GetServerInfoRequest{})
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("a new connection after the flood: %v, want OK", err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		if !hasLog(d, "connection limit reached: refusing new connections") {
			t.Error("no log line about refused connections")
		}
	})

	t.Run("cap over the limit", func(t *testing.T) {
		d := startLimited(t, nofile, "--max-connections", "10000")
		c := d.client(t)
		if err := work(c, 1); err != nil {
			t.Fatal(err)
		}
		floodConns(t, d.Addr, flood)
		err := work(c, 40)
		if code := status.Code(err); code != codes.OK && code != codes.Unavailable && code != codes.ResourceExhausted {
			t.Fatalf("with no descriptor left: %v (code %v), want OK, UNAVAILABLE or RESOURCE_EXHAUSTED", err, code)
		}
		t.Logf("with no descriptor left: %v", err)
	})
}

// hasLog reports whether d logged a line with msg.
func hasLog(d *daemon, msg string) bool {
	for _, l := range d.logLines() {
		if l["msg"] == msg {
			return true
		}
	}
	return false
}
