package server

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/internal/auth"
	"github.com/sessiond/sessiond/storage"
)

type appendStreamClient = grpc.BidiStreamingClient[sessiondv1.AppendStreamRequest, sessiondv1.AppendStreamResponse]

// sendAll sends reqs, tagged 1, 2, ..., closes the send side and returns
// every response and the stream's end (nil: OK).
func sendAll(t *testing.T, st appendStreamClient, reqs []*sessiondv1.AppendMessagesRequest) ([]*sessiondv1.AppendStreamResponse, error) {
	t.Helper()
	for i, r := range reqs {
		if err := st.Send(&sessiondv1.AppendStreamRequest{Append: r, Tag: uint64(i + 1)}); err != nil {
			t.Fatalf("Send %d: %v", i, err)
		}
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var out []*sessiondv1.AppendStreamResponse
	for {
		resp, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, resp)
	}
}

func statusOf(s *sessiondv1.AppendStatus) *status.Status {
	if s == nil {
		return nil
	}
	return status.FromProto(&spb.Status{Code: s.GetCode(), Message: s.GetMessage(), Details: s.GetDetails()})
}

// Pipelined appends are answered in request order, each with what
// AppendMessages answers for the same request (result or error, with its
// details), and a failed append does not end the stream.
func TestAppendStreamAnswersLikeAppendMessages(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	a := h.create(t, &sessiondv1.CreateSessionRequest{Alias: "a"})
	b := h.create(t, &sessiondv1.CreateSessionRequest{Alias: "b"})
	reqs := []*sessiondv1.AppendMessagesRequest{
		{Ref: byID(a.GetId()), Messages: []*sessiondv1.Message{user("a1", "x")}},
		{Ref: byID(b.GetId()), Messages: []*sessiondv1.Message{user("b1", "x"), user("b2", "y")}},
		{Ref: byID(a.GetId()), Messages: []*sessiondv1.Message{user("a2", "x")}, ExpectedRevision: 2},
		{Messages: []*sessiondv1.Message{user("n", "x")}},                                                    // no ref
		{Ref: byID("00000000-0000-4000-8000-000000000000"), Messages: []*sessiondv1.Message{user("n", "x")}}, // not found
		{Ref: byID(a.GetId()), Messages: []*sessiondv1.Message{user("a1", "other")}},                         // id taken
		{Ref: byID(a.GetId()), Messages: []*sessiondv1.Message{{Id: "r"}}},                                   // no role
		{Ref: byID(a.GetId()), Messages: []*sessiondv1.Message{user("a3", "x")}, ExpectedRevision: 1},        // stale
		{Ref: byAlias("a"), Messages: []*sessiondv1.Message{user("a1", "x"), user("a3", "z")}},               // a1 stored: skipped
	}
	st, err := h.client.AppendStream(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	got, err := sendAll(t, st, reqs)
	if err != nil {
		t.Fatalf("stream ended with %v", err)
	}
	if len(got) != len(reqs) {
		t.Fatalf("%d responses to %d requests", len(got), len(reqs))
	}

	// The same requests, unary, on a fresh copy of the same two sessions,
	// must answer the same.
	u := newHarness(t, harnessConfig{})
	u.create(t, &sessiondv1.CreateSessionRequest{Id: a.GetId(), Alias: "a"})
	u.create(t, &sessiondv1.CreateSessionRequest{Id: b.GetId(), Alias: "b"})
	for i, r := range reqs {
		resp := got[i]
		if resp.GetTag() != uint64(i+1) {
			t.Fatalf("response %d has tag %d: answers out of order", i, resp.GetTag())
		}
		want, werr := u.client.AppendMessages(t.Context(), r)
		if werr != nil {
			if resp.GetResult() != nil {
				t.Fatalf("request %d: stream stored it (%v), unary failed with %v", i, resp.GetResult(), werr)
			}
			if diff := cmp.Diff(status.Convert(werr).Proto(), statusOf(resp.GetStatus()).Proto(), protocmp.Transform()); diff != "" {
				t.Errorf("request %d: status (-unary +stream):\n%s", i, diff)
			}
			continue
		}
		if resp.GetStatus() != nil {
			t.Fatalf("request %d: stream failed with %v, unary answered %v", i, statusOf(resp.GetStatus()).Err(), want)
		}
		if diff := cmp.Diff(want, resp.GetResult(), protocmp.Transform()); diff != "" {
			t.Errorf("request %d: result (-unary +stream):\n%s", i, diff)
		}
	}
	for i, code := range map[int]codes.Code{3: codes.InvalidArgument, 4: codes.NotFound, 5: codes.AlreadyExists, 6: codes.InvalidArgument, 7: codes.Aborted} {
		if c := codes.Code(got[i].GetStatus().GetCode()); c != code {
			t.Errorf("request %d answered %v, want %v", i, c, code)
		}
		if code == codes.InvalidArgument {
			checkDetails(t, statusOf(got[i].GetStatus()).Err())
		}
	}
	_, msgs := h.load(t, &sessiondv1.LoadSessionRequest{Ref: byID(a.GetId())})
	var ids []string
	for _, m := range msgs {
		ids = append(ids, m.GetId())
	}
	if diff := cmp.Diff([]string{"a1", "a2", "a3"}, ids); diff != "" {
		t.Errorf("session a holds (-want +got):\n%s", diff)
	}

}

// gateStore holds every Append until release is closed, counting those
// started, and each session's appends in the order they reach the store.
type gateStore struct {
	storage.Driver
	started atomic.Int64
	release chan struct{}
}

func (g *gateStore) Append(ctx context.Context, req storage.AppendRequest, msgs storage.Messages) (storage.AppendResult, error) {
	g.started.Add(1)
	select {
	case <-g.release:
	case <-ctx.Done():
		return storage.AppendResult{}, ctx.Err()
	}
	return g.Driver.Append(ctx, req, msgs)
}

// Appends to different sessions run at once (so they can share a flush),
// up to AppendStreamWindow per stream and no more: the handler stops
// reading. Appends to one session keep request order even so: each carries
// the revision the one before it makes.
func TestAppendStreamConcurrencyAndOrder(t *testing.T) {
	gate := &gateStore{release: make(chan struct{})}
	h := newHarness(t, harnessConfig{wrap: func(d storage.Driver) storage.Driver { gate.Driver = d; return gate }})
	const sessions = AppendStreamWindow + 16
	ids := make([]string, sessions)
	for i := range ids {
		ids[i] = h.create(t, &sessiondv1.CreateSessionRequest{}).GetId()
	}
	st, err := h.client.AppendStream(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	sent := make(chan error, 1)
	go func() {
		for i := range sessions * 3 {
			n := i / sessions // the n-th append to its session: revision n+1 before it
			r := &sessiondv1.AppendMessagesRequest{Ref: byID(ids[i%sessions]),
				Messages: []*sessiondv1.Message{user(fmt.Sprintf("m%d", n), "x")}, ExpectedRevision: uint64(n + 1)}
			if err := st.Send(&sessiondv1.AppendStreamRequest{Append: r, Tag: uint64(i)}); err != nil {
				sent <- err
				return
			}
		}
		sent <- st.CloseSend()
	}()
	deadline := time.Now().Add(10 * time.Second)
	for gate.started.Load() < AppendStreamWindow && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // room for an append beyond the bound to start
	if n := gate.started.Load(); n != AppendStreamWindow {
		t.Fatalf("%d appends running at once on one stream, want %d", n, AppendStreamWindow)
	}
	close(gate.release)
	for i := range sessions * 3 {
		resp, err := st.Recv()
		if err != nil {
			t.Fatalf("Recv %d: %v", i, err)
		}
		if resp.GetTag() != uint64(i) || resp.GetStatus() != nil {
			t.Fatalf("response %d: tag %d, status %v", i, resp.GetTag(), statusOf(resp.GetStatus()).Err())
		}
		if want := int64(i/sessions + 1); resp.GetResult().GetMessageCount() != want {
			t.Fatalf("response %d: message count %d, want %d", i, resp.GetResult().GetMessageCount(), want)
		}
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("stream end: %v, want OK", err)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
}

// A token scoped to one namespace has each request checked: one naming
// another namespace is PERMISSION_DENIED, alone, and stores nothing.
func TestAppendStreamAuthorizesEachRequest(t *testing.T) {
	const secret = "sessiond_test-secret-a"
	sum := auth.HashSecret(secret)
	set, err := auth.Parse([]byte(`{"tokens": [{"name": "writer-a", "sha256": "` + hex.EncodeToString(sum[:]) +
		`", "namespaces": ["a"], "role": "write"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, harnessConfig{grpcOpts: NewAuthorizer(set, nil).ServerOptions()})
	for _, ns := range []string{"a", "b"} {
		if _, err := h.file.Create(t.Context(), storage.CreateRequest{Namespace: ns, Alias: "s"}); err != nil {
			t.Fatal(err)
		}
	}
	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+secret)
	st, err := h.client.AppendStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ref := func(ns string) *sessiondv1.SessionRef {
		return &sessiondv1.SessionRef{Namespace: ns, Key: &sessiondv1.SessionRef_Alias{Alias: "s"}}
	}
	got, err := sendAll(t, st, []*sessiondv1.AppendMessagesRequest{
		{Ref: ref("a"), Messages: []*sessiondv1.Message{user("1", "x")}},
		{Ref: ref("b"), Messages: []*sessiondv1.Message{user("2", "x")}},
		{Ref: ref("a"), Messages: []*sessiondv1.Message{user("3", "x")}},
	})
	if err != nil || len(got) != 3 {
		t.Fatalf("%d responses, end %v", len(got), err)
	}
	if got[0].GetResult().GetMessageCount() != 1 || got[2].GetResult().GetMessageCount() != 2 {
		t.Fatalf("allowed appends answered %v, %v", got[0], got[2])
	}
	if c := codes.Code(got[1].GetStatus().GetCode()); c != codes.PermissionDenied || got[1].GetTag() != 2 {
		t.Fatalf("append into b answered %v (tag %d), want PERMISSION_DENIED", c, got[1].GetTag())
	}
	if s, err := h.file.Get(t.Context(), storage.Ref{Namespace: "b", Alias: "s"}); err != nil || s.MessageCount != 0 {
		t.Fatalf("the refused append wrote: %v, %v", s, err)
	}
}

// Drain answers what the stream has received, then ends it with
// UNAVAILABLE, so that a graceful stop is not held by an idle stream.
func TestAppendStreamEndsOnDrain(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	s := h.create(t, &sessiondv1.CreateSessionRequest{})
	st, err := h.client.AppendStream(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&sessiondv1.AppendStreamRequest{Append: &sessiondv1.AppendMessagesRequest{
		Ref: byID(s.GetId()), Messages: []*sessiondv1.Message{user("1", "x")}}}); err != nil {
		t.Fatal(err)
	}
	if resp, err := st.Recv(); err != nil || resp.GetResult().GetMessageCount() != 1 {
		t.Fatalf("Recv: %v, %v", resp, err)
	}
	h.srv.Drain()
	_, err = st.Recv()
	wantCode(t, err, codes.Unavailable, "shutting down")
}
