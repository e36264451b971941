package integration

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage/postgres/pgtest"
)

// TestRetention runs the real daemon with a namespace default
// (--retention, and SESSIOND_RETENTION) and a one-second sweep: a session
// with a short expire_after and one under the namespace default are deleted
// once idle that long (their watcher gets DELETED, the log says so), while
// a session kept busy and one without a time to live stay.
func TestRetention(t *testing.T) {
	t.Run("file", func(t *testing.T) {
		t.Parallel()
		d := startDaemonEnv(t, t.TempDir(), []string{"SESSIOND_RETENTION=other=30d"},
			"--retention", "short=2s", "--retention-interval", "1s")
		checkRetention(t, d)
		// The environment's default and the command line's both hold.
		for _, l := range d.logLines() {
			if l["msg"] == "sessiond started" && l["retention"] != "other=720h0m0s,short=2s" {
				t.Errorf("start-up log says retention %v, want other=720h0m0s,short=2s", l["retention"])
			}
		}
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		d := startPostgresDaemon(t, pgtest.Schema(t), "--retention", "short=2s", "--retention-interval", "1s")
		checkRetention(t, d)
	})
}

func checkRetention(t *testing.T, d *daemon) {
	ctx := testContext(t, 60*time.Second)
	c := d.client(t)
	mk := func(ns string, ttl time.Duration) string {
		req := &sessiondv1.CreateSessionRequest{Namespace: ns, Messages: []*sessiondv1.Message{textMsg("m1", sessiondv1.Role_ROLE_USER, "hi")}}
		if ttl > 0 {
			req.ExpireAfter = durationpb.New(ttl)
		}
		r, err := c.CreateSession(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return r.GetSession().GetId()
	}
	own := mk("", 2*time.Second)         // its own time to live
	byDefault := mk("short", 0)          // the namespace default
	busy := mk("short", 0)               // kept busy below
	forever := mk("", 0)                 // no time to live at all
	longer := mk("short", 2*time.Minute) // its own, longer than the default

	// From revision 1 (the create), so a subscription that starts late still
	// replays the deletion from history.
	watch, err := c.WatchSession(ctx, &sessiondv1.WatchSessionRequest{Ref: byID("", own), FromRevision: 1})
	if err != nil {
		t.Fatal(err)
	}
	events := make(chan *sessiondv1.WatchSessionResponse, 8)
	go func() {
		defer close(events)
		for {
			ev, err := watch.Recv()
			if err != nil {
				return
			}
			events <- ev
		}
	}()

	get := func(ns, id string) error {
		_, err := c.GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: byID(ns, id)})
		return err
	}
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; ; i++ {
		// Updated every half second: never idle for 2 s.
		if _, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byID("short", busy),
			Messages: []*sessiondv1.Message{textMsg("busy-"+time.Now().Format(time.RFC3339Nano), sessiondv1.Role_ROLE_USER, "still here")}}); err != nil {
			t.Fatalf("append to the busy session: %v", err)
		}
		if status.Code(get("", own)) == codes.NotFound && status.Code(get("short", byDefault)) == codes.NotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sessions past their time to live still there after 20 s: own %v, by default %v; log:\n%s", get("", own), get("short", byDefault), d.Logs())
		}
		time.Sleep(500 * time.Millisecond)
	}
	for _, s := range []struct{ ns, id, what string }{{"short", busy, "busy"}, {"", forever, "without a time to live"}, {"short", longer, "with a longer one"}} {
		if err := get(s.ns, s.id); err != nil {
			t.Errorf("the session %s was deleted: %v", s.what, err)
		}
	}
	// The watcher saw the deletion.
	var last *sessiondv1.WatchSessionResponse
	timeout := time.After(10 * time.Second)
	for last.GetType() != sessiondv1.EventType_EVENT_TYPE_DELETED {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("watch ended without DELETED (last %v)", last)
			}
			last = ev
		case <-timeout:
			t.Fatalf("no DELETED event within 10 s (last %v)", last)
		}
	}
	// The daemon logged each deletion.
	logged := map[string]bool{}
	for _, l := range d.logLines() {
		if l["msg"] == "deleted an expired session" {
			id, _ := l["session"].(string)
			logged[id] = true
		}
	}
	if !logged[own] || !logged[byDefault] || len(logged) != 2 {
		t.Errorf("deletions logged for %v, want %s and %s", logged, own, byDefault)
	}
	if err := ctx.Err(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}
