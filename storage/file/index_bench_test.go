package file

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sys/unix"

	"github.com/sessiond/sessiond/storage"
)

// BenchmarkDecodeIndex decodes one namespace's index file of 100,000
// sessions shaped like BenchmarkOpen100k's (alias, title, one label): the
// part of an Open after a clean stop that grows with the sessions.
func BenchmarkDecodeIndex(b *testing.B) {
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	metas := make([]*storage.Session, fixtureSessions)
	for i := range metas {
		t := base.Add(time.Duration(i) * time.Second)
		metas[i] = &storage.Session{ID: uuid.NewString(), Namespace: "bench", Alias: fmt.Sprintf("s-%d", i), Title: fmt.Sprintf("session %d", i),
			CreatedAt: t, UpdatedAt: t, Revision: 1, MessageCount: 1, Labels: map[string]string{"team": fmt.Sprint(i % 10)}}
	}
	data := encodeIndex(make([]byte, 16), "bench", metas)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	cpu := processCPU(b)
	for b.Loop() {
		_, _, got, err := decodeIndex(data)
		if err != nil || len(got) != len(metas) {
			b.Fatalf("decoded %d, %v", len(got), err)
		}
	}
	b.ReportMetric(float64(processCPU(b)-cpu)/float64(b.N), "cpu-ns/op")
}

// processCPU is the CPU time the process has used so far, all threads
// (the garbage collector's and parallel decoders' too): on a shared
// machine it varies much less than wall time.
func processCPU(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
