package main

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

func TestWatch(t *testing.T) {
	d := startDaemon(t, t.TempDir(), "")
	s := d.create(&sessiondv1.CreateSessionRequest{Alias: "live", Messages: []*sessiondv1.Message{text(user, "1", "first")}})
	ref := &sessiondv1.SessionRef{Key: &sessiondv1.SessionRef_Id{Id: s.GetId()}}

	w := runAsync(t, "--addr", d.addr, "watch", "live")
	waitFor(t, "the watching line", func() bool { return strings.Contains(w.out.String(), "watching "+s.GetId()) })

	if _, err := d.client.AppendMessages(t.Context(), &sessiondv1.AppendMessagesRequest{Ref: ref, Messages: []*sessiondv1.Message{
		text(assistant, "2", "second, appended live"),
	}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the appended message", func() bool {
		out := w.out.String()
		return strings.Contains(out, "revision 2: 1 message appended") && strings.Contains(out, "[1]") && strings.Contains(out, "second, appended live")
	})
	if _, err := d.client.UpdateSession(t.Context(), &sessiondv1.UpdateSessionRequest{Ref: ref,
		Session: &sessiondv1.Session{Title: "new title"}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"title"}}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the update", func() bool {
		return strings.Contains(w.out.String(), `metadata updated (alias "live", title "new title", no labels)`)
	})
	if strings.Contains(w.out.String(), "first") {
		t.Errorf("watch replayed a message from before it started:\n%s", w.out.String())
	}

	// The interrupt is how a watch ends: exit 0.
	w.cancel()
	if code := w.wait(t); code != 0 {
		t.Errorf("watch after interrupt: exit %d; stderr %s", code, w.errb.String())
	}

	// A delete ends the watch by itself.
	w = runAsync(t, "--addr", d.addr, "watch", s.GetId())
	waitFor(t, "the watching line", func() bool { return strings.Contains(w.out.String(), "watching "+s.GetId()) })
	must(t, d.ctl("rm", "--yes", "live"))
	if code := w.wait(t); code != 0 {
		t.Errorf("watch after delete: exit %d; stderr %s", code, w.errb.String())
	}
	if !strings.Contains(w.out.String(), "session deleted") {
		t.Errorf("watch did not report the delete:\n%s", w.out.String())
	}
}

func TestWatchJSON(t *testing.T) {
	d := startDaemon(t, t.TempDir(), "")
	s := d.create(&sessiondv1.CreateSessionRequest{Alias: "json-live"})
	ref := &sessiondv1.SessionRef{Key: &sessiondv1.SessionRef_Id{Id: s.GetId()}}
	w := runAsync(t, "--addr", d.addr, "--json", "watch", "json-live")
	// In JSON mode the notice goes to stderr, as JSON, keeping stdout for
	// events.
	waitFor(t, "the watching notice", func() bool {
		return strings.Contains(w.errb.String(), `{"from_revision":1,"name":"json-live","reconnected":false,"watching":"`+s.GetId()+`"}`)
	})
	if _, err := d.client.AppendMessages(t.Context(), &sessiondv1.AppendMessagesRequest{Ref: ref, Messages: []*sessiondv1.Message{
		text(user, "1", "hello"),
	}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the appended event", func() bool { return strings.Contains(w.out.String(), "hello") })
	if _, err := d.client.DeleteSession(t.Context(), &sessiondv1.DeleteSessionRequest{Ref: ref}); err != nil {
		t.Fatal(err)
	}
	if code := w.wait(t); code != 0 {
		t.Fatalf("watch --json after delete: exit %d; stderr %s", code, w.errb.String())
	}
	lines := strings.Split(strings.TrimSpace(w.out.String()), "\n")
	var types []sessiondv1.EventType
	for _, line := range lines {
		ev := &sessiondv1.WatchSessionResponse{}
		if err := protojson.Unmarshal([]byte(line), ev); err != nil {
			t.Fatalf("watch --json line %q: %v", line, err)
		}
		types = append(types, ev.GetType())
		if ev.GetType() == sessiondv1.EventType_EVENT_TYPE_APPENDED && (len(ev.GetMessages()) != 1 || ev.GetMessages()[0].GetContent() != "hello" || ev.GetRevision() != 2) {
			t.Errorf("appended event: %v", ev)
		}
	}
	want := []sessiondv1.EventType{sessiondv1.EventType_EVENT_TYPE_APPENDED, sessiondv1.EventType_EVENT_TYPE_DELETED}
	if len(types) != 2 || types[0] != want[0] || types[1] != want[1] {
		t.Errorf("watch --json events %v, want %v", types, want)
	}
}

// TestWatchReloadsAfterOutOfRange starts a watch from a revision the
// session has not reached: the daemon answers OUT_OF_RANGE, and watch must
// reload and carry on rather than fail.
func TestWatchReloadsAfterOutOfRange(t *testing.T) {
	d := startDaemon(t, t.TempDir(), "")
	s := d.create(&sessiondv1.CreateSessionRequest{Alias: "jumpy"})
	ref := &sessiondv1.SessionRef{Key: &sessiondv1.SessionRef_Id{Id: s.GetId()}}

	w := runAsync(t, "--addr", d.addr, "watch", "jumpy", "--from-revision", "999")
	waitFor(t, "the reload", func() bool { return strings.Contains(w.out.String(), "reloaded at revision 1, 0 messages") })
	waitFor(t, "the watch to resume", func() bool { return strings.Contains(w.out.String(), "watching "+s.GetId()+" (jumpy) from revision 1") })
	if _, err := d.client.AppendMessages(t.Context(), &sessiondv1.AppendMessagesRequest{Ref: ref, Messages: []*sessiondv1.Message{
		text(user, "1", "after the reload"),
	}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the message after the reload", func() bool {
		return strings.Contains(w.out.String(), "revision 2: 1 message appended") && strings.Contains(w.out.String(), "after the reload")
	})
	select {
	case <-w.done:
		t.Fatalf("watch ended after OUT_OF_RANGE: exit %d, stderr %s", w.code, w.errb.String())
	default:
	}
}

// TestWatchAcrossDaemonRestart: watch survives the daemon going away,
// reconnects, resumes after the last revision it printed (printing what it
// missed once, and nothing twice), and ends only on the interrupt.
func TestWatchAcrossDaemonRestart(t *testing.T) {
	d := startDaemon(t, t.TempDir(), "")
	s := d.create(&sessiondv1.CreateSessionRequest{Alias: "phoenix"})
	ref := &sessiondv1.SessionRef{Key: &sessiondv1.SessionRef_Id{Id: s.GetId()}}
	appendOne := func(d *daemon, id, content string) {
		t.Helper()
		if _, err := d.client.AppendMessages(t.Context(), &sessiondv1.AppendMessagesRequest{Ref: ref, Messages: []*sessiondv1.Message{text(user, id, content)}}); err != nil {
			t.Fatal(err)
		}
	}
	w := runAsync(t, "--addr", d.addr, "watch", "phoenix")
	waitFor(t, "the watching line", func() bool { return strings.Contains(w.out.String(), "watching "+s.GetId()) })
	appendOne(d, "1", "before the restart")
	waitFor(t, "the first message", func() bool { return strings.Contains(w.out.String(), "before the restart") })

	d.stop()
	waitFor(t, "the reconnect notice", func() bool {
		return strings.Contains(w.errb.String(), "reconnecting with backoff, resuming after revision 2")
	})
	// Down for a while: several attempts, and the watch keeps waiting.
	time.Sleep(time.Second)
	select {
	case <-w.done:
		t.Fatalf("watch ended while the daemon was down: exit %d\n%s\n%s", w.code, w.out.String(), w.errb.String())
	default:
	}

	d2 := &daemon{t: t, proc: d.proc.Restart(t)}
	d2.addr = d2.proc.Addr
	var err error
	if d2.conn, err = grpc.NewClient(d2.addr, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
		t.Fatal(err)
	}
	d2.client = sessiondv1.NewSessionStoreServiceClient(d2.conn)
	t.Cleanup(d2.stop)
	waitFor(t, "the watch to resume", func() bool {
		return strings.Contains(w.out.String(), "reconnected; watching "+s.GetId()+" (phoenix) again after revision 2")
	})
	appendOne(d2, "2", "after the restart")
	waitFor(t, "the message after the restart", func() bool {
		out := w.out.String()
		return strings.Contains(out, "revision 3: 1 message appended") && strings.Contains(out, "[1]") && strings.Contains(out, "after the restart")
	})
	if n := strings.Count(w.out.String(), "before the restart"); n != 1 {
		t.Errorf("the message before the restart was printed %d times:\n%s", n, w.out.String())
	}
	w.cancel()
	if code := w.wait(t); code != 0 {
		t.Errorf("watch after interrupt: exit %d; stderr %s", code, w.errb.String())
	}
}

// TestWatchEndsOnRealError: an error retrying cannot cure ends the watch.
func TestWatchEndsOnRealError(t *testing.T) {
	d := startDaemon(t, t.TempDir(), "")
	d.create(&sessiondv1.CreateSessionRequest{Namespace: "a", Alias: "x"})
	r := d.ctl("--namespace", "a", "watch", "nosuch")
	if r.code != exitNotFound {
		t.Errorf("watch of a missing session: %v", r)
	}
}
