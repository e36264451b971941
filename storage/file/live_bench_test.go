package file

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// BenchmarkLiveTurn compares, on sessions of 10 and 10,000 messages of
// 1 KiB, a durable 16-byte AppendDelta to the session's open message with
// a durable append of a 16-byte message to the same session without one,
// by one writer. Reports p50-ns and p99-ns per write, and the bytes
// allocated per write, which must not grow with the session.
func BenchmarkLiveTurn(b *testing.B) {
	for _, length := range []int{10, 10_000} {
		for _, mode := range []string{"append", "delta"} {
			b.Run(fmt.Sprintf("len=%d/%s", length, mode), func(b *testing.B) {
				s, err := openPortable(b.Context(), b.TempDir())
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				ms := make([]*sessiondv1.Message, length)
				for j := range ms {
					ms[j] = msg(fmt.Sprintf("seed-%d", j), strings.Repeat("s", 1024))
				}
				if mode == "delta" {
					ms = append(ms, &sessiondv1.Message{Id: "open", Role: sessiondv1.Role_ROLE_ASSISTANT, State: sessiondv1.MessageState_MESSAGE_STATE_STREAMING})
				}
				se, err := s.Create(b.Context(), storage.CreateRequest{Messages: ms})
				if err != nil {
					b.Fatal(err)
				}
				ref := storage.Ref{ID: se.ID}
				piece := strings.Repeat("d", 16)
				lat := make([]time.Duration, 0, b.N)
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					t0 := time.Now()
					if mode == "delta" {
						_, err = s.AppendDelta(b.Context(), storage.DeltaRequest{Ref: ref, Delta: &sessiondv1.MessageDelta{MessageId: "open", Offset: int64(16 * i), Content: piece}})
					} else {
						_, err = s.Append(b.Context(), storage.AppendRequest{Ref: ref, Messages: []*sessiondv1.Message{msg(fmt.Sprintf("a-%d", i), piece)}})
					}
					lat = append(lat, time.Since(t0))
					if err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
				b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
			})
		}
	}
}
