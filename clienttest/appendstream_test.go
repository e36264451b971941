package clienttest_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/clienttest"
)

// A handle's first append is an AppendMessages call; its later ones, and
// those of every other handle on the connection, share one AppendStream.
func TestHandlesShareAppendStream(t *testing.T) {
	rec := newRecorder()
	srv := clienttest.NewServer(t, rec.options())
	c := srv.Dial(t)
	ctx := t.Context()
	const handles, turns = 8, 5
	hs := make([]*client.Handle, handles)
	for i := range hs {
		h, err := c.New(ctx)
		if err != nil {
			t.Fatal(err)
		}
		hs[i] = h
	}
	var wg sync.WaitGroup
	errs := make(chan error, handles)
	for i, h := range hs {
		wg.Go(func() {
			for k := range turns {
				if err := h.Append(userMsg(fmt.Sprintf("%d-%d", i, k))); err != nil {
					errs <- err
					return
				}
				if err := h.Save(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i, h := range hs {
		var want []string
		for k := range turns {
			want = append(want, fmt.Sprintf("%d-%d", i, k))
		}
		if got := storedContents(t, c, client.ID(h.ID())); !slices.Equal(got, want) {
			t.Errorf("handle %d stored %q, want %q", i, got, want)
		}
		if h.Revision() != turns+1 || h.Dirty() {
			t.Errorf("handle %d: revision %d, dirty %v", i, h.Revision(), h.Dirty())
		}
	}
	if n := rec.count("AppendMessages"); n != handles {
		t.Errorf("%d AppendMessages calls, want %d (each handle's first append)", n, handles)
	}
	if n, s := rec.count("AppendStream"), rec.count(streamedAppend); n != 1 || s != handles*(turns-1) {
		t.Errorf("%d AppendStream calls carrying %d appends, want 1 carrying %d", n, s, handles*(turns-1))
	}
}

// A streamed append's error is the unary call's: same sentinel, same
// status; a conflict the handle's own write does not explain stays one.
func TestStreamedAppendErrors(t *testing.T) {
	rec := newRecorder()
	srv := clienttest.NewServer(t, rec.options())
	c := srv.Dial(t)
	ctx := t.Context()
	h, err := c.New(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = h.Append(userMsg("mine"))
	if err := h.Save(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Append(ctx, client.ID(h.ID()), 0, userMsg("theirs")); err != nil {
		t.Fatal(err)
	}
	_ = h.Append(userMsg("mine again"))
	err = h.Save(ctx)
	if !errors.Is(err, client.ErrConflict) || status.Code(err) != codes.Aborted {
		t.Fatalf("Save after another writer = %v, want ErrConflict (ABORTED)", err)
	}
	if rec.count(streamedAppend) != 1 {
		t.Fatalf("the second save sent %d streamed appends, want 1", rec.count(streamedAppend))
	}
	if err := h.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if got := storedContents(t, c, client.ID(h.ID())); !slices.Equal(got, []string{"mine", "theirs"}) {
		t.Fatalf("stored %q", got)
	}
}

// Against a daemon without AppendStream, appends are AppendMessages calls,
// and the stream is not tried again.
func TestAppendStreamFallsBackToUnary(t *testing.T) {
	rec := newRecorder()
	noStream := clienttest.WithGRPCServerOptions(grpc.ChainStreamInterceptor(
		func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			if info.FullMethod == "/sessiond.v1.SessionStoreService/AppendStream" {
				return status.Error(codes.Unimplemented, "unknown method AppendStream")
			}
			return handler(srv, ss)
		}))
	srv := clienttest.NewServer(t, rec.options(), noStream)
	c := srv.Dial(t)
	ctx := t.Context()
	h, err := c.New(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for k := range 4 {
		_ = h.Append(userMsg(fmt.Sprint(k)))
		if err := h.Save(ctx); err != nil {
			t.Fatalf("save %d: %v", k, err)
		}
	}
	if got := storedContents(t, c, client.ID(h.ID())); !slices.Equal(got, []string{"0", "1", "2", "3"}) {
		t.Fatalf("stored %q", got)
	}
	if a, s := rec.count("AppendMessages"), rec.count("AppendStream"); a != 4 || s != 1 {
		t.Errorf("%d AppendMessages and %d AppendStream calls, want 4 and 1", a, s)
	}
}

// A stream broken by a daemon restart fails the appends waiting on it as
// UNAVAILABLE; the handle's retry opens a new stream and stores each
// message once.
func TestAppendStreamAcrossRestart(t *testing.T) {
	rec := newRecorder()
	srv := clienttest.NewServer(t, rec.options())
	c := srv.Dial(t)
	ctx := t.Context()
	h, err := c.New(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"a", "b"} {
		_ = h.Append(userMsg(m))
		if err := h.Save(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	_ = h.Append(userMsg("c"))
	err = h.Save(ctx)
	if err != nil && !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("Save on the broken stream = %v, want nil or ErrUnavailable", err)
	}
	_ = h.Append(userMsg("d"))
	if err := h.Close(ctx); err != nil {
		t.Fatalf("Close after a restart: %v", err)
	}
	if got := storedContents(t, c, client.ID(h.ID())); !slices.Equal(got, []string{"a", "b", "c", "d"}) {
		t.Fatalf("stored %q", got)
	}
	if n := rec.count("AppendStream"); n != 2 {
		t.Errorf("%d AppendStream calls, want 2 (one per daemon run)", n)
	}
}
