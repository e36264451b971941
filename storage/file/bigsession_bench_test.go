package file

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// BenchmarkBigSession measures what one growing session costs: it appends
// to one session with the default options and reports
//
//	written/appended  bytes the store wrote through its file layer (journals,
//	                  write-ahead log, snapshots, index; Close included) per
//	                  byte of message appended
//	wchar/appended    the same from /proc/self/io (every write(2) of the process)
//	append-s          the time the appends took
//	load-s            the time a store opened again takes to load the session
//	                  (all its messages): the best of three, after a warm-up
//	load-whole-s      the same for a session created with the same messages,
//	                  written whole as folds did before segments: the load
//	                  costs compared in one run
//
// Cases: 64 and 160 appends of one 1 MiB message, and 10,000 messages of
// 1 KiB in appends of 50. With SESSIOND_BENCH_GROW_MB set it also grows a
// session by 4 MiB appends to that size, stopping after
// SESSIOND_BENCH_GROW_LIMIT (a duration, default 5m); grown-MB then says
// how far it got. Run it on a disk, not tmpfs (TMPDIR=/var/tmp):
//
//	TMPDIR=/var/tmp SESSIOND_BENCH_GROW_MB=800 go test -run '^$' -bench BigSession -benchtime 1x ./storage/file/
func BenchmarkBigSession(b *testing.B) {
	type bigCase struct {
		name         string
		appends, per int // appends, and messages per append
		size         int // bytes of content per message
	}
	cases := []bigCase{
		{"64x1MiB", 64, 1, 1 << 20},
		{"160x1MiB", 160, 1, 1 << 20},
		{"10000x1KiB", 200, 50, 1 << 10},
	}
	if v := os.Getenv("SESSIOND_BENCH_GROW_MB"); v != "" {
		mb, err := strconv.Atoi(v)
		if err != nil || mb < 4 {
			b.Fatalf("SESSIOND_BENCH_GROW_MB=%q: want a size in MiB, at least 4", v)
		}
		cases = append(cases, bigCase{fmt.Sprintf("grow-4MiB-to-%dMiB", mb), mb / 4, 1, 4 << 20})
	}
	limit := 5 * time.Minute
	if v := os.Getenv("SESSIOND_BENCH_GROW_LIMIT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("SESSIOND_BENCH_GROW_LIMIT=%q: %v", v, err)
		}
		limit = d
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				benchBigSession(b, c.appends, c.per, c.size, limit)
			}
		})
	}
}

func benchBigSession(b *testing.B, appends, per, size int, limit time.Duration) {
	dir := b.TempDir()
	d, err := openDriver(b.Context(), dir)
	if err != nil {
		b.Fatal(err)
	}
	s := portable(d)
	se, err := s.Create(b.Context(), storage.CreateRequest{})
	if err != nil {
		b.Fatal(err)
	}
	body := strings.Repeat("x", size)
	written0, wchar0 := d.stats.bytesWritten.Load(), procWchar(b)
	start := time.Now()
	var appended int64
	done := 0
	for i := range appends {
		if time.Since(start) > limit {
			break
		}
		ms := make([]*sessiondv1.Message, per)
		for j := range ms {
			ms[j] = msg(fmt.Sprintf("m%d-%d", i, j), body)
			appended += int64(size)
		}
		if _, err := s.Append(b.Context(), storage.AppendRequest{Ref: storage.Ref{ID: se.ID}, Messages: ms}); err != nil {
			b.Fatal(err)
		}
		done++
	}
	took := time.Since(start)
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	written, wchar := d.stats.bytesWritten.Load()-written0, procWchar(b)-wchar0
	b.StopTimer()

	// The same messages written whole, by a create, as a fold wrote them
	// before segments. Loads alternate between the two sessions, each by a
	// store opened again, after one load of each to warm up; the best of
	// three counts (the machine may be shared).
	d3, err := openDriver(b.Context(), dir)
	if err != nil {
		b.Fatal(err)
	}
	_, got, err := portable(d3).Load(b.Context(), storage.Ref{ID: se.ID}, storage.LoadOptions{})
	if err != nil {
		b.Fatal(err)
	}
	whole, err := portable(d3).Create(b.Context(), storage.CreateRequest{Messages: got})
	if err != nil {
		b.Fatal(err)
	}
	if err := d3.Close(); err != nil {
		b.Fatal(err)
	}
	got = nil
	var load, loadWhole time.Duration
	for i := range 4 {
		for _, l := range []struct {
			id   string
			best *time.Duration
		}{{se.ID, &load}, {whole.ID, &loadWhole}} {
			if took := timeLoad(b, dir, l.id, done*per); i == 1 || (i > 1 && took < *l.best) {
				*l.best = took
			}
		}
	}
	b.StartTimer()
	b.ReportMetric(float64(written)/float64(appended), "written/appended")
	b.ReportMetric(float64(wchar)/float64(appended), "wchar/appended")
	b.ReportMetric(took.Seconds(), "append-s")
	b.ReportMetric(load.Seconds(), "load-s")
	b.ReportMetric(loadWhole.Seconds(), "load-whole-s")
	b.ReportMetric(float64(appended)/(1<<20), "grown-MB")
}

// timeLoad opens dir, loads session id, which must hold n messages, and
// returns the time the load took.
func timeLoad(b *testing.B, dir, id string, n int) time.Duration {
	d, err := openDriver(b.Context(), dir)
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	_, got, err := portable(d).Load(b.Context(), storage.Ref{ID: id}, storage.LoadOptions{})
	took := time.Since(t0)
	if err != nil {
		b.Fatal(err)
	}
	if len(got) != n {
		b.Fatalf("loaded %d messages, appended %d", len(got), n)
	}
	if err := d.Close(); err != nil {
		b.Fatal(err)
	}
	return took
}

// procWchar reads the bytes this process passed to write(2) and the like
// so far, from /proc/self/io.
func procWchar(b *testing.B) int64 {
	f, err := os.Open("/proc/self/io")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "wchar: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatal("no wchar in /proc/self/io")
	return 0
}
