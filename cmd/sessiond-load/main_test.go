package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sessiond/sessiond/internal/metrics"
	"github.com/sessiond/sessiond/server"
	"github.com/sessiond/sessiond/storage"
	"github.com/sessiond/sessiond/storage/file"
)

// daemon is an in-process sessiond: the real server and file store on a
// loopback port.
type daemon struct {
	addr  string
	store *storage.Store
}

func startDaemon(t *testing.T) *daemon {
	t.Helper()
	return startDaemonMetrics(t, nil)
}

// startDaemonMetrics is startDaemon with the daemon's metrics fed by m
// (nil: none), as sessiond --metrics-listen wires them, and the gRPC
// server's options extra added to the daemon's.
func startDaemonMetrics(t *testing.T, m *metrics.Metrics, extra ...grpc.ServerOption) *daemon {
	t.Helper()
	var opts []file.Option
	gopts := extra
	if m != nil {
		opts = append(opts, file.WithFlushObserver(m.ObserveFlush))
		gopts = m.ServerOptions()
	}
	store, err := file.Open(t.Context(), t.TempDir(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(store, server.WithBackend("file"))
	gs := grpc.NewServer(append(gopts, srv.ServerOptions()...)...)
	srv.Register(gs)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- gs.Serve(lis) }()
	t.Cleanup(func() {
		srv.Drain()
		gs.Stop()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		if err := store.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	return &daemon{addr: lis.Addr().String(), store: store}
}

// storedMessages counts, from the store itself rather than through the
// tool, the sessions and messages in namespace ns.
func (d *daemon) storedMessages(t *testing.T, ns string) (sessions, messages int64) {
	t.Helper()
	err := d.store.List(t.Context(), storage.ListOptions{Namespace: ns}, func(s *storage.Session) error {
		sessions++
		messages += s.MessageCount
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return sessions, messages
}

// runJSON runs the tool with --json and decodes its report into rep.
func runJSON(t *testing.T, rep any, args ...string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), append([]string{"--json"}, args...), &stdout, &stderr); err != nil {
		t.Fatalf("run %v: %v\nstdout: %s\nstderr: %s", args, err, stdout.String(), stderr.String())
	}
	dec := json.NewDecoder(&stdout)
	dec.DisallowUnknownFields()
	if err := dec.Decode(rep); err != nil {
		t.Fatalf("decode report of %v: %v\n%s", args, err, stdout.String())
	}
}

func checkLatency(t *testing.T, l latencyMS) {
	t.Helper()
	if !(l.P50 > 0 && l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.Max && l.Mean > 0 && l.Mean <= l.Max) {
		t.Errorf("latency not ordered 0 < p50 <= p90 <= p99 <= max: %+v", l)
	}
}

func TestModes(t *testing.T) {
	d := startDaemon(t)

	t.Run("deltas", func(t *testing.T) {
		var rep deltasReport
		runJSON(t, &rep, "--addr", d.addr, "--namespace", "live", "deltas", "--sessions", "3", "--rate", "20", "--duration", "2s")
		if rep.Acked == 0 || rep.Errors != 0 || rep.Seen == 0 || rep.Seen > rep.Acked {
			t.Errorf("report %+v; want deltas acknowledged, none failed, and watchers seeing those after they joined", rep)
		}
		checkLatency(t, rep.Lag)
	})

	t.Run("append bounded by count", func(t *testing.T) {
		var rep appendReport
		runJSON(t, &rep, "--addr", d.addr, "--namespace", "ap", "append",
			"--clients", "4", "--sessions", "2", "--count", "40", "--duration", "1m", "--size", "1024", "--warmup", "2")
		if rep.Ops != 40 || rep.Errors != 0 || rep.Warmup != 8 || rep.Stored != 48 {
			t.Errorf("report %+v; want 40 ops, 8 warm-up, 48 stored", rep)
		}
		sessions, msgs := d.storedMessages(t, "ap")
		if sessions != 2 || msgs != rep.Ops+rep.Warmup {
			t.Errorf("store holds %d sessions, %d messages; want 2 and %d", sessions, msgs, rep.Ops+rep.Warmup)
		}
		if rep.OpsPerSec <= 0 || rep.Seconds <= 0 || rep.Seconds > 60 {
			t.Errorf("rate %v/s over %v s", rep.OpsPerSec, rep.Seconds)
		}
		checkLatency(t, rep.Latency)
	})

	t.Run("append bounded by duration", func(t *testing.T) {
		var rep appendReport
		start := time.Now()
		runJSON(t, &rep, "--addr", d.addr, "--namespace", "dur", "append",
			"--clients", "2", "--count", "100000000", "--duration", "300ms", "--size", "64", "--warmup", "0")
		if took := time.Since(start); took > 20*time.Second {
			t.Errorf("a 300ms run took %v", took)
		}
		if rep.Ops == 0 || rep.Ops >= 100000000 {
			t.Errorf("ops %d; want some, bounded by time", rep.Ops)
		}
		if _, msgs := d.storedMessages(t, "dur"); msgs != rep.Ops {
			t.Errorf("store holds %d messages; tool counted %d acknowledged", msgs, rep.Ops)
		}
	})

	t.Run("append to prefilled sessions", func(t *testing.T) {
		var rep appendReport
		runJSON(t, &rep, "--addr", d.addr, "--namespace", "pre", "append", "--clients", "2", "--count", "10",
			"--duration", "1m", "--size", "64", "--warmup", "0", "--prefill", "30")
		if rep.Ops != 10 || rep.Prefill != 30 || rep.Stored != 70 {
			t.Errorf("report %+v; want 10 ops, 30 messages before in each of 2 sessions, 70 stored", rep)
		}
	})

	t.Run("append of turns", func(t *testing.T) {
		var rep appendReport
		runJSON(t, &rep, "--addr", d.addr, "--namespace", "turns", "append", "--clients", "1", "--sessions", "2", "--count", "10",
			"--duration", "1m", "--size", "64", "--warmup", "0", "--turns")
		if rep.Ops != 10 || rep.Stored != 10 || !rep.Turns {
			t.Fatalf("report %+v; want 10 appends stored, of turns", rep)
		}
		// Appends 1, 3, ... 9 answered, 16 output tokens each, and all
		// went to the second session.
		var answered, output int64
		err := d.store.List(t.Context(), storage.ListOptions{Namespace: "turns"}, func(s *storage.Session) error {
			if len(s.Models) > 0 {
				if !slices.Equal(s.Models, []string{"load-model"}) {
					t.Errorf("session %s: models %v, want the answers' model", s.ID, s.Models)
				}
				answered++
			}
			output += s.Usage.OutputTokens
			return nil
		})
		if err != nil || answered != 1 || output != 5*16 {
			t.Errorf("%d sessions answered, %d output tokens (%v); want 1, with 5 answers of 16 tokens", answered, output, err)
		}
	})

	t.Run("append spread over more sessions than clients", func(t *testing.T) {
		var rep appendReport
		runJSON(t, &rep, "--addr", d.addr, "--namespace", "wide", "append", "--clients", "2", "--sessions", "6",
			"--count", "12", "--duration", "1m", "--size", "64", "--warmup", "0")
		if n, msgs := d.storedMessages(t, "wide"); rep.Ops != 12 || n != 6 || msgs != 12 {
			t.Errorf("report %+v, store %d sessions %d messages; want 12 appends over 6 sessions", rep, n, msgs)
		}
		if rep.Stored != 12 {
			t.Errorf("stored %d; want 12", rep.Stored)
		}
	})

	t.Run("append with grpc-go's client", func(t *testing.T) {
		var rep appendReport
		runJSON(t, &rep, "--addr", d.addr, "--namespace", "gc", "append", "--client", "grpc",
			"--clients", "3", "--count", "30", "--duration", "1m", "--size", "64", "--warmup", "1")
		if _, msgs := d.storedMessages(t, "gc"); rep.Ops != 30 || rep.Stored != 33 || msgs != 33 {
			t.Errorf("report %+v, store %d messages; want 30 appends, 33 stored", rep, msgs)
		}
	})

	t.Run("append of messages larger than a window", func(t *testing.T) {
		// 200 KB: past the 64 KiB windows a connection starts with (the
		// first call is sent before the server's SETTINGS are read) and
		// the 16 KiB frame size: the lean client splits and waits.
		var rep appendReport
		runJSON(t, &rep, "--addr", d.addr, "--namespace", "big", "append",
			"--clients", "2", "--count", "6", "--duration", "1m", "--size", "200000", "--warmup", "0")
		if _, msgs := d.storedMessages(t, "big"); rep.Ops != 6 || msgs != 6 {
			t.Errorf("report %+v, store %d messages; want 6", rep, msgs)
		}
	})

	// --rpc stream: each client's appends over one AppendStream, with
	// both clients; big messages cross the lean client's send windows.
	// The counts are checked as for unary calls.
	for _, tt := range []struct {
		client string
		count  int
		size   string
	}{{clientLean, 200, "64"}, {clientGRPC, 30, "64"}, {clientLean, 6, "200000"}} {
		t.Run("append over AppendStream with "+tt.client+" client, "+tt.size+" B", func(t *testing.T) {
			ns := "st-" + tt.client + "-" + tt.size
			var rep appendReport
			runJSON(t, &rep, "--addr", d.addr, "--namespace", ns, "append", "--rpc", "stream", "--client", tt.client,
				"--clients", "3", "--sessions", "2", "--count", strconv.Itoa(tt.count), "--duration", "1m", "--size", tt.size, "--warmup", "1")
			if _, msgs := d.storedMessages(t, ns); rep.Ops != int64(tt.count) || rep.Stored != int64(tt.count+3) || msgs != rep.Stored || rep.RPC != "stream" {
				t.Errorf("report %+v, store %d messages; want %d appends, %d stored", rep, msgs, tt.count, tt.count+3)
			}
		})
	}

	t.Run("health", func(t *testing.T) {
		var rep healthReport
		runJSON(t, &rep, "--addr", d.addr, "health", "--count", "50", "--warmup", "5")
		if rep.Ops != 50 {
			t.Errorf("checks %d; want 50", rep.Ops)
		}
		checkLatency(t, rep.Latency)
	})

	t.Run("list", func(t *testing.T) {
		var rep listReport
		runJSON(t, &rep, "--addr", d.addr, "--namespace", "ls", "list", "--populate", "30", "--clients", "3", "--repeat", "2")
		if rep.Populated != 30 || rep.Sessions != 30 || len(rep.Runs) != 2 {
			t.Fatalf("report %+v; want 30 created and listed, 2 runs", rep)
		}
		if sessions, _ := d.storedMessages(t, "ls"); sessions != 30 {
			t.Errorf("store holds %d sessions; want 30", sessions)
		}
		for _, r := range rep.Runs {
			if r.Sessions != 30 || r.FirstMS <= 0 || r.FirstMS > r.AllMS {
				t.Errorf("run %+v; want 30 sessions, 0 < first <= all", r)
			}
		}
	})

	t.Run("list of the default namespace", func(t *testing.T) {
		for i := range 3 {
			if _, err := d.store.Create(t.Context(), storage.CreateRequest{Title: "default " + strconv.Itoa(i)}); err != nil {
				t.Fatal(err)
			}
		}
		var rep listReport
		runJSON(t, &rep, "--addr", d.addr, "--namespace", "", "list", "--repeat", "1")
		if rep.Populated != 0 || rep.Sessions != 3 {
			t.Fatalf("report %+v; want the 3 sessions of the default namespace listed, none created", rep)
		}
	})

	t.Run("load", func(t *testing.T) {
		// 1,200 messages of 1 KiB are more than one ~1 MiB frame.
		var rep loadReport
		runJSON(t, &rep, "--addr", d.addr, "--namespace", "ld", "load", "--messages", "1200", "--batch", "500", "--repeat", "2")
		if rep.Messages != 1200 || len(rep.Runs) != 2 || rep.MessagesSecMedian <= 0 {
			t.Fatalf("report %+v", rep)
		}
		if sessions, msgs := d.storedMessages(t, "ld"); sessions != 1 || msgs != 1200 {
			t.Errorf("store holds %d sessions, %d messages; want 1, 1200", sessions, msgs)
		}
		for _, r := range rep.Runs {
			if r.FirstMS <= 0 || r.FirstMS > r.AllMS || r.MessagesSec <= 0 {
				t.Errorf("run %+v", r)
			}
		}
	})
}

func TestFsync(t *testing.T) {
	dir := t.TempDir()
	var rep fsyncReport
	runJSON(t, &rep, "fsync", "--dir", dir, "--count", "20", "--warmup", "2", "--size", "1024")
	if rep.Ops != 20 || rep.Size != 1024 {
		t.Errorf("report %+v; want 20 appends of 1024 B", rep)
	}
	checkLatency(t, rep.Latency)
	left, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("fsync left %d files in its dir", len(left))
	}
}

func TestTable(t *testing.T) {
	d := startDaemon(t)
	var stdout bytes.Buffer
	if err := run(t.Context(), []string{"--addr", d.addr, "health", "--count", "5"}, &stdout, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"mode            health", "checks          5", "round trip p50"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, stdout.String())
		}
	}
}

func TestErrors(t *testing.T) {
	d := startDaemon(t)
	tests := []struct {
		name  string
		args  []string
		usage bool
		has   string
	}{
		{"no mode", nil, true, "no mode"},
		{"unknown mode", []string{"bench"}, true, "unknown mode"},
		{"not loopback", []string{"--addr", "10.0.0.1:7437", "health"}, true, "not on loopback"},
		{"not loopback after mode", []string{"health", "--addr", "example.com:7437"}, true, "not on loopback"},
		{"unbounded count", []string{"--addr", d.addr, "append", "--count", "0"}, true, "--count"},
		{"unbounded duration", []string{"--addr", d.addr, "health", "--duration", "0s"}, true, "--duration"},
		{"too many sessions", []string{"--addr", d.addr, "append", "--clients", "2", "--sessions", "100001"}, true, "--sessions"},
		{"unknown client", []string{"--addr", d.addr, "append", "--client", "fast"}, true, "--client"},
		{"unknown rpc", []string{"--addr", d.addr, "append", "--rpc", "bidi"}, true, "--rpc"},
		{"negative prefill", []string{"--addr", d.addr, "append", "--prefill", "-1"}, true, "--prefill"},
		{"searchlag of no samples", []string{"--addr", d.addr, "searchlag", "--samples", "0"}, true, "--samples"},
		{"searchlag that never gives up", []string{"--addr", d.addr, "searchlag", "--wait", "0s"}, true, "--wait"},
		{"searchlag unknown rpc", []string{"--addr", d.addr, "searchlag", "--rpc", "bidi"}, true, "--rpc"},
		{"list of no namespace", []string{"--addr", d.addr, "list"}, true, "--namespace"},
		{"startup of no data dir", []string{"startup", "--sessiond", "sessiond"}, true, "--dir"},
		{"stray argument", []string{"--addr", d.addr, "health", "extra"}, true, "extra"},
		{"bad namespace", []string{"--addr", d.addr, "--namespace", "no/slash", "append", "--count", "1"}, true, "--namespace"},
		{"refused by the daemon", []string{"--addr", d.addr, "load", "--messages", "1", "--size", "16777216"}, false, "max_message_bytes"},
		// An AppendStream answer's status fails the run, with either client.
		{"stream append refused, lean client", []string{"--addr", d.addr, "--namespace", "refused-lean", "append", "--rpc", "stream",
			"--client", clientLean, "--count", "1", "--warmup", "0", "--size", "16777216"}, false, "max_message_bytes"},
		{"stream append refused, grpc client", []string{"--addr", d.addr, "--namespace", "refused-grpc", "append", "--rpc", "stream",
			"--client", clientGRPC, "--count", "1", "--warmup", "0", "--size", "16777216"}, false, "max_message_bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			var stderr bytes.Buffer
			err := run(ctx, tt.args, &bytes.Buffer{}, &stderr)
			var ue *usageError
			if err == nil || errors.As(err, &ue) != tt.usage || !strings.Contains(err.Error(), tt.has) {
				t.Fatalf("err = %v; want usage=%v naming %q", err, tt.usage, tt.has)
			}
			want := 1
			if tt.usage {
				want = 2
			}
			if code := exitCode(err, &stderr); code != want {
				t.Errorf("exit code %d; want %d", code, want)
			}
		})
	}
}

// TestHelpAndBadFlags checks that --help prints its usage once, on stdout,
// and that a bad flag prints only the error and a one-line hint on stderr.
func TestHelpAndBadFlags(t *testing.T) {
	for _, tt := range []struct {
		args      []string
		wantUsage string // "" for a bad flag
	}{
		{[]string{"--help"}, "Usage: sessiond-load [FLAGS] MODE"},
		{[]string{"-h"}, "Usage: sessiond-load [FLAGS] MODE"},
		{[]string{"append", "--help"}, "Usage: sessiond-load append [FLAGS]"},
		{[]string{"--bogus"}, ""},
		{[]string{"health", "--bogus"}, ""},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(t.Context(), tt.args, &stdout, &stderr)
			code := exitCode(err, &stderr)
			if tt.wantUsage != "" {
				if code != 0 || stderr.Len() != 0 || strings.Count(stdout.String(), "Usage:") != 1 || !strings.Contains(stdout.String(), tt.wantUsage) {
					t.Fatalf("exit %d, stdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
				}
				return
			}
			lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
			if code != 2 || stdout.Len() != 0 || len(lines) != 2 || !strings.Contains(lines[0], "bogus") || !strings.Contains(lines[1], "--help") {
				t.Fatalf("exit %d, stdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
			}
		})
	}
}

// TestAppendMetrics: with --metrics, the append report carries what the
// daemon's metrics say about the timed run: every acknowledged append
// flushed once (the warm-up left out), in at most as many flushes.
func TestAppendMetrics(t *testing.T) {
	m := metrics.New("test", "file")
	d := startDaemonMetrics(t, m)
	hs := httptest.NewServer(m.Handler(false, zap.NewNop()))
	t.Cleanup(hs.Close)
	var rep appendReport
	runJSON(t, &rep, "--addr", d.addr, "append", "--clients", "2", "--count", "40", "--warmup", "3",
		"--metrics", strings.TrimPrefix(hs.URL, "http://"))
	dm := rep.Daemon
	if rep.Ops != 40 || dm == nil {
		t.Fatalf("report %+v: want 40 appends and daemon metrics", rep)
	}
	if dm.AppendsFlushed != 40 || dm.Flushes < 1 || dm.Flushes > 40 || dm.AppendsPerFlush < 1 || dm.FlushMeanMS <= 0 || dm.HandlingMeanMS <= 0 {
		t.Errorf("daemon metrics %+v: want 40 appends flushed in 1..40 flushes, positive means", dm)
	}
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"append", "--metrics", "10.0.0.1:9090"}, &stdout, &stderr); exitCode(err, &stderr) != 2 {
		t.Errorf("--metrics off loopback: %v, want a usage error", err)
	}
}

// TestOwnNamespaceAndCleanup: without --namespace a run writes into a
// namespace of its own, and --cleanup deletes what it wrote; fsync without
// --dir measures a temp folder it removes.
func TestOwnNamespaceAndCleanup(t *testing.T) {
	d := startDaemon(t)
	sessionsIn := func(ns string) int64 {
		n, _ := d.storedMessages(t, ns)
		return n
	}
	runNS := regexp.MustCompile(`writing into namespace (sessiond-load-\d{8}-\d{6}-[0-9a-f]{6})\n`)
	runOnce := func(args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if err := run(t.Context(), append([]string{"--addr", d.addr}, args...), &stdout, &stderr); err != nil {
			t.Fatalf("run %v: %v\n%s", args, err, stderr.String())
		}
		m := runNS.FindStringSubmatch(stderr.String())
		if m == nil {
			t.Fatalf("run %v does not name its namespace:\n%s", args, stderr.String())
		}
		return m[1]
	}

	kept := runOnce("append", "--clients", "2", "--count", "20", "--warmup", "1")
	again := runOnce("append", "--clients", "2", "--count", "20", "--warmup", "1")
	if kept == again {
		t.Fatalf("two runs shared namespace %s", kept)
	}
	if a, b, def := sessionsIn(kept), sessionsIn(again), sessionsIn(""); a != 2 || b != 2 || def != 0 {
		t.Fatalf("after two runs: %d and %d sessions in their namespaces, %d in the default one", a, b, def)
	}
	cleaned := runOnce("--cleanup", "load", "--messages", "10", "--repeat", "1")
	if n := sessionsIn(cleaned); n != 0 || sessionsIn(kept) != 2 {
		t.Errorf("after load --cleanup: %d sessions left in %s", n, cleaned)
	}
	cleaned = runOnce("list", "--populate", "25", "--clients", "4", "--repeat", "1", "--cleanup")
	if n := sessionsIn(cleaned); n != 0 {
		t.Errorf("after list --cleanup: %d sessions left in %s", n, cleaned)
	}

	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	var rep fsyncReport
	runJSON(t, &rep, "fsync", "--count", "5", "--warmup", "1")
	if !strings.HasPrefix(rep.Dir, tmp) || rep.Ops != 5 {
		t.Errorf("fsync without --dir measured %q (%d ops); want a folder in %s", rep.Dir, rep.Ops, tmp)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("fsync left %d entries in $TMPDIR", len(left))
	}
}

// TestGNUFlags: flags take two dashes, as sessiond's and sessionctl's do,
// with their value after a space or an "=", before the mode or after it; a
// Go-style single-dash long flag is refused with the spelling that works.
func TestGNUFlags(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"--json", "fsync", "--count=3", "--warmup", "0", "--size", "64"}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("fsync with GNU flags: %v\n%s", err, stderr.String())
	}
	var rep struct {
		Ops int `json:"ops"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil || rep.Ops != 3 {
		t.Fatalf("--count=3 made %d appends (%v):\n%s", rep.Ops, err, stdout.String())
	}

	for _, args := range [][]string{{"-json", "fsync"}, {"fsync", "-count", "3"}} {
		stdout.Reset()
		stderr.Reset()
		err := run(t.Context(), args, &stdout, &stderr)
		name := strings.TrimPrefix(args[0], "-")
		if args[0] == "fsync" {
			name = strings.TrimPrefix(args[1], "-")
		}
		if code := exitCode(err, &stderr); code != 2 || !strings.Contains(stderr.String(), "flags take two dashes: --"+name) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and the hint --%s", args, code, stderr.String(), name)
		}
	}
}

// TestMedianKeepsOrder: median leaves the runs it is given in run order,
// which the per-run rows of a report pair by index.
func TestMedianKeepsOrder(t *testing.T) {
	runs := []float64{3, 1, 4, 2}
	if m := median(runs); m != 2.5 {
		t.Errorf("median %v, want 2.5", m)
	}
	if runs[0] != 3 || runs[1] != 1 || runs[2] != 4 || runs[3] != 2 {
		t.Errorf("median reordered its input: %v", runs)
	}
}
