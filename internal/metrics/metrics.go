// Package metrics is sessiond's Prometheus instrumentation: the gRPC
// server's calls (named as go-grpc-middleware's Prometheus provider names
// them, through that module's interceptors), the store's
// flushes (storage.FlushRecord) and state (storage.StatsReporter), the Go
// runtime and the process, on one registry served by Handler, with
// net/http/pprof beside it when asked.
//
// The store's numbers come through storage's plain types, so no backend
// imports Prometheus and the server knows nothing of files or SQL. Every
// metric is listed, with its meaning, in docs/metrics.md.
package metrics

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/reflection"

	"github.com/sessiond/sessiond/internal/ratelog"
	"github.com/sessiond/sessiond/storage"
)

// Namespace prefixes sessiond's own metrics.
const Namespace = "sessiond"

// Buckets of the latency histograms, in seconds: from 50 µs (a flush on a
// fast disk, a call on loopback) to 10 s.
var latencyBuckets = []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// Buckets of the appends-per-flush histogram: group commits of 1 to 256.
var batchBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256}

// statsTimeout bounds how long one scrape waits for the store's Stats.
const statsTimeout = 10 * time.Second

// Metrics holds the daemon's registry and the instruments it feeds. Its
// methods are safe for concurrent use.
type Metrics struct {
	reg  *prometheus.Registry
	grpc *serverMetrics

	flushSeconds prometheus.Histogram
	flushAppends prometheus.Histogram
	flushBytes   prometheus.Counter
}

// New makes the registry, with the gRPC server metrics, the flush
// instruments, sessiond_build_info (version, backend) and the Go runtime
// and process collectors.
func New(version, backend string) *Metrics {
	m := &Metrics{
		reg:  prometheus.NewRegistry(),
		grpc: newServerMetrics(),
		flushSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "store_flush_seconds",
			Help:    "Latency of the store's flushes that made appends durable (write and fdatasync, or commit).",
			Buckets: latencyBuckets,
		}),
		flushAppends: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "store_flush_appends",
			Help:    "Appends (AppendMessages calls) made durable by one flush: the group-commit batch size. Its sum counts every durable append.",
			Buckets: batchBuckets,
		}),
		flushBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "store_flush_bytes_total",
			Help: "Bytes written by the store's flushes of appends.",
		}),
	}
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "build_info",
		Help:        "Always 1; its labels say the version, the storage backend and the Go version.",
		ConstLabels: prometheus.Labels{"version": version, "backend": backend, "goversion": runtime.Version()},
	})
	build.Set(1)
	m.reg.MustRegister(m.grpc, m.flushSeconds, m.flushAppends, m.flushBytes, build,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// ObserveFlush records one flush; it is the store's flush observer
// (file.WithFlushObserver). It never blocks.
func (m *Metrics) ObserveFlush(r storage.FlushRecord) {
	m.flushSeconds.Observe(r.Latency.Seconds())
	m.flushAppends.Observe(float64(r.Appends))
	m.flushBytes.Add(float64(r.Bytes))
}

// ServerOptions returns the interceptors that count and time every gRPC
// call. Put them before the server's other options, so that they are the
// outermost interceptors and see every call, refused ones included.
func (m *Metrics) ServerOptions() []grpc.ServerOption {
	return m.grpc.interceptors()
}

// InitializeGRPC creates every method's series at zero, once the services
// are registered on s, so that a query sees a method before its first
// call. Call it before any server with ServerOptions serves.
func (m *Metrics) InitializeGRPC(s reflection.ServiceInfoProvider) {
	m.grpc.register(s)
}

// WatchStore registers a collector that reads the store's Stats at every
// scrape. A failed Stats is logged and leaves sessions and disk bytes out
// of that scrape; the rest is still served.
func (m *Metrics) WatchStore(r storage.StatsReporter, log *zap.Logger) {
	m.reg.MustRegister(&storeCollector{r: r, log: log, cond: ratelog.New(0)})
}

// Handler serves the registry at /metrics, and net/http/pprof under
// /debug/pprof/ when pprof is set (else those paths are 404). Errors
// while gathering are logged; the metrics gathered are still served.
func (m *Metrics) Handler(pprofOn bool, log *zap.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.InstrumentMetricHandler(m.reg, promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorLog:            zap.NewStdLog(log),
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
		Timeout:             statsTimeout + 5*time.Second,
	})))
	if pprofOn {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("POST /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// storeCollector turns a store's Stats into metrics at each scrape.
type storeCollector struct {
	r    storage.StatsReporter
	log  *zap.Logger
	cond *ratelog.Limiter // a failing Stats is logged once a minute, not at every scrape
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", name), help, labels, nil)
}

var (
	descSessions      = desc("store_sessions", "Sessions in the store, in every namespace.")
	descDiskBytes     = desc("store_disk_bytes", "Space the store's data takes: the file store's allocated blocks (measured in the background, at most every 30 s), or PostgreSQL's tables with their indexes.")
	descCacheBytes    = desc("store_cache_bytes", "Message bytes held in the store's in-memory cache.")
	descCacheMax      = desc("store_cache_max_bytes", "The cache's budget (the file store's cache size).")
	descCacheReads    = desc("store_cache_reads_total", "Reads of a session's messages, by result: hit (served from memory) or miss (read from disk).", "result")
	descJournalsOpen  = desc("store_open_journals", "Session journal files the file store keeps open.")
	descJournalsMax   = desc("store_max_open_journals", "The bound on open journal files (--max-open-journals).")
	descJournalsOpens = desc("store_journal_opens_total", "Journal files opened: by a session's first write, by a fold, and again after being closed to stay under the bound.")
	descWALSegments   = desc("store_wal_segments_total", "Write-ahead log segments the file store started, by where: new (a new file, its space reserved with fallocate) or spare (a retired segment's file, reused).", "in")

	descPoolMax          = desc("postgres_pool_max_conns", "Most connections the PostgreSQL pool may hold (--postgres-max-conns).")
	descPoolTotal        = desc("postgres_pool_conns", "Connections in the PostgreSQL pool, by state: acquired (in use), idle, constructing (being opened).", "state")
	descPoolAcquires     = desc("postgres_pool_acquires_total", "Connections acquired from the pool.")
	descPoolAcquireSecs  = desc("postgres_pool_acquire_seconds_total", "Time spent acquiring connections.")
	descPoolEmpty        = desc("postgres_pool_empty_acquires_total", "Acquires that found no idle connection and waited for one to be released or opened.")
	descPoolEmptyWait    = desc("postgres_pool_empty_acquire_wait_seconds_total", "Time those acquires waited.")
	descPoolCanceled     = desc("postgres_pool_canceled_acquires_total", "Acquires given up because their call's context ended.")
	descPoolNew          = desc("postgres_pool_new_conns_total", "Connections opened.")
	descPoolLifetimeDrop = desc("postgres_pool_max_lifetime_destroyed_total", "Connections closed for reaching their maximum lifetime.")
	descPoolIdleDrop     = desc("postgres_pool_max_idle_destroyed_total", "Connections closed for being idle too long.")
)

var allDescs = []*prometheus.Desc{
	descSessions, descDiskBytes, descCacheBytes, descCacheMax, descCacheReads,
	descJournalsOpen, descJournalsMax, descJournalsOpens, descWALSegments,
	descPoolMax, descPoolTotal, descPoolAcquires, descPoolAcquireSecs, descPoolEmpty,
	descPoolEmptyWait, descPoolCanceled, descPoolNew, descPoolLifetimeDrop, descPoolIdleDrop,
}

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), statsTimeout)
	defer cancel()
	st, err := c.r.Stats(ctx)
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	if err != nil {
		c.cond.Log(c.log, zapcore.WarnLevel, "stats", "store statistics unavailable: sessions and disk bytes left out of the scrape", zap.Error(err))
	} else {
		gauge(descSessions, float64(st.Sessions))
		if st.DiskBytes >= 0 {
			gauge(descDiskBytes, float64(st.DiskBytes))
		}
	}
	if cs := st.Cache; cs != nil {
		gauge(descCacheBytes, float64(cs.Bytes))
		gauge(descCacheMax, float64(cs.MaxBytes))
		counter(descCacheReads, float64(cs.Hits), "hit")
		counter(descCacheReads, float64(cs.Misses), "miss")
	}
	if js := st.Journals; js != nil {
		gauge(descJournalsOpen, float64(js.Open))
		gauge(descJournalsMax, float64(js.Max))
		counter(descJournalsOpens, float64(js.Opens))
	}
	if ws := st.WAL; ws != nil {
		counter(descWALSegments, float64(ws.Created), "new")
		counter(descWALSegments, float64(ws.Recycled), "spare")
	}
	if p := st.Pool; p != nil {
		gauge(descPoolMax, float64(p.MaxConns))
		gauge(descPoolTotal, float64(p.AcquiredConns), "acquired")
		gauge(descPoolTotal, float64(p.IdleConns), "idle")
		gauge(descPoolTotal, float64(p.ConstructingConns), "constructing")
		counter(descPoolAcquires, float64(p.AcquireCount))
		counter(descPoolAcquireSecs, p.AcquireDuration.Seconds())
		counter(descPoolEmpty, float64(p.EmptyAcquireCount))
		counter(descPoolEmptyWait, p.EmptyAcquireWait.Seconds())
		counter(descPoolCanceled, float64(p.CanceledAcquireCount))
		counter(descPoolNew, float64(p.NewConnsCount))
		counter(descPoolLifetimeDrop, float64(p.MaxLifetimeDestroyCount))
		counter(descPoolIdleDrop, float64(p.MaxIdleDestroyCount))
	}
}

// Samples is a scrape in Prometheus' text format as series -> value, the
// series written as the exposition writes it: name{label="value",...},
// labels in sorted order (client_golang sorts them).
type Samples map[string]float64

// ParseText reads a scrape in the text format. Comments and blank lines
// are skipped; a sample's optional timestamp is not supported (this
// package's handler writes none).
func ParseText(r io.Reader) (Samples, error) {
	out := Samples{}
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			return nil, fmt.Errorf("metrics line %q: no value", line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: %w", line, err)
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}
