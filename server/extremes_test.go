package server

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc/codes"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
	"github.com/sessiond/sessiond/storage/file"
)

// TestLoadExtremes: LoadSession with offset 1 and limit 2^63-1 panicked in
// the file store and was answered INTERNAL with a stack trace logged per
// call; it answers the messages from offset 1, and nothing is logged above
// info.
func TestLoadExtremes(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	se := h.create(t, &sessiondv1.CreateSessionRequest{Messages: []*sessiondv1.Message{user("a", "1"), user("b", "2"), user("c", "3")}})
	for _, c := range []struct {
		req  *sessiondv1.LoadSessionRequest
		want int
	}{
		{&sessiondv1.LoadSessionRequest{Offset: 1, Limit: math.MaxInt64}, 2},
		{&sessiondv1.LoadSessionRequest{Offset: math.MaxInt64, Limit: math.MaxInt64}, 0},
		{&sessiondv1.LoadSessionRequest{Tail: true, Limit: math.MaxInt64}, 3},
	} {
		c.req.Ref = byID(se.GetId())
		if _, msgs := h.load(t, c.req); len(msgs) != c.want {
			t.Errorf("LoadSession(offset %d, limit %d, tail %v): %d messages, want %d", c.req.Offset, c.req.Limit, c.req.Tail, len(msgs), c.want)
		}
	}
	if n := h.logs.FilterLevelExact(zapcore.ErrorLevel).Len(); n != 0 {
		t.Errorf("%d error lines logged: %v", n, h.logs.FilterLevelExact(zapcore.ErrorLevel).All())
	}
}

// readOnlyStore fails every write as the file store does once its data
// dir's filesystem turned read-only.
type readOnlyStore struct{ storage.Driver }

func (readOnlyStore) Create(context.Context, storage.CreateRequest, storage.Messages) (*storage.Session, error) {
	return nil, fmt.Errorf("file: create session: open /data/sessions/x: read-only file system: %w", file.ErrReadOnly)
}

func (readOnlyStore) Append(context.Context, storage.AppendRequest, storage.Messages) (storage.AppendResult, error) {
	return storage.AppendResult{}, fmt.Errorf("file: append: write /data/sessions/x/journal: read-only file system: %w", file.ErrReadOnly)
}

// TestReadOnlyDataDir: writes to a data dir turned read-only answer
// UNAVAILABLE (they were INTERNAL), reads go on, and the condition is
// logged once, not once per call.
func TestReadOnlyDataDir(t *testing.T) {
	h := newHarness(t, harnessConfig{wrap: func(d storage.Driver) storage.Driver { return readOnlyStore{d} }})
	for range 50 {
		_, err := h.client.CreateSession(t.Context(), &sessiondv1.CreateSessionRequest{})
		wantCode(t, err, codes.Unavailable, "retry later")
		_, err = h.client.AppendMessages(t.Context(), &sessiondv1.AppendMessagesRequest{Ref: byAlias("a"), Messages: []*sessiondv1.Message{user("m", "x")}})
		wantCode(t, err, codes.Unavailable, "")
	}
	if _, err := h.client.GetServerInfo(t.Context(), &sessiondv1.GetServerInfoRequest{}); err != nil {
		t.Fatal(err)
	}
	if n := h.logs.FilterMessage("store unavailable").Len(); n != 1 {
		t.Errorf("%d log lines for 100 refused writes, want 1", n)
	}
	if n := h.logs.FilterLevelExact(zapcore.ErrorLevel).Len(); n != 0 {
		t.Errorf("%d error lines (internal errors?)", n)
	}
}

// TestStalledLoadReaders measures, in one run, the heap that 8 readers of a
// 64 MiB session add when each reads one frame and stops: the server now
// streams from the stored bytes, one frame per reader (each used to decode
// and hold the whole session: 355-378 MiB of RSS for 8). One load over
// WithMaxLoads is RESOURCE_EXHAUSTED.
func TestStalledLoadReaders(t *testing.T) {
	if testing.Short() {
		t.Skip("stores a 64 MiB session")
	}
	const readers = 8
	h := newHarness(t, harnessConfig{opts: []Option{WithMaxLoads(readers)}})
	se := h.create(t, &sessiondv1.CreateSessionRequest{})
	big := strings.Repeat("x", 1<<20)
	for b := range 8 {
		var ms []*sessiondv1.Message
		for i := range 8 {
			ms = append(ms, user(fmt.Sprintf("m%d-%d", b, i), big))
		}
		if _, err := h.client.AppendMessages(t.Context(), &sessiondv1.AppendMessagesRequest{Ref: byID(se.GetId()), Messages: ms}); err != nil {
			t.Fatal(err)
		}
	}
	heap := func() int64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc)
	}
	base := heap()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	for range readers {
		stream, err := h.client.LoadSession(ctx, &sessiondv1.LoadSessionRequest{Ref: byID(se.GetId())})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(time.Second) // the handlers fill what flow control lets them
	delta := heap() - base
	t.Logf("heap added by %d stalled readers of a 64 MiB session: %d MiB", readers, delta>>20)
	if delta > 200<<20 {
		t.Errorf("%d stalled readers add %d MiB of heap, want under 200 MiB", readers, delta>>20)
	}
	stream, err := h.client.LoadSession(ctx, &sessiondv1.LoadSessionRequest{Ref: byID(se.GetId())})
	if err == nil {
		_, err = stream.Recv()
	}
	wantCode(t, err, codes.ResourceExhausted, "max_concurrent_loads")
}
