package file

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

var fixture struct {
	once sync.Once
	dir  string
	kept bool // named by SESSIOND_BENCH_FIXTURE: reused, not removed
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fixture.dir != "" && !fixture.kept {
		_ = os.RemoveAll(fixture.dir)
	}
	os.Exit(code)
}

// BenchmarkAppend measures a durable append of one 1 KiB message to
// sessions of 10 and 2,000 messages, by 1 writer and by 16 concurrent
// writers on 16 sessions. Reports p50-ns (per append latency), ops/s and
// appends/flush (the mean batch size, from WithFlushObserver).
func BenchmarkAppend(b *testing.B) {
	for _, length := range []int{10, 2000} {
		for _, writers := range []int{1, 16} {
			b.Run(fmt.Sprintf("len=%d/writers=%d", length, writers), func(b *testing.B) {
				benchAppend(b, length, writers, writers)
			})
		}
	}
}

// BenchmarkAppendWide is BenchmarkAppend with 64 writers spread over 1,000
// sessions (writer w's i-th append goes to session (w + 64i) mod 1000).
func BenchmarkAppendWide(b *testing.B) {
	b.Run("len=10/writers=64/sessions=1000", func(b *testing.B) {
		benchAppend(b, 10, 64, 1000)
	})
}

// BenchmarkAppendCheckpointing is BenchmarkAppend with a checkpoint every
// 100 ms, far more often than the default: each copies every session's
// metadata while the appends go on. It bounds what checkpoints cost
// appends.
func BenchmarkAppendCheckpointing(b *testing.B) {
	for _, writers := range []int{1, 16} {
		b.Run(fmt.Sprintf("len=10/writers=%d", writers), func(b *testing.B) {
			benchAppend(b, 10, writers, writers, WithCheckpoints(100*time.Millisecond, 1<<30))
		})
	}
}

// BenchmarkAppendWALRecycle is BenchmarkAppend's 16 writers with 512 KiB
// log segments, so that most flushes go into segments started in a spare
// (spares=2, the default) or, with recycling off, in new files whose space
// is reserved with fallocate (spares=0); flush-us is the mean flush (write
// and fdatasync). -count repeats each case in a row, so on a busy machine
// run the command a few times instead, to interleave them. Run it on a
// disk, not tmpfs:
//
//	TMPDIR=/var/tmp go test -run '^$' -bench AppendWALRecycle -benchtime 20000x ./storage/file/
func BenchmarkAppendWALRecycle(b *testing.B) {
	for _, spares := range []int{0, walMaxSpares} {
		b.Run(fmt.Sprintf("spares=%d", spares), func(b *testing.B) {
			benchAppend(b, 10, 16, 16, WithWALSegmentBytes(512<<10), withWALSpares(spares))
		})
	}
}

func benchAppend(b *testing.B, length, writers, nsessions int, opts ...Option) {
	var flushes, appends, flushNS atomic.Int64
	opts = append(opts, WithFlushObserver(func(r storage.FlushRecord) {
		flushes.Add(1)
		appends.Add(int64(r.Appends))
		flushNS.Add(int64(r.Latency))
	}))
	s, err := openPortable(b.Context(), b.TempDir(), opts...)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var sessions []string
	for i := range nsessions {
		ms := make([]*sessiondv1.Message, length)
		for j := range ms {
			ms[j] = msg(fmt.Sprintf("seed-%d-%d", i, j), strings.Repeat("s", 1024))
		}
		se, err := s.Create(b.Context(), storage.CreateRequest{Messages: ms})
		if err != nil {
			b.Fatal(err)
		}
		sessions = append(sessions, se.ID)
	}
	body := strings.Repeat("b", 1024)
	lat := make([][]time.Duration, writers)
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range writers {
		n := b.N / writers
		if w < b.N%writers {
			n++
		}
		wg.Go(func() {
			for i := range n {
				t0 := time.Now()
				_, err := s.Append(b.Context(), storage.AppendRequest{Ref: storage.Ref{ID: sessions[(w+i*writers)%nsessions]},
					Messages: []*sessiondv1.Message{msg(fmt.Sprintf("w%d-%d", w, i), body)}})
				lat[w] = append(lat[w], time.Since(t0))
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	all := slices.Concat(lat...)
	slices.Sort(all)
	if len(all) > 0 {
		b.ReportMetric(float64(all[len(all)/2].Nanoseconds()), "p50-ns")
		b.ReportMetric(float64(all[len(all)*99/100].Nanoseconds()), "p99-ns")
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
	if f := flushes.Load(); f > 0 {
		b.ReportMetric(float64(appends.Load())/float64(f), "appends/flush")
		b.ReportMetric(float64(flushNS.Load())/float64(f)/1e3, "flush-us")
	}
}

const fixtureSessions = 100_000

// fixtureDir is where bigFixture builds: the data dir "data" in
// SESSIOND_BENCH_FIXTURE if set (kept; the file data.built beside it says
// the build finished), else a new temporary directory.
func fixtureDir() (string, error) {
	if parent := os.Getenv("SESSIOND_BENCH_FIXTURE"); parent != "" {
		fixture.kept = true
		return filepath.Join(parent, "data"), os.MkdirAll(parent, dirPerm)
	}
	return os.MkdirTemp("", "sessiond-bench-")
}

// bigFixture writes a data dir with 100,000 small sessions directly (no
// fsyncs: it is a fixture), then opens and closes it once so that the index
// files are there. Built once per test binary run, or, when the environment
// variable SESSIOND_BENCH_FIXTURE names a directory, once in it and reused
// by later runs (building it takes minutes).
func bigFixture(b *testing.B) string {
	b.Helper()
	fixture.once.Do(func() {
		dir, err := fixtureDir()
		if err != nil {
			fixture.err = err
			return
		}
		fixture.dir = dir
		if fixture.kept {
			if _, err := os.Stat(dir + ".built"); err == nil {
				return
			}
			if err := os.RemoveAll(dir); err != nil { // a build cut short
				fixture.err = err
				return
			}
		}
		fixture.err = func() error {
			if err := os.MkdirAll(filepath.Join(dir, "sessions"), dirPerm); err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, formatFile), []byte(formatVersion), filePerm); err != nil {
				return err
			}
			m, _ := marshalMessages([]*sessiondv1.Message{msg("m0", "hello")})
			base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for w := range 8 {
				wg.Go(func() {
					for i := w; i < fixtureSessions; i += 8 {
						u, _ := uuid.NewV7()
						t := base.Add(time.Duration(i) * time.Second)
						meta := &storage.Session{ID: u.String(), Alias: fmt.Sprintf("s-%d", i), Title: fmt.Sprintf("session %d", i),
							CreatedAt: t, UpdatedAt: t, Revision: 1, MessageCount: 1, Labels: map[string]string{"team": fmt.Sprint(i % 10)}}
						d := filepath.Join(dir, "sessions", meta.ID)
						if err := os.Mkdir(d, dirPerm); err != nil {
							errs <- err
							return
						}
						if err := os.WriteFile(filepath.Join(d, snapshotName), encodeSnapshot(1, meta, m, nil), filePerm); err != nil {
							errs <- err
							return
						}
						if err := os.WriteFile(filepath.Join(d, journalName(1)), encodeJournalHead(1, meta.ID), filePerm); err != nil {
							errs <- err
							return
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			if err := <-errs; err != nil {
				return err
			}
			s, err := openPortable(b.Context(), dir)
			if err != nil {
				return err
			}
			if err := s.Close(); err != nil {
				return err
			}
			if fixture.kept {
				return os.WriteFile(dir+".built", nil, filePerm)
			}
			return nil
		}()
	})
	if fixture.err != nil {
		b.Fatal(fixture.err)
	}
	return fixture.dir
}

// BenchmarkOpen100k: Open with 100,000 sessions on disk (page cache warm),
// with the CPU time of the opens (all threads) as cpu-ns/op:
//
//   - clean: after Close, which writes a last checkpoint: nothing is scanned.
//   - crash: after kill -9 of a store that wrote to crashDirty sessions since
//     its last checkpoint (as many as the default trigger lets pile up):
//     those are scanned, the rest comes from the checkpoint.
//   - rescan: with no usable checkpoint (mark missing or damaged): every
//     session's snapshot header and journal are scanned.
//   - killed: after kill -9 of a store that created killedSessions new
//     sessions and appended killedWALBytes of 1 KiB messages to them (16
//     writers), all of it still in the write-ahead log, as the daemon's
//     benchmark does (scripts/bench-compare.sh, startup_kill_s): the log is
//     replayed (compared with the journals), the new sessions scanned.
//
// peak-MiB is how far the process's resident memory rose above where it was
// before each open (its largest rise): the memory an open touches, which
// costs CPU of its own. Each open starts with the heap handed back to the
// kernel, as in a starting daemon.
func BenchmarkOpen100k(b *testing.B) {
	dir := bigFixture(b)
	for _, mode := range []string{"clean", "crash", "rescan", "killed"} {
		b.Run(mode, func(b *testing.B) {
			scanned := 0
			var cpu time.Duration // of the opens alone
			var peak int64        // KiB, the largest rise
			var saved string
			if mode == "killed" {
				saved = killedUnderLoad(b, dir)
				defer dropKilled(b, dir)
			}
			for b.Loop() {
				b.StopTimer()
				want := fixtureSessions
				switch mode {
				case "crash":
					crashAfterWrites(b, dir, crashDirty)
				case "rescan":
					_ = os.Remove(filepath.Join(dir, "index", cleanName))
				case "killed":
					restoreKilled(b, dir, saved)
					want += killedSessions
				}
				debug.FreeOSMemory()
				rss0 := resetPeakRSS(b)
				b.StartTimer()
				cpu0 := processCPU(b)
				s, err := openPortable(b.Context(), dir)
				if err != nil {
					b.Fatal(err)
				}
				cpu += processCPU(b) - cpu0
				b.StopTimer()
				peak = max(peak, procStatusKiB(b, "VmHWM")-rss0)
				if n := len(s.byID); n != want {
					b.Fatalf("opened %d sessions, want %d", n, want)
				}
				scanned += s.openScanned
				if err := s.Close(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(scanned)/float64(b.N), "scanned/op")
			b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(peak)/1024, "peak-MiB")
		})
	}
}

// resetPeakRSS restarts the kernel's count of the process's peak resident
// memory (VmHWM) from its current resident memory, which it returns (KiB).
func resetPeakRSS(b *testing.B) int64 {
	b.Helper()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		b.Fatal(err)
	}
	return procStatusKiB(b, "VmRSS")
}

// procStatusKiB returns a field of /proc/self/status given in KiB.
func procStatusKiB(b *testing.B, field string) int64 {
	b.Helper()
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatalf("/proc/self/status has no %s", field)
	return 0
}

const (
	killedSessions = 1000
	killedWALBytes = 64 << 20
)

// killedUnderLoad opens dir, creates killedSessions sessions in namespace
// "crash", appends about killedWALBytes of 1 KiB messages to them (16
// writers) and abandons the store as kill -9 would. Its WAL segments are
// large enough that nothing is sealed: the next open replays it all. It
// returns a folder holding copies of dir's index/ and wal/ as the crash
// left them: an open (and the close after it) changes nothing else, so
// restoreKilled can make each iteration start from the same state.
func killedUnderLoad(b *testing.B, dir string) string {
	b.Helper()
	s, err := openPortable(b.Context(), dir, WithCheckpoints(time.Hour, 1<<30), WithWALSegmentBytes(2*killedWALBytes))
	if err != nil {
		b.Fatal(err)
	}
	ids := make([]string, killedSessions)
	for i := range ids {
		se, err := s.Create(b.Context(), storage.CreateRequest{Namespace: "crash"})
		if err != nil {
			b.Fatal(err)
		}
		ids[i] = se.ID
	}
	content := strings.Repeat("x", 1024)
	appends := killedWALBytes / (len(content) + walRecHeader + 64)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= appends {
					return
				}
				if _, err := s.Append(b.Context(), storage.AppendRequest{Ref: storage.Ref{Namespace: "crash", ID: ids[i%len(ids)]},
					Messages: []*sessiondv1.Message{msg(uuid.NewString(), content)}}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	abandon(s)
	saved := b.TempDir()
	for _, d := range []string{"index", walDir} {
		if err := os.CopyFS(filepath.Join(saved, d), os.DirFS(filepath.Join(dir, d))); err != nil {
			b.Fatal(err)
		}
	}
	return saved
}

// restoreKilled puts back the index/ and wal/ that killedUnderLoad saved.
func restoreKilled(b *testing.B, dir, saved string) {
	b.Helper()
	for _, d := range []string{"index", walDir} {
		if err := os.RemoveAll(filepath.Join(dir, d)); err != nil {
			b.Fatal(err)
		}
		if err := os.CopyFS(filepath.Join(dir, d), os.DirFS(filepath.Join(saved, d))); err != nil {
			b.Fatal(err)
		}
	}
}

// dropKilled deletes the sessions killedUnderLoad made, leaving the
// fixture as the other benchmarks expect it.
func dropKilled(b *testing.B, dir string) {
	b.Helper()
	s, err := openPortable(context.Background(), dir)
	if err != nil {
		b.Fatal(err)
	}
	var ids []string
	if err := s.List(context.Background(), storage.ListOptions{Namespace: "crash"}, func(se *storage.Session) error {
		ids = append(ids, se.ID)
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	for _, id := range ids {
		if err := s.Delete(context.Background(), storage.Ref{Namespace: "crash", ID: id}, 0); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
}

const crashDirty = defaultCkptDirty

// crashAfterWrites opens dir, appends to n of its sessions (16 writers),
// and abandons the store the way kill -9 would: no last checkpoint.
func crashAfterWrites(b *testing.B, dir string, n int) {
	b.Helper()
	s, err := openPortable(b.Context(), dir, WithCheckpoints(time.Hour, 1<<30))
	if err != nil {
		b.Fatal(err)
	}
	ids := make([]string, 0, len(s.byID))
	for id := range s.byID {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	ids = ids[:n]
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < len(ids); i += 16 {
				if _, err := s.Append(b.Context(), storage.AppendRequest{Ref: storage.Ref{ID: ids[i]},
					Messages: []*sessiondv1.Message{msg(uuid.NewString(), "after the checkpoint")}}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	abandon(s)
}

// abandon releases a store without writing anything more, as a crash
// would: the checkpoint loop stops, files and the lock are closed.
func abandon(s *testStore) {
	// The write-ahead log stays as it is: its sealer is stopped with
	// nothing queued, its segment closed.
	s.waitSealed()
	s.wal.mu.Lock()
	s.wal.closed = true
	s.wal.mu.Unlock()
	s.stopWAL()
	if s.wal.j != nil {
		_ = s.wal.j.f.Close()
	}
	close(s.ckptStop)
	<-s.ckptDone
	s.closeJournalFiles()
	_ = s.lock.Close()
}

// BenchmarkList100k lists 100,000 sessions; reports the time to the first
// result and to all of them.
func BenchmarkList100k(b *testing.B) {
	dir := bigFixture(b)
	s, err := openPortable(b.Context(), dir)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var first, all time.Duration
	for b.Loop() {
		t0 := time.Now()
		n := 0
		err := s.List(b.Context(), storage.ListOptions{}, func(*storage.Session) error {
			if n == 0 {
				first += time.Since(t0)
			}
			n++
			return nil
		})
		all += time.Since(t0)
		if err != nil || n != fixtureSessions {
			b.Fatalf("listed %d, %v", n, err)
		}
	}
	b.ReportMetric(float64(first.Nanoseconds())/float64(b.N), "first-ns")
	b.ReportMetric(float64(all.Nanoseconds())/float64(b.N), "all-ns")
}
