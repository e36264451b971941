package postgres_test

import (
	"fmt"
	"testing"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
	"github.com/sessiond/sessiond/storage/postgres/pgtest"
)

// BenchmarkLiveTurnWrites times the writes a finish's grace changes: an
// update (a write with an events row, which looks for the grace), and a
// whole turn of 100 deltas and its finish (which marks the session) with
// a tool call's answer after it.
func BenchmarkLiveTurnWrites(b *testing.B) {
	dsn := pgtest.Schema(b)
	s := open(b, dsn)
	ctx := b.Context()
	se, err := s.Create(ctx, storage.CreateRequest{Namespace: "ns", Messages: []*sessiondv1.Message{
		{Id: "q", Role: sessiondv1.Role_ROLE_USER, Content: "tell me a story"}}})
	if err != nil {
		b.Fatal(err)
	}
	ref := storage.Ref{Namespace: "ns", ID: se.ID}
	b.Run("update", func(b *testing.B) {
		for n := range b.N {
			if _, err := s.Update(ctx, storage.UpdateRequest{Ref: ref, Fields: storage.UpdateSummary, Summary: fmt.Sprint(n)}); err != nil {
				b.Fatal(err)
			}
		}
	})
	turns := 0 // ids unique across the runs of the sub-benchmark
	b.Run("turn", func(b *testing.B) {
		for range b.N {
			turns++
			id := fmt.Sprint("a", turns)
			if _, err := s.Append(ctx, storage.AppendRequest{Ref: ref, Messages: []*sessiondv1.Message{{Id: id, Role: sessiondv1.Role_ROLE_ASSISTANT,
				State: sessiondv1.MessageState_MESSAGE_STATE_STREAMING}}}); err != nil {
				b.Fatal(err)
			}
			var off int64
			for i := range 100 {
				piece := fmt.Sprintf("d%05d ", i)
				if _, err := s.AppendDelta(ctx, storage.DeltaRequest{Ref: ref, Delta: &sessiondv1.MessageDelta{MessageId: id, Offset: off, Content: piece}}); err != nil {
					b.Fatal(err)
				}
				off += int64(len(piece))
			}
			if _, err := s.FinishMessage(ctx, storage.FinishRequest{Ref: ref, MessageID: id, ToolCalls: []*sessiondv1.ToolCall{{Id: "c" + id, Name: "f", Arguments: "{}"}}}); err != nil {
				b.Fatal(err)
			}
			if _, err := s.Append(ctx, storage.AppendRequest{Ref: ref, Messages: []*sessiondv1.Message{{Id: "r" + id, Role: sessiondv1.Role_ROLE_TOOL,
				ToolCallId: "c" + id, Content: "ok"}}}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
