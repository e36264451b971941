package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// watchBroker starts a watch, live when it returns, served from a broker
// the test publishes to, and ended after 20 s at the latest.
func watchBroker(t *testing.T, opts ...grpc.CallOption) (*storage.Broker, grpc.ServerStreamingClient[sessiondv1.WatchSessionResponse]) {
	t.Helper()
	broker := storage.NewBroker()
	h := newHarness(t, harnessConfig{wrap: func(d storage.Driver) storage.Driver { return &brokerStore{Driver: d, broker: broker} }})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	stream, err := h.client.WatchSession(ctx, &sessiondv1.WatchSessionRequest{Ref: byAlias("any")}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Header(); err != nil {
		t.Fatal(err)
	}
	return broker, stream
}

// A watcher that stops reading is cut off once WatchQueueBytes of events
// wait unsent, long before storage.WatchBuffer events of 512 KiB (128 MiB)
// would: it receives what gRPC took before its windows shut, then
// OUT_OF_RANGE naming the bytes.
func TestWatchQueueBytesBound(t *testing.T) {
	broker, stream := watchBroker(t)
	payload := []*sessiondv1.Message{user("big", strings.Repeat("x", 512<<10))}
	// More than the 16 MiB a grpc-go client's window estimation may let
	// in unread, plus three times the queue's bound: still far from
	// storage.WatchBuffer events.
	const published = (16<<20 + 3*WatchQueueBytes) / (512 << 10)
	for rev := uint64(2); rev < 2+published; rev++ {
		broker.Publish("watched", storage.Event{Type: storage.EventAppended, Revision: rev, Session: &storage.Session{ID: "watched", Revision: rev}, Messages: payload})
	}
	var n int
	for {
		_, err := stream.Recv()
		if err != nil {
			wantCode(t, err, codes.OutOfRange, "bytes of events not yet sent")
			break
		}
		n++
	}
	if n >= published {
		t.Fatalf("watcher got all %d events before OUT_OF_RANGE; want it cut off once %d bytes waited", n, WatchQueueBytes)
	}
}

// An event larger than WatchQueueBytes still reaches a watcher with nothing
// else queued, and the watch goes on.
func TestWatchEventOverQueueBytes(t *testing.T) {
	broker, stream := watchBroker(t, grpc.MaxCallRecvMsgSize(4*WatchQueueBytes))
	huge := user("huge", strings.Repeat("y", WatchQueueBytes+1<<20))
	broker.Publish("watched", storage.Event{Type: storage.EventAppended, Revision: 2, Session: &storage.Session{ID: "watched", Revision: 2}, Messages: []*sessiondv1.Message{huge}})
	for rev := uint64(2); rev <= 3; rev++ {
		e, err := stream.Recv()
		if err != nil {
			t.Fatalf("revision %d: %v", rev, err)
		}
		if e.GetRevision() != rev {
			t.Fatalf("got revision %d, want %d", e.GetRevision(), rev)
		}
		if rev == 2 {
			if got := e.GetMessages()[0].GetContent(); len(got) != len(huge.GetContent()) {
				t.Fatalf("the large event arrived with %d bytes of content, want %d", len(got), len(huge.GetContent()))
			}
			broker.Publish("watched", storage.Event{Type: storage.EventUpdated, Revision: 3, Session: &storage.Session{ID: "watched", Revision: 3}})
		}
	}
}
