package file

import (
	"fmt"
	"testing"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// BenchmarkContextView compares loading the context view of a
// 100,000-message session compacted to its last 50 messages (the summary
// and those 50) with loading a 51-message session that has no compaction:
// the context view must cost no more than the messages it holds.
//
//	go test -run '^$' -bench ContextView -count 6 ./storage/file/ | benchstat -
func BenchmarkContextView(b *testing.B) {
	dir := b.TempDir()
	s, err := openPortable(b.Context(), dir)
	if err != nil {
		b.Fatal(err)
	}
	message := func(i int) *sessiondv1.Message {
		return &sessiondv1.Message{Id: fmt.Sprintf("m%d", i), Role: sessiondv1.Role_ROLE_USER,
			Content: fmt.Sprintf("message %d of a long conversation, about as long as a short chat turn", i)}
	}
	const total, kept = 100_000, 50
	big, err := s.Create(b.Context(), storage.CreateRequest{})
	if err != nil {
		b.Fatal(err)
	}
	for from := 0; from < total; from += 1000 {
		batch := make([]*sessiondv1.Message, 1000)
		for i := range batch {
			batch[i] = message(from + i)
		}
		if _, err := s.Append(b.Context(), storage.AppendRequest{Ref: storage.Ref{ID: big.ID}, Messages: batch}); err != nil {
			b.Fatal(err)
		}
	}
	summary := &sessiondv1.Message{Id: "summary", Role: sessiondv1.Role_ROLE_SYSTEM,
		Content: "a summary of the first 99,950 messages, about as long as a short chat turn"}
	if _, err := s.Compact(b.Context(), storage.CompactRequest{Ref: storage.Ref{ID: big.ID},
		ThroughMessageID: fmt.Sprintf("m%d", total-kept-1), Summary: summary}); err != nil {
		b.Fatal(err)
	}
	small := make([]*sessiondv1.Message, kept+1)
	for i := range small {
		small[i] = message(i)
	}
	plain, err := s.Create(b.Context(), storage.CreateRequest{Messages: small})
	if err != nil {
		b.Fatal(err)
	}
	// Measured on a store opened again, with both sessions loaded once:
	// no background work of the writes above (sealing the log, folds)
	// runs during the measurements, and both are read from memory.
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	if s, err = openPortable(b.Context(), dir); err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for _, id := range []string{big.ID, plain.ID} {
		if _, _, err := s.Load(b.Context(), storage.Ref{ID: id}, storage.LoadOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range []struct {
		name string
		id   string
		view storage.LoadView
	}{
		{"compacted-100000-context", big.ID, storage.ViewContext},
		{"uncompacted-51-full", plain.ID, storage.ViewFull},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, ms, err := s.Load(b.Context(), storage.Ref{ID: c.id}, storage.LoadOptions{View: c.view})
				if err != nil || len(ms) != kept+1 {
					b.Fatalf("loaded %d messages, %v; want %d", len(ms), err, kept+1)
				}
			}
		})
	}
}
