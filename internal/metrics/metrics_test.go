package metrics

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/storage"
)

type fakeStats struct {
	st  storage.Stats
	err error
}

func (f fakeStats) Stats(context.Context) (storage.Stats, error) { return f.st, f.err }

func scrape(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	b, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(b)
}

func wantLines(t *testing.T, body string, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if !strings.Contains("\n"+body, "\n"+l+"\n") {
			t.Errorf("no line %q in the scrape", l)
		}
	}
}

// TestStoreAndFlushMetrics: every group of a store's Stats, and the flush
// records, appear under their documented names.
func TestStoreAndFlushMetrics(t *testing.T) {
	m := New("v1.2.3", "file")
	m.WatchStore(fakeStats{st: storage.Stats{
		Sessions: 7, DiskBytes: 4096,
		Cache:    &storage.CacheStats{Bytes: 100, MaxBytes: 1000, Hits: 9, Misses: 3},
		Journals: &storage.JournalStats{Open: 2, Max: 8, Opens: 5},
		WAL:      &storage.WALStats{Created: 3, Recycled: 17},
		Pool: &storage.PoolStats{MaxConns: 16, AcquiredConns: 1, IdleConns: 2, AcquireCount: 40,
			AcquireDuration: 1500 * time.Millisecond, EmptyAcquireCount: 4, NewConnsCount: 3},
	}}, zap.NewNop())
	m.ObserveFlush(storage.FlushRecord{Appends: 3, Bytes: 300, Latency: 2 * time.Millisecond})
	m.ObserveFlush(storage.FlushRecord{Appends: 1, Bytes: 100, Latency: 200 * time.Microsecond})
	code, body := scrape(t, m.Handler(false, zap.NewNop()), "/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d\n%s", code, body)
	}
	wantLines(t, body,
		`sessiond_store_sessions 7`,
		`sessiond_store_disk_bytes 4096`,
		`sessiond_store_cache_bytes 100`,
		`sessiond_store_cache_max_bytes 1000`,
		`sessiond_store_cache_reads_total{result="hit"} 9`,
		`sessiond_store_cache_reads_total{result="miss"} 3`,
		`sessiond_store_open_journals 2`,
		`sessiond_store_max_open_journals 8`,
		`sessiond_store_journal_opens_total 5`,
		`sessiond_store_wal_segments_total{in="new"} 3`,
		`sessiond_store_wal_segments_total{in="spare"} 17`,
		`sessiond_postgres_pool_max_conns 16`,
		`sessiond_postgres_pool_conns{state="acquired"} 1`,
		`sessiond_postgres_pool_conns{state="idle"} 2`,
		`sessiond_postgres_pool_acquires_total 40`,
		`sessiond_postgres_pool_acquire_seconds_total 1.5`,
		`sessiond_postgres_pool_empty_acquires_total 4`,
		`sessiond_postgres_pool_new_conns_total 3`,
		`sessiond_store_flush_appends_sum 4`,
		`sessiond_store_flush_appends_count 2`,
		`sessiond_store_flush_appends_bucket{le="1"} 1`,
		`sessiond_store_flush_seconds_count 2`,
		`sessiond_store_flush_seconds_bucket{le="0.00025"} 1`,
		`sessiond_store_flush_bytes_total 400`,
	)
	samples, err := ParseText(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if samples[`sessiond_store_sessions`] != 7 || samples[`sessiond_store_cache_reads_total{result="miss"}`] != 3 {
		t.Errorf("ParseText: sessions %v, cache misses %v; want 7, 3", samples[`sessiond_store_sessions`], samples[`sessiond_store_cache_reads_total{result="miss"}`])
	}
	if !strings.Contains(body, `sessiond_build_info{backend="file",goversion="go`) || !strings.Contains(body, `version="v1.2.3"} 1`) {
		t.Error("no sessiond_build_info with backend and version")
	}
	for _, name := range []string{"go_goroutines", "process_open_fds", "promhttp_metric_handler_requests_total"} {
		if !strings.Contains(body, "\n"+name) {
			t.Errorf("no %s in the scrape", name)
		}
	}
}

// TestStatsErrorKeepsTheRest: a store whose Stats fails still has its
// in-memory numbers served, without sessions and disk bytes.
func TestStatsErrorKeepsTheRest(t *testing.T) {
	m := New("devel", "postgres")
	m.WatchStore(fakeStats{
		st:  storage.Stats{Pool: &storage.PoolStats{MaxConns: 4}},
		err: errors.New("database unreachable"),
	}, zap.NewNop())
	code, body := scrape(t, m.Handler(false, zap.NewNop()), "/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d", code)
	}
	wantLines(t, body, `sessiond_postgres_pool_max_conns 4`)
	if strings.Contains(body, "sessiond_store_sessions ") || strings.Contains(body, "sessiond_store_disk_bytes ") {
		t.Error("sessions or disk bytes served although Stats failed")
	}

	// Disk bytes not measured yet (-1): left out, the sessions served.
	m = New("devel", "file")
	m.WatchStore(fakeStats{st: storage.Stats{Sessions: 2, DiskBytes: -1}}, zap.NewNop())
	_, body = scrape(t, m.Handler(false, zap.NewNop()), "/metrics")
	wantLines(t, body, `sessiond_store_sessions 2`)
	if strings.Contains(body, "sessiond_store_disk_bytes ") {
		t.Error("disk bytes served while unknown")
	}
}

// TestPprofOnlyWhenAsked: /debug/pprof/ answers with pprof on, 404 without.
func TestPprofOnlyWhenAsked(t *testing.T) {
	m := New("devel", "file")
	if code, _ := scrape(t, m.Handler(false, zap.NewNop()), "/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("pprof off: GET /debug/pprof/ = %d, want 404", code)
	}
	code, body := scrape(t, m.Handler(true, zap.NewNop()), "/debug/pprof/")
	if code != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Errorf("pprof on: GET /debug/pprof/ = %d, want 200 with the profiles listed", code)
	}
}
