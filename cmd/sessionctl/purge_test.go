package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"google.golang.org/protobuf/proto"

	"github.com/sessiond/sessiond/clienttest"
	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage/postgres/pgtest"
)

func TestParseIdle(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"30d": 720 * time.Hour, "1d12h": 36 * time.Hour, "90m": 90 * time.Minute, "45s": 45 * time.Second, "2h30m10s": 2*time.Hour + 30*time.Minute + 10*time.Second,
	} {
		got, err := parseIdle(in)
		if err != nil || got != want {
			t.Errorf("parseIdle(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0s", "0d0h", "3w", "1.5h", "-1d", "d", "30", "99999999999999999d"} {
		if _, err := parseIdle(in); err == nil {
			t.Errorf("parseIdle(%q): want an error", in)
		}
	}
}

// encodedBytes is what purge reports for a session: the protobuf size of
// its messages.
func encodedBytes(t *testing.T, d *daemon, ns, id string) int64 {
	t.Helper()
	s, err := d.load(ns, id)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, m := range s.GetMessages() {
		n += int64(proto.Size(m))
	}
	return n
}

// eachBackend runs test against a daemon on the file backend, and on
// PostgreSQL (a private schema) when SESSIOND_TEST_POSTGRES_DSN names a
// server.
func eachBackend(t *testing.T, test func(t *testing.T, d *daemon)) {
	t.Run("file", func(t *testing.T) { test(t, startDaemon(t, t.TempDir(), "")) })
	t.Run("postgres", func(t *testing.T) {
		dsn := pgtest.Schema(t)
		test(t, startDaemon(t, t.TempDir(), "", clienttest.WithArgs("--storage", "postgres", "--postgres-dsn", dsn)))
	})
}

func TestPurge(t *testing.T) { eachBackend(t, testPurge) }

func testPurge(t *testing.T, d *daemon) {
	msgs := func(n int) []*sessiondv1.Message {
		var out []*sessiondv1.Message
		for i := range n {
			out = append(out, text(user, fmt.Sprintf("m%d", i), strings.Repeat("x", 100*(i+1))))
		}
		return out
	}
	old1 := d.create(&sessiondv1.CreateSessionRequest{Alias: "old1", Messages: msgs(3)})
	old2 := d.create(&sessiondv1.CreateSessionRequest{Alias: "old2", Messages: msgs(1)})
	touched := d.create(&sessiondv1.CreateSessionRequest{Alias: "touched", Messages: msgs(1)})
	d.create(&sessiondv1.CreateSessionRequest{Namespace: "other", Alias: "elsewhere", Messages: msgs(2)})
	wantBytes := encodedBytes(t, d, "", old1.GetId()) + encodedBytes(t, d, "", old2.GetId())
	time.Sleep(1100 * time.Millisecond)
	d.create(&sessiondv1.CreateSessionRequest{Alias: "fresh"})
	if _, err := d.client.AppendMessages(t.Context(), &sessiondv1.AppendMessagesRequest{
		Ref: &sessiondv1.SessionRef{Key: &sessiondv1.SessionRef_Id{Id: touched.GetId()}}, Messages: []*sessiondv1.Message{text(user, "late", "still here")}}); err != nil {
		t.Fatal(err)
	}

	// --dry-run lists and counts, deletes nothing.
	r := must(t, d.ctl("--json", "purge", "--idle-for", "1s", "--dry-run"))
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	var rep purgeReport
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, r.stdout)
	}
	if len(lines) != 3 || !rep.DryRun || rep.Sessions != 2 || rep.Messages != 4 || rep.Bytes != wantBytes || rep.Listed != 2 {
		t.Errorf("dry run: want old1 and old2 (4 messages, %d bytes), got %+v\n%s", wantBytes, rep, r.stdout)
	}
	if !strings.Contains(lines[0], old1.GetId()) || !strings.Contains(lines[1], old2.GetId()) {
		t.Errorf("dry run: want the longest idle first (old1, old2):\n%s", r.stdout)
	}
	must(t, d.ctl("show", "old1"))
	r = must(t, d.ctl("purge", "--idle-for", "1s", "--dry-run"))
	if !strings.Contains(r.stdout, "old1") || !strings.Contains(r.stdout, "would purge 2 sessions") {
		t.Errorf("dry run table:\n%s", r.stdout)
	}

	r = must(t, d.ctl("purge", "--idle-for", "1s"))
	if !strings.Contains(r.stdout, "purged 2 sessions of the default namespace idle since before") ||
		!strings.Contains(r.stdout, "4 messages") || !strings.Contains(r.stdout, fmt.Sprintf("%d bytes", wantBytes)) {
		t.Errorf("purge report:\n%s", r.stdout)
	}
	for _, gone := range []string{"old1", "old2"} {
		if r := d.ctl("show", gone); r.code != exitNotFound {
			t.Errorf("%s after purge: want exit 3, got %v", gone, r)
		}
	}
	must(t, d.ctl("show", "fresh"))
	must(t, d.ctl("show", "touched"))
	must(t, d.ctl("--namespace", "other", "show", "elsewhere"))

	r = must(t, d.ctl("--json", "purge", "--idle-for", "1s"))
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || rep.Sessions != 0 || rep.DryRun {
		t.Errorf("second purge: %v %+v", err, rep)
	}
	r = must(t, d.ctl("--namespace", "other", "purge", "--idle-for", "1s"))
	if !strings.Contains(r.stdout, "purged 1 sessions of namespace \"other\"") {
		t.Errorf("purge of another namespace:\n%s", r.stdout)
	}

	for _, args := range [][]string{
		{"purge"}, {"purge", "--idle-for", "3w"}, {"purge", "--idle-for", "0s"}, {"purge", "--idle-for", "1d", "--concurrency", "0"}, {"purge", "extra"},
	} {
		r := d.ctl(args...)
		if r.code != exitUsage {
			t.Errorf("%v: want exit 2, got %v", args, r)
		}
		checkOneLineError(t, r)
	}
}

// TestPurgeKeepsWhatWasWritten: a session listed as idle but written before
// its turn comes is kept.
func TestPurgeKeepsWhatWasWritten(t *testing.T) {
	d := startDaemon(t, t.TempDir(), "")
	s := d.create(&sessiondv1.CreateSessionRequest{Alias: "busy"})
	cutoff := time.Now()
	if _, err := d.client.AppendMessages(t.Context(), &sessiondv1.AppendMessagesRequest{
		Ref: &sessiondv1.SessionRef{Key: &sessiondv1.SessionRef_Id{Id: s.GetId()}}, Messages: []*sessiondv1.Message{text(user, "m", "new")}}); err != nil {
		t.Fatal(err)
	}
	e := &env{addr: d.addr, timeout: defaultTimeout}
	defer e.close()
	c, err := e.dial(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if r := e.purgeOne(t.Context(), c, s, cutoff, false); !r.skipped || r.err != nil {
		t.Errorf("a session written after the cutoff: want skipped, got %+v", r)
	}
	must(t, d.ctl("show", "busy"))
}

// BenchmarkPurge10k purges 10,000 idle sessions of one message each from
// the real daemon (file backend) and reports the listing time (list-s),
// a dry run's (listing and reading every session, dryrun-s) and the whole
// purge's (purge-s), with 1 and 16 sessions at a time; and on PostgreSQL
// with 16 when SESSIOND_TEST_POSTGRES_DSN names a server:
// go test -run '^$' -bench Purge10k -benchtime 1x ./cmd/sessionctl
func BenchmarkPurge10k(b *testing.B) {
	for _, workers := range []int{1, defaultPurgeWorkers} {
		b.Run(fmt.Sprintf("file/concurrency=%d", workers), func(b *testing.B) { benchmarkPurge(b, 10000, workers) })
	}
	b.Run(fmt.Sprintf("postgres/concurrency=%d", defaultPurgeWorkers), func(b *testing.B) {
		dsn := pgtest.Schema(b)
		benchmarkPurge(b, 10000, defaultPurgeWorkers, "--storage", "postgres", "--postgres-dsn", dsn)
	})
}

func benchmarkPurge(b *testing.B, n, workers int, daemonArgs ...string) {
	for range b.N {
		b.StopTimer()
		proc := clienttest.StartDaemon(b, sessiondBin, b.TempDir(), "127.0.0.1:0", clienttest.WithArgs(daemonArgs...))
		conn, err := grpc.NewClient(proc.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		c := sessiondv1.NewSessionStoreServiceClient(conn)
		var wg sync.WaitGroup
		ch := make(chan int)
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range ch {
					if _, err := c.CreateSession(b.Context(), &sessiondv1.CreateSessionRequest{
						Messages: []*sessiondv1.Message{text(user, "m", fmt.Sprintf("message of session %d", i))}}); err != nil {
						b.Error(err)
					}
				}
			}()
		}
		for i := range n {
			ch <- i
		}
		close(ch)
		wg.Wait()
		conn.Close()
		time.Sleep(1100 * time.Millisecond)
		purge := func(args ...string) purgeReport {
			var out, errb bytes.Buffer
			code := run(b.Context(), append([]string{"--addr", proc.Addr, "--json", "purge", "--idle-for", "1s", "--concurrency", fmt.Sprint(workers)}, args...), strings.NewReader(""), &out, &errb)
			lines := bytes.Split(bytes.TrimSpace(out.Bytes()), []byte("\n"))
			var rep purgeReport
			if err := json.Unmarshal(lines[len(lines)-1], &rep); code != 0 || err != nil || rep.Sessions != int64(n) {
				b.Fatalf("purge %v: exit %d, %v\n%s", args, code, err, errb.String())
			}
			return rep
		}
		// The dry run lists and reads every session: what the purge costs
		// beyond it is the deletes.
		dry := purge("--dry-run")
		b.StartTimer()
		rep := purge()
		b.StopTimer()
		b.ReportMetric(rep.ListSeconds, "list-s")
		b.ReportMetric(dry.TotalSeconds, "dryrun-s")
		b.ReportMetric(rep.TotalSeconds, "purge-s")
		_ = proc.SignalWait(syscall.SIGTERM, 20*time.Second)
	}
}
