package file

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sessiond/sessiond/storage"
)

// joinQueue queues a request as walCommit does, for a gathering leader.
func joinQueue(w *wal) {
	w.mu.Lock()
	w.queue = append(w.queue, &walReq{})
	w.gather.queued(len(w.queue))
	w.mu.Unlock()
}

// gatherFrom runs gatherUntil as a leader whose own request is queued, and
// returns the queue length it took and how long it waited.
func gatherFrom(w *wal, want int, wait time.Duration) (int, time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t0 := time.Now()
	w.gatherUntil(want, wait)
	return len(w.queue), time.Since(t0)
}

func TestGatherUntil(t *testing.T) {
	t.Run("ends once the expected writers queued", func(t *testing.T) {
		w := &wal{queue: []*walReq{{}}}
		go func() {
			joinQueue(w)
			joinQueue(w)
		}()
		n, took := gatherFrom(w, 3, 40*time.Second)
		if n != 3 || took >= 10*time.Second {
			t.Errorf("took a queue of %d after %v; want 3 as soon as they queued, before a step (10s) passed", n, took)
		}
	})
	t.Run("ends at once when the expected writers queued first", func(t *testing.T) {
		// They can: the leader takes w.mu after them.
		w := &wal{queue: []*walReq{{}}}
		joinQueue(w)
		joinQueue(w)
		if n, took := gatherFrom(w, 3, 40*time.Second); n != 3 || took >= 10*time.Second {
			t.Errorf("took a queue of %d after %v; want 3 at once", n, took)
		}
	})
	t.Run("stops at a step without arrivals", func(t *testing.T) {
		w := &wal{queue: []*walReq{{}}}
		step := 250 * time.Millisecond
		n, took := gatherFrom(w, 3, walGatherSteps*step)
		if n != 1 || took < step || took >= walGatherSteps*step {
			t.Errorf("took a queue of %d after %v; want 1 after one step (%v), not the whole wait", n, took, step)
		}
	})
	t.Run("waits out a writer late by less than a step", func(t *testing.T) {
		// A writer delayed past a quarter of the wait, as a busy machine
		// delays one, still joins: a shorter step would flush without it.
		// It comes well before the step ends (by a fifth of the wait),
		// so that the test's own goroutine may be late on a busy machine.
		w := &wal{queue: []*walReq{{}}}
		wait := 2 * time.Second
		go func() {
			time.Sleep(wait * 3 / 10)
			joinQueue(w)
		}()
		n, took := gatherFrom(w, 2, wait)
		if n != 2 || took >= wait {
			t.Errorf("took a queue of %d after %v; want 2, the late writer's request included, before the whole wait (%v)", n, took, wait)
		}
	})
	t.Run("goes on while writers arrive", func(t *testing.T) {
		w := &wal{queue: []*walReq{{}}}
		step := 400 * time.Millisecond
		go func() {
			for range 3 {
				time.Sleep(step / 4)
				joinQueue(w)
			}
		}()
		n, took := gatherFrom(w, 4, walGatherSteps*step)
		if n != 4 || took < 3*step/4 {
			t.Errorf("took a queue of %d after %v; want all 4, which arrive over %v", n, took, 3*step/4)
		}
	})
}

// TestGatherJoinsCohorts: writers that append in a loop share one flush
// rather than splitting into two halves that take turns, each waiting for
// the other's flush.
func TestGatherJoinsCohorts(t *testing.T) {
	observe, flushes := recordFlushes()
	s := open(t, t.TempDir(), observe)
	const writers, each = 8, 40
	sessions := createSessions(t, s, writers)
	// A slow disk: the writers released by a flush are back long before
	// the next one could end.
	s.testHooks().sync = func() error { time.Sleep(5 * time.Millisecond); return nil }
	appendInLoops(t, s, sessions, each)
	s.testHooks().sync = nil
	recs := flushes()
	appends := 0
	for _, r := range recs {
		appends += r.Appends
	}
	mean := float64(appends) / float64(len(recs))
	t.Logf("%.1f appends per flush", mean)
	if mean < 0.75*writers {
		t.Errorf("%d writers appending in a loop: %.1f appends per flush; want most of them in each", writers, mean)
	}
}

// recordFlushes returns a flush observer option and a function that
// returns the flushes it saw so far.
func recordFlushes() (Option, func() []storage.FlushRecord) {
	var mu sync.Mutex
	var recs []storage.FlushRecord
	return WithFlushObserver(func(r storage.FlushRecord) {
			mu.Lock()
			recs = append(recs, r)
			mu.Unlock()
		}), func() []storage.FlushRecord {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(recs)
		}
}

// appendInLoops has a writer per session append each messages to it, one
// after the other, all writers at once.
func appendInLoops(t *testing.T, s *testStore, sessions []string, each int) {
	var wg sync.WaitGroup
	for w, id := range sessions {
		wg.Go(func() {
			for i := range each {
				mustAppend(t, s, id, msg(fmt.Sprintf("w%d-%d", w, i), "x"))
			}
		})
	}
	wg.Wait()
}

// createSessions creates n sessions and returns their ids.
func createSessions(t *testing.T, s *testStore, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = mustCreate(t, s, storage.CreateRequest{}).ID
	}
	return ids
}

// TestGatherLoneWriterNeverWaits: a writer alone, or writers that take
// turns, expect no one else: their flushes start at once.
func TestGatherLoneWriterNeverWaits(t *testing.T) {
	s := open(t, t.TempDir())
	a := mustCreate(t, s, storage.CreateRequest{}).ID
	b := mustCreate(t, s, storage.CreateRequest{}).ID
	for i := range 20 {
		id := a
		if i%2 == 1 {
			id = b
		}
		mustAppend(t, s, id, msg(fmt.Sprintf("m%d", i), "x"))
	}
	s.wal.mu.Lock()
	defer s.wal.mu.Unlock()
	if s.wal.gather.gathered != nil {
		t.Error("a lone writer's flush waited for others")
	}
}
