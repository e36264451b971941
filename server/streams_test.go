package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

func TestSaveSession(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	ctx := t.Context()
	s := h.create(t, &sessiondv1.CreateSessionRequest{Alias: "keep", Labels: map[string]string{"l": "1"}, Messages: []*sessiondv1.Message{user("old", "x")}})

	// Several frames make one whole-session save; unknown fields survive.
	var want []*sessiondv1.Message
	st, err := h.client.SaveSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for f := 0; f < 4; f++ {
		frame := &sessiondv1.SaveSessionRequest{}
		if f == 0 {
			frame.Header = &sessiondv1.SaveSessionHeader{Ref: byAlias("keep"), ExpectedRevision: 1, Title: "saved", Summary: "sum", Metadata: map[string]string{"k": "v"}}
		}
		for i := 0; i < 3; i++ {
			m := withUnknown(user(fmt.Sprintf("f%d-%d", f, i), "text"), "u")
			frame.Messages = append(frame.Messages, m)
			want = append(want, proto.Clone(m).(*sessiondv1.Message))
		}
		if err := st.Send(frame); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := st.CloseAndRecv()
	if err != nil {
		t.Fatalf("SaveSession: %v", err)
	}
	got := resp.GetSession()
	if got.GetRevision() != 2 || got.GetMessageCount() != 12 || got.GetTitle() != "saved" || got.GetSummary() != "sum" ||
		got.GetMetadata()["k"] != "v" || got.GetAlias() != "keep" || got.GetLabels()["l"] != "1" {
		t.Fatalf("SaveSession answered %v", got)
	}
	_, msgs := h.load(t, &sessiondv1.LoadSessionRequest{Ref: byID(s.GetId())})
	if diff := cmp.Diff(want, withoutCreatedAt(msgs), protocmp.Transform()); diff != "" {
		t.Fatalf("saved messages (-sent +loaded):\n%s", diff)
	}

	// create_if_missing makes a session under the ref's alias.
	st, err = h.client.SaveSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&sessiondv1.SaveSessionRequest{Header: &sessiondv1.SaveSessionHeader{Ref: byAlias("fresh"), CreateIfMissing: true}, Messages: []*sessiondv1.Message{user("a", "b")}}); err != nil {
		t.Fatal(err)
	}
	resp, err = st.CloseAndRecv()
	if err != nil || resp.GetSession().GetAlias() != "fresh" || resp.GetSession().GetRevision() != 1 || resp.GetSession().GetMessageCount() != 1 {
		t.Fatalf("SaveSession create_if_missing = %v, %v", resp, err)
	}
}

// A client that cancels halfway leaves the stored session as it was: the
// server applies nothing until the whole stream has arrived.
func TestSaveSessionCancelHalfway(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	s := h.create(t, &sessiondv1.CreateSessionRequest{Title: "before", Messages: []*sessiondv1.Message{user("a", "kept")}})

	ctx, cancel := context.WithCancel(t.Context())
	st, err := h.client.SaveSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&sessiondv1.SaveSessionRequest{
		Header:   &sessiondv1.SaveSessionHeader{Ref: byID(s.GetId()), Title: "after"},
		Messages: []*sessiondv1.Message{user("x", "replaced")},
	}); err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&sessiondv1.SaveSessionRequest{Messages: []*sessiondv1.Message{user("y", "replaced")}}); err != nil {
		t.Fatal(err)
	}
	cancel()
	// GracefulStop returns once every handler has returned, so the check
	// below sees whatever the cancelled SaveSession did.
	h.gs.GracefulStop()

	sess, msgs, err := h.file.Load(t.Context(), storage.Ref{ID: s.GetId()}, storage.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sess.Revision != 1 || sess.Title != "before" || len(msgs) != 1 || msgs[0].GetContent() != "kept" {
		t.Fatalf("after a cancelled save: %+v, %v; want it unchanged", sess, msgs)
	}
}

func TestLoadSessionBatches(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	ctx := t.Context()

	// 48 messages of 128 KiB and one of 2 MiB: 8 MiB, twice the 4 MiB a
	// default client accepts in one frame.
	var want []*sessiondv1.Message
	st, err := h.client.SaveSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&sessiondv1.SaveSessionRequest{Header: &sessiondv1.SaveSessionHeader{Ref: byAlias("big"), CreateIfMissing: true}}); err != nil {
		t.Fatal(err)
	}
	for f := 0; f < 7; f++ {
		frame := &sessiondv1.SaveSessionRequest{}
		for i := 0; i < 7; i++ {
			n := 128 << 10
			if f == 3 && i == 3 {
				n = 2 << 20
			}
			m := user(fmt.Sprintf("m%02d", f*7+i), strings.Repeat(string(rune('a'+i)), n))
			frame.Messages = append(frame.Messages, m)
			want = append(want, m)
		}
		if err := st.Send(frame); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.CloseAndRecv(); err != nil {
		t.Fatalf("SaveSession of 8 MiB: %v", err)
	}

	stream, err := h.client.LoadSession(ctx, &sessiondv1.LoadSessionRequest{Ref: byAlias("big")})
	if err != nil {
		t.Fatal(err)
	}
	frames, err := recvAll(stream)
	if err != nil {
		t.Fatalf("LoadSession through a default client: %v", err)
	}
	var got []*sessiondv1.Message
	var total int
	for i, f := range frames {
		if (f.GetSession() != nil) != (i == 0) {
			t.Fatalf("frame %d: session set = %v; want it in the first frame only", i, f.GetSession() != nil)
		}
		size := proto.Size(f)
		total += size
		if size > loadBatchBytes && len(f.GetMessages()) != 1 {
			t.Fatalf("frame %d is %d bytes with %d messages; only a lone message may pass %d", i, size, len(f.GetMessages()), loadBatchBytes)
		}
		got = append(got, f.GetMessages()...)
	}
	if total <= 4<<20 || len(frames) < 8 {
		t.Fatalf("%d frames, %d bytes: the test session is too small to prove batching", len(frames), total)
	}
	if frames[0].GetSession().GetMessageCount() != int64(len(want)) {
		t.Fatalf("first frame says %d messages, want %d", frames[0].GetSession().GetMessageCount(), len(want))
	}
	if diff := cmp.Diff(want, withoutCreatedAt(got), protocmp.Transform()); diff != "" {
		t.Fatalf("loaded messages differ (-saved +loaded):\n%s", diff)
	}

	// Offset, limit and tail select messages.
	tests := []struct {
		req  *sessiondv1.LoadSessionRequest
		want []string
	}{
		{&sessiondv1.LoadSessionRequest{Offset: 1, Limit: 2}, []string{"m01", "m02"}},
		{&sessiondv1.LoadSessionRequest{Limit: 2, Tail: true}, []string{"m47", "m48"}},
		{&sessiondv1.LoadSessionRequest{Offset: 47}, []string{"m47", "m48"}},
	}
	for _, tt := range tests {
		tt.req.Ref = byAlias("big")
		_, msgs := h.load(t, tt.req)
		var ids []string
		for _, m := range msgs {
			ids = append(ids, m.GetId())
		}
		if !slicesEqual(ids, tt.want) {
			t.Fatalf("LoadSession(%v) = %v, want %v", tt.req, ids, tt.want)
		}
	}
}

func slicesEqual(a, b []string) bool { return cmp.Equal(a, b) }

func TestListSessionsPaging(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	ctx := t.Context()
	for i := 0; i < 7; i++ {
		h.create(t, &sessiondv1.CreateSessionRequest{Alias: fmt.Sprintf("s%d", i), Labels: map[string]string{"odd": fmt.Sprint(i%2 == 1)}})
	}
	h.create(t, &sessiondv1.CreateSessionRequest{Namespace: "elsewhere", Alias: "s9"})

	list := func(req *sessiondv1.ListSessionsRequest) []*sessiondv1.ListSessionsResponse {
		t.Helper()
		stream, err := h.client.ListSessions(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		frames, err := recvAll(stream)
		if err != nil {
			t.Fatalf("ListSessions(%v): %v", req, err)
		}
		return frames
	}
	ids := func(frames []*sessiondv1.ListSessionsResponse) []string {
		var out []string
		for _, f := range frames {
			out = append(out, f.GetSession().GetId())
		}
		return out
	}

	all := list(&sessiondv1.ListSessionsRequest{})
	if len(all) != 7 {
		t.Fatalf("listed %d sessions in the default namespace, want 7", len(all))
	}
	for i := 1; i < len(all); i++ {
		a, b := all[i-1].GetSession(), all[i].GetSession()
		if a.GetUpdatedAt().AsTime().Before(b.GetUpdatedAt().AsTime()) {
			t.Fatalf("list order: %v before %v", a, b)
		}
	}

	// Pages of 3, each resumed from the last frame's token, list the same
	// sessions in the same order.
	var paged []*sessiondv1.ListSessionsResponse
	token := ""
	for page := 0; page < 10; page++ {
		frames := list(&sessiondv1.ListSessionsRequest{Limit: 3, PageToken: token})
		if len(frames) > 3 {
			t.Fatalf("page of %d frames with limit 3", len(frames))
		}
		paged = append(paged, frames...)
		if len(frames) < 3 {
			break
		}
		token = frames[len(frames)-1].GetNextPageToken()
		if token == "" {
			t.Fatal("frame without next_page_token")
		}
	}
	if diff := cmp.Diff(ids(all), ids(paged)); diff != "" {
		t.Fatalf("paged listing differs (-all +paged):\n%s", diff)
	}

	if got := list(&sessiondv1.ListSessionsRequest{Labels: map[string]string{"odd": "true"}}); len(got) != 3 {
		t.Fatalf("label filter listed %d, want 3", len(got))
	}
	if got := list(&sessiondv1.ListSessionsRequest{AliasPrefix: "s1"}); len(got) != 1 || got[0].GetSession().GetAlias() != "s1" {
		t.Fatalf("alias prefix listed %v", ids(got))
	}
	if got := list(&sessiondv1.ListSessionsRequest{Namespace: "elsewhere"}); len(got) != 1 {
		t.Fatalf("namespace listed %v", ids(got))
	}
}

// Listed frames are sent as the store keeps them encoded: each must be the
// session as GetSession answers it now, with the token that resumes after
// it, before and after writes.
func TestListSessionsFramesAreCurrent(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	ctx := t.Context()
	a := h.create(t, &sessiondv1.CreateSessionRequest{Alias: "a", Labels: map[string]string{"k": "v"}, Metadata: map[string]string{"m": "1"}})
	h.create(t, &sessiondv1.CreateSessionRequest{Alias: "b"})
	check := func(what string) {
		t.Helper()
		for range 2 { // the second listing sends what the first had encoded
			stream, err := h.client.ListSessions(ctx, &sessiondv1.ListSessionsRequest{})
			if err != nil {
				t.Fatal(err)
			}
			frames, err := recvAll(stream)
			if err != nil {
				t.Fatalf("%s: ListSessions: %v", what, err)
			}
			for _, f := range frames {
				got, err := h.client.GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: byID(f.GetSession().GetId())})
				if err != nil {
					t.Fatal(err)
				}
				if d := cmp.Diff(got.GetSession(), f.GetSession(), protocmp.Transform()); d != "" {
					t.Fatalf("%s: listed session differs from GetSession's (-get +list):\n%s", what, d)
				}
				s := f.GetSession()
				if want := encodePageToken(storage.Cursor{UpdatedAt: s.GetUpdatedAt().AsTime(), ID: s.GetId()}); f.GetNextPageToken() != want {
					t.Fatalf("%s: next_page_token %q, want %q", what, f.GetNextPageToken(), want)
				}
			}
		}
	}
	check("after creates")
	if _, err := h.client.UpdateSession(ctx, &sessiondv1.UpdateSessionRequest{Ref: byID(a.GetId()), Session: &sessiondv1.Session{Title: "t"},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"title"}}}); err != nil {
		t.Fatal(err)
	}
	check("after an update")
	if _, err := h.client.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byID(a.GetId()), Messages: []*sessiondv1.Message{user("m1", "hi")}}); err != nil {
		t.Fatal(err)
	}
	check("after an append")
}

// A client that stops reading a listing ends it: the server does not walk
// on through the store.
func TestListSessionsStopsOnCancel(t *testing.T) {
	endless := &endlessList{}
	h := newHarness(t, harnessConfig{wrap: func(d storage.Driver) storage.Driver {
		endless.Driver = d
		return endless
	}})
	ctx, cancel := context.WithCancel(t.Context())
	stream, err := h.client.ListSessions(ctx, &sessiondv1.ListSessionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel()
	done := make(chan struct{})
	go func() {
		h.gs.GracefulStop() // returns once the handler has
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("ListSessions still running 20s after the client cancelled")
	}
	if n := endless.yields.Load(); n >= endlessSessions {
		t.Fatalf("the listing ran to its end (%d sessions) after the client cancelled", n)
	}
}

const endlessSessions = 1_000_000

// endlessList lists a million made-up sessions.
type endlessList struct {
	storage.Driver
	yields atomic.Int64
}

func (e *endlessList) List(ctx context.Context, opts storage.ListOptions, yield func(*storage.Session) error) error {
	now := time.Now()
	for i := 0; i < endlessSessions; i++ {
		e.yields.Add(1)
		if err := yield(&storage.Session{ID: uuid.NewString(), UpdatedAt: now, Title: "made up"}); err != nil {
			return err
		}
	}
	return nil
}

func TestWatchSession(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	ctx := t.Context()
	s := h.create(t, &sessiondv1.CreateSessionRequest{Alias: "w"})
	stream, err := h.client.WatchSession(ctx, &sessiondv1.WatchSessionRequest{Ref: byAlias("w")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Header(); err != nil { // the subscription is live
		t.Fatal(err)
	}
	c := h.client
	if _, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byID(s.GetId()), Messages: []*sessiondv1.Message{withUnknown(user("a", "1"), "u")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byID(s.GetId()), Messages: []*sessiondv1.Message{user("b", "2"), user("c", "3")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UpdateSession(ctx, &sessiondv1.UpdateSessionRequest{Ref: byID(s.GetId()), Session: &sessiondv1.Session{Title: "t"}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"title"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RewindSession(ctx, &sessiondv1.RewindSessionRequest{Ref: byID(s.GetId()), MessageCount: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteSession(ctx, &sessiondv1.DeleteSessionRequest{Ref: byID(s.GetId())}); err != nil {
		t.Fatal(err)
	}
	events, err := recvAll(stream)
	if err != nil {
		t.Fatalf("watch ended with %v; want OK after DELETED", err)
	}
	type ev struct {
		Type sessiondv1.EventType
		Rev  uint64
		IDs  string
	}
	var got []ev
	for _, e := range events {
		var ids []string
		for _, m := range e.GetMessages() {
			ids = append(ids, m.GetId())
		}
		got = append(got, ev{e.GetType(), e.GetRevision(), strings.Join(ids, ",")})
	}
	want := []ev{
		{sessiondv1.EventType_EVENT_TYPE_APPENDED, 2, "a"},
		{sessiondv1.EventType_EVENT_TYPE_APPENDED, 3, "b,c"},
		{sessiondv1.EventType_EVENT_TYPE_UPDATED, 4, ""},
		{sessiondv1.EventType_EVENT_TYPE_REPLACED, 5, ""},
	}
	if len(got) != 5 || got[4].Type != sessiondv1.EventType_EVENT_TYPE_DELETED {
		t.Fatalf("events = %+v; want 4 changes then DELETED", got)
	}
	if diff := cmp.Diff(want, got[:4]); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
	if events[2].GetSession().GetTitle() != "t" || events[0].GetSession().GetMessageCount() != 1 {
		t.Fatalf("event sessions: %v, %v", events[0].GetSession(), events[2].GetSession())
	}
	if len(events[0].GetMessages()[0].ProtoReflect().GetUnknown()) == 0 {
		t.Fatal("appended message lost its unknown field on the way to a watcher")
	}
}

// brokerStore serves Watch from a broker the test publishes to directly, so
// that a test can outrun a watcher deterministically.
type brokerStore struct {
	storage.Driver
	broker *storage.Broker
}

func (b *brokerStore) Watch(ctx context.Context, ref storage.Ref, from uint64) (*storage.Subscription, error) {
	return b.broker.Subscribe("watched", 1, from)
}

func TestWatchSlowWatcher(t *testing.T) {
	broker := storage.NewBroker()
	h := newHarness(t, harnessConfig{wrap: func(d storage.Driver) storage.Driver { return &brokerStore{Driver: d, broker: broker} }})
	ctx := t.Context()
	stream, err := h.client.WatchSession(ctx, &sessiondv1.WatchSessionRequest{Ref: byAlias("any")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Header(); err != nil {
		t.Fatal(err)
	}
	// The client reads nothing while events of 256 KiB pile up: flow
	// control stops the server's sends, the broker's buffer fills, and the
	// watcher is cut off. Publishing must never wait for the watcher.
	payload := []*sessiondv1.Message{user("big", strings.Repeat("x", 256<<10))}
	const published = 2000
	start := time.Now()
	for rev := uint64(2); rev < 2+published; rev++ {
		broker.Publish("watched", storage.Event{Type: storage.EventAppended, Revision: rev, Session: &storage.Session{ID: "watched", Revision: rev}, Messages: payload})
		if rev%100 == 0 {
			time.Sleep(10 * time.Millisecond) // let the server fill its pipe first
		}
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("publishing took %v: a slow watcher held up writers", d)
	}
	var n int
	var last uint64 = 1
	for {
		e, err := stream.Recv()
		if err != nil {
			wantCode(t, err, codes.OutOfRange, "")
			break
		}
		if e.GetRevision() != last+1 {
			t.Fatalf("event revision %d after %d: events must arrive in order, none skipped", e.GetRevision(), last)
		}
		last = e.GetRevision()
		n++
	}
	if n == 0 || n >= published {
		t.Fatalf("watcher got %d of %d events before OUT_OF_RANGE", n, published)
	}
}

func TestWatchEndsUnavailable(t *testing.T) {
	t.Run("drain", func(t *testing.T) {
		h := newHarness(t, harnessConfig{})
		h.create(t, &sessiondv1.CreateSessionRequest{Alias: "w"})
		stream, err := h.client.WatchSession(t.Context(), &sessiondv1.WatchSessionRequest{Ref: byAlias("w")})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Header(); err != nil {
			t.Fatal(err)
		}
		h.srv.Drain()
		_, err = stream.Recv()
		wantCode(t, err, codes.Unavailable, "")
		// A watch started while draining fails the same way.
		stream, err = h.client.WatchSession(t.Context(), &sessiondv1.WatchSessionRequest{Ref: byAlias("w")})
		if err == nil {
			_, err = stream.Recv()
		}
		wantCode(t, err, codes.Unavailable, "")
	})
	t.Run("store closed", func(t *testing.T) {
		h := newHarness(t, harnessConfig{})
		h.create(t, &sessiondv1.CreateSessionRequest{Alias: "w"})
		stream, err := h.client.WatchSession(t.Context(), &sessiondv1.WatchSessionRequest{Ref: byAlias("w")})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Header(); err != nil {
			t.Fatal(err)
		}
		if err := h.file.Close(); err != nil {
			t.Fatal(err)
		}
		_, err = stream.Recv()
		wantCode(t, err, codes.Unavailable, "")
		_, err = h.client.GetSession(t.Context(), &sessiondv1.GetSessionRequest{Ref: byAlias("w")})
		wantCode(t, err, codes.Unavailable, "")
	})
}

// panicStore panics in Get and Load (and LoadStream, which LoadSession
// uses), like a bug in a backend would.
type panicStore struct{ storage.Driver }

func (panicStore) LoadStream(context.Context, storage.Ref, storage.LoadOptions, func(*storage.Session) error, func(*sessiondv1.Message) error) error {
	panic(errors.New("boom in LoadStream"))
}

func (panicStore) Get(context.Context, storage.Ref) (*storage.Session, error) { panic("boom in Get") }
func (panicStore) Load(context.Context, storage.Ref, storage.LoadOptions) (*storage.Session, []*sessiondv1.Message, error) {
	panic(errors.New("boom in Load"))
}

func TestPanicRecovery(t *testing.T) {
	h := newHarness(t, harnessConfig{wrap: func(d storage.Driver) storage.Driver { return panicStore{d} }})
	ctx := t.Context()
	s := h.create(t, &sessiondv1.CreateSessionRequest{})

	_, err := h.client.GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: byID(s.GetId())})
	wantCode(t, err, codes.Internal, "")
	if strings.Contains(err.Error(), "boom") {
		t.Fatalf("panic value sent to the client: %v", err)
	}
	stream, err := h.client.LoadSession(ctx, &sessiondv1.LoadSessionRequest{Ref: byID(s.GetId())})
	if err == nil {
		_, err = recvAll(stream)
	}
	wantCode(t, err, codes.Internal, "")

	// The server lives on.
	if _, err := h.client.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byID(s.GetId()), Messages: []*sessiondv1.Message{user("a", "b")}}); err != nil {
		t.Fatalf("after a panic: %v", err)
	}

	// Each panic is logged once, on its call's line, which says INTERNAL as
	// the client saw, names the session, and carries the panic and a stack
	// through the panicking code.
	for _, method := range []string{"GetSession", "LoadSession"} {
		calls := h.logs.FilterMessage("finished call").FilterField(zap.String("grpc.method", method)).All()
		if len(calls) != 1 {
			t.Fatalf("%d log lines for the panicking %s, want 1: %v", len(calls), method, calls)
		}
		e := calls[0]
		f := e.ContextMap()
		if e.Level != zapcore.ErrorLevel || f["grpc.code"] != "Internal" || f["session_id"] != s.GetId() {
			t.Fatalf("log line of the panicking %s: %v %v", method, e.Level, f)
		}
		if !strings.Contains(fmt.Sprint(f["panic"]), "boom in") {
			t.Fatalf("log line of the panicking %s lacks the panic: %v", method, f)
		}
		stack, _ := f["stack"].(string)
		if !strings.Contains(stack, "panicStore") {
			t.Fatalf("panic log has no stack through the panicking code: %q", stack)
		}
	}
	for _, e := range h.logs.All() {
		if e.Message != "finished call" && strings.Contains(fmt.Sprint(e.ContextMap()), "boom") {
			t.Fatalf("panic logged a second time: %v %v", e.Message, e.ContextMap())
		}
	}
}

// TestInternalErrorsHideDetail checks that an unexpected error is logged in
// full and answered INTERNAL without it.
func TestInternalErrorsHideDetail(t *testing.T) {
	h := newHarness(t, harnessConfig{wrap: func(d storage.Driver) storage.Driver { return failStore{d} }})
	_, err := h.client.DeleteSession(t.Context(), &sessiondv1.DeleteSessionRequest{Ref: byAlias("x")})
	wantCode(t, err, codes.Internal, "")
	if strings.Contains(err.Error(), "/secret/path") {
		t.Fatalf("internal detail sent to the client: %v", err)
	}
	logged := h.logs.FilterMessage("internal error").All()
	if len(logged) != 1 || !strings.Contains(fmt.Sprint(logged[0].ContextMap()["error"]), "/secret/path") {
		t.Fatalf("internal error not logged in full: %v", logged)
	}
}

type failStore struct{ storage.Driver }

func (failStore) Delete(context.Context, storage.Ref, uint64) error {
	return fmt.Errorf("open /secret/path: %w", io.ErrUnexpectedEOF)
}

// TestErrorMessagesHideBackendDetail checks that expected errors are
// answered in the server's own words: no backend prefix, no paths or OS
// errors (which are logged instead), and a missing session named as the
// client asked for it.
func TestErrorMessagesHideBackendDetail(t *testing.T) {
	h := newHarness(t, harnessConfig{wrap: func(d storage.Driver) storage.Driver { return detailStore{d} }})
	ctx := t.Context()
	missing := uuid.NewString()
	taken := h.create(t, &sessiondv1.CreateSessionRequest{Alias: "taken"})

	tests := []struct {
		name    string
		call    func() error
		code    codes.Code
		want    string // the message contains it
		logged  string // a log line with the detail has this message ("": none)
		wantNot []string
	}{
		{"not found by alias", func() error {
			_, err := h.client.GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: &sessiondv1.SessionRef{Namespace: "ns1", Key: &sessiondv1.SessionRef_Alias{Alias: "nobody"}}})
			return err
		}, codes.NotFound, `session with alias "nobody" in namespace "ns1" not found`, "", []string{"file:"}},
		{"not found by id", func() error {
			_, err := h.client.DeleteSession(ctx, &sessiondv1.DeleteSessionRequest{Ref: byID(missing)})
			return err
		}, codes.NotFound, "session " + missing + " in the default namespace not found", "", []string{"file:"}},
		{"alias taken keeps its wording without the prefix", func() error {
			_, err := h.client.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Alias: "taken"})
			return err
		}, codes.AlreadyExists, `alias "taken"`, "", []string{"file:"}},
		{"id taken names the id, not a folder", func() error {
			_, err := h.client.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Id: taken.GetId(), Title: "other"})
			return err
		}, codes.AlreadyExists, "session id " + taken.GetId() + " is already in use", "", []string{"file:"}},
		{"data loss", func() error {
			_, err := h.client.GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: byAlias("damaged")})
			return err
		}, codes.DataLoss, `session with alias "damaged" in the default namespace is damaged`, "damaged session", []string{"/secret/path", "file:"}},
		{"disk full", func() error {
			_, err := h.client.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byID(taken.GetId()), Messages: []*sessiondv1.Message{user("full", "x")}})
			return err
		}, codes.ResourceExhausted, "storage is full", "storage full", []string{"/secret/path", "file:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			wantCode(t, err, tt.code, tt.want)
			for _, bad := range tt.wantNot {
				if strings.Contains(status.Convert(err).Message(), bad) {
					t.Fatalf("message %q carries backend detail %q", status.Convert(err).Message(), bad)
				}
			}
			if tt.logged != "" {
				logged := h.logs.FilterMessage(tt.logged).All()
				if len(logged) == 0 || !strings.Contains(fmt.Sprint(logged[len(logged)-1].ContextMap()["error"]), "/secret/path") {
					t.Fatalf("detail not logged as %q: %v", tt.logged, logged)
				}
			}
		})
	}
}

// detailStore answers like a backend whose errors carry paths: Get of alias
// "damaged" is DATA_LOSS and an append of message "full" is a full disk.
type detailStore struct{ storage.Driver }

func (d detailStore) Get(ctx context.Context, ref storage.Ref) (*storage.Session, error) {
	if ref.Alias == "damaged" {
		return nil, fmt.Errorf("file: session x: open /secret/path/snapshot: checksum mismatch: %w", storage.ErrDataLoss)
	}
	return d.Driver.Get(ctx, ref)
}

func (d detailStore) Append(ctx context.Context, req storage.AppendRequest, msgs storage.Messages) (storage.AppendResult, error) {
	if len(msgs.Prepared) == 1 && msgs.Prepared[0].GetId() == "full" {
		return storage.AppendResult{}, fmt.Errorf("write /secret/path/journal: no space left on device: %w", storage.ErrNoSpace)
	}
	return d.Driver.Append(ctx, req, msgs)
}
