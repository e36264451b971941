package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage/postgres/pgtest"
)

// startPostgresDaemon starts sessiond on the PostgreSQL database dsn.
func startPostgresDaemon(t *testing.T, dsn string, extra ...string) *daemon {
	t.Helper()
	return startDaemon(t, t.TempDir(), append([]string{"--storage", "postgres", "--postgres-dsn", dsn}, extra...)...)
}

// TestPostgresReplicas runs two replicas on one database: revisions, watches
// and aliases hold across them as they do within one daemon.
func TestPostgresReplicas(t *testing.T) {
	dsn := pgtest.Schema(t)
	a, b := startPostgresDaemon(t, dsn), startPostgresDaemon(t, dsn)
	ctx := testContext(t, 60*time.Second)
	ca, cb := a.client(t), b.client(t)

	info, err := cb.GetServerInfo(ctx, &sessiondv1.GetServerInfoRequest{})
	if err != nil || info.GetBackend() != "postgres" {
		t.Fatalf("GetServerInfo = %v, %v; want backend postgres", info, err)
	}

	created, err := ca.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Alias: "shared"})
	if err != nil {
		t.Fatalf("CreateSession on A: %v", err)
	}
	id := created.GetSession().GetId()

	// A watcher on A sees what B writes.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watch, err := ca.WatchSession(wctx, &sessiondv1.WatchSessionRequest{Ref: byID("", id)})
	if err != nil {
		t.Fatalf("WatchSession on A: %v", err)
	}
	if _, err := watch.Header(); err != nil {
		t.Fatalf("watch header: %v", err)
	}

	// A write through A, then a stale expected_revision through B: ABORTED.
	ap, err := ca.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byID("", id), ExpectedRevision: 1,
		Messages: []*sessiondv1.Message{textMsg("m1", sessiondv1.Role_ROLE_USER, "through A")}})
	if err != nil || ap.GetRevision() != 2 {
		t.Fatalf("append through A = %v, %v; want revision 2", ap, err)
	}
	_, err = cb.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byID("", id), ExpectedRevision: 1,
		Messages: []*sessiondv1.Message{textMsg("m2", sessiondv1.Role_ROLE_USER, "stale, through B")}})
	wantCode(t, err, codes.Aborted)
	if _, err := cb.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byID("", id), ExpectedRevision: 2,
		Messages: []*sessiondv1.Message{textMsg("m3", sessiondv1.Role_ROLE_USER, "through B")}}); err != nil {
		t.Fatalf("append through B at revision 2: %v", err)
	}
	for _, want := range []uint64{2, 3} {
		ev, err := watch.Recv()
		if err != nil {
			t.Fatalf("watch on A, waiting for revision %d: %v", want, err)
		}
		if ev.GetRevision() != want || ev.GetType() != sessiondv1.EventType_EVENT_TYPE_APPENDED {
			t.Fatalf("watch on A got %v, want APPENDED revision %d", ev, want)
		}
	}

	// The same alias created through both replicas at once: one wins.
	for round := range 10 {
		alias := fmt.Sprintf("race-%d", round)
		var wins, lost atomic.Int32
		var wg sync.WaitGroup
		for _, c := range []sessiondv1.SessionStoreServiceClient{ca, cb} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Alias: alias})
				switch status.Code(err) {
				case codes.OK:
					wins.Add(1)
				case codes.AlreadyExists:
					lost.Add(1)
				default:
					t.Errorf("create %s: %v", alias, err)
				}
			}()
		}
		wg.Wait()
		if wins.Load() != 1 || lost.Load() != 1 {
			t.Fatalf("create of alias %s through both replicas: %d won, %d ALREADY_EXISTS; want 1 and 1", alias, wins.Load(), lost.Load())
		}
	}
}

// TestPostgresKillReplica has 8 clients, spread over two replicas, append
// with their own message ids to the same 4 sessions while one replica after
// the other is killed with SIGKILL and restarted. Every acknowledged message
// must be stored exactly once, and every session must load.
func TestPostgresKillReplica(t *testing.T) {
	const (
		cycles   = 10
		clients  = 8
		sessions = 4
	)
	dsn := pgtest.Schema(t)
	ds := [2]*daemon{startPostgresDaemon(t, dsn), startPostgresDaemon(t, dsn)}
	var cs [2]atomic.Pointer[sessiondv1.SessionStoreServiceClient]
	for i, d := range ds {
		c := d.client(t)
		cs[i].Store(&c)
	}
	ctx := testContext(t, 4*time.Minute)
	ids := make([]string, sessions)
	for i := range ids {
		r, err := (*cs[0].Load()).CreateSession(ctx, &sessiondv1.CreateSessionRequest{Alias: fmt.Sprintf("kill-%d", i)})
		if err != nil {
			t.Fatalf("CreateSession: %v", err)
		}
		ids[i] = r.GetSession().GetId()
	}

	stop := make(chan struct{})
	var (
		mu    sync.Mutex
		acked = map[string]int{} // message id -> session index
		wg    sync.WaitGroup
	)
	for cl := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				mid, sess := fmt.Sprintf("c%d-%d", cl, n), (cl+n)%sessions
				req := &sessiondv1.AppendMessagesRequest{Ref: byID("", ids[sess]),
					Messages: []*sessiondv1.Message{textMsg(mid, sessiondv1.Role_ROLE_USER, "payload "+mid)}}
				// Retry the same message (same id) until it is
				// acknowledged: a retry of one that landed is a no-op.
				for {
					cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					_, err := (*cs[cl%2].Load()).AppendMessages(cctx, req)
					cancel()
					if err == nil {
						mu.Lock()
						acked[mid] = sess
						mu.Unlock()
						break
					}
					if ctx.Err() != nil {
						return
					}
					if c := status.Code(err); c != codes.Unavailable && c != codes.DeadlineExceeded && c != codes.Canceled {
						t.Errorf("append %s: %v", mid, err)
						return
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}

	for cycle := range cycles {
		time.Sleep(300 * time.Millisecond)
		i := cycle % 2
		ds[i].kill(t)
		time.Sleep(100 * time.Millisecond)
		ds[i] = restartDaemon(t, ds[i])
		c := ds[i].client(t)
		cs[i].Store(&c)
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	if t.Failed() {
		return
	}

	counts := map[string]int{}
	for i, id := range ids {
		for _, c := range []sessiondv1.SessionStoreServiceClient{*cs[0].Load(), *cs[1].Load()} {
			meta, msgs := mustLoad(t, ctx, c, &sessiondv1.LoadSessionRequest{Ref: byID("", id)})
			if int(meta.GetMessageCount()) != len(msgs) {
				t.Errorf("session %d: message_count %d, %d messages loaded", i, meta.GetMessageCount(), len(msgs))
			}
		}
		_, msgs := mustLoad(t, ctx, *cs[0].Load(), &sessiondv1.LoadSessionRequest{Ref: byID("", id)})
		for _, m := range msgs {
			counts[m.GetId()]++
		}
	}
	lost, dup := 0, 0
	for mid := range acked {
		if counts[mid] == 0 {
			lost++
			t.Errorf("acknowledged message %s is missing", mid)
		}
	}
	for mid, n := range counts {
		if n > 1 {
			dup++
			t.Errorf("message %s is stored %d times", mid, n)
		}
	}
	t.Logf("kill -9 across replicas: %d cycles, %d acknowledged writes checked, %d lost, %d duplicated (%d messages stored)",
		cycles, len(acked), lost, dup, len(counts))
	if len(acked) < cycles*clients {
		t.Errorf("only %d writes acknowledged in %d cycles: the replicas hardly served", len(acked), cycles)
	}
}

// proxy forwards TCP connections to a target until cut, which closes
// every connection and refuses new ones until restore.
type proxy struct {
	target string
	lis    net.Listener
	mu     sync.Mutex
	up     bool
	conns  map[net.Conn]struct{}
}

func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{target: target, lis: lis, up: true, conns: map[net.Conn]struct{}{}}
	t.Cleanup(func() { _ = lis.Close(); p.cut() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

func (p *proxy) serve(c net.Conn) {
	p.mu.Lock()
	if !p.up {
		p.mu.Unlock()
		_ = c.Close()
		return
	}
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		p.mu.Unlock()
		_ = c.Close()
		return
	}
	p.conns[c], p.conns[s] = struct{}{}, struct{}{}
	p.mu.Unlock()
	go func() { _, _ = io.Copy(s, c); _ = s.Close() }()
	_, _ = io.Copy(c, s)
	_ = c.Close()
}

func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.up = false
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
}

func (p *proxy) restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.up = true
}

// TestPostgresUnreachable cuts the daemon off from its database: it stays
// up, health says NOT_SERVING, calls answer UNAVAILABLE without the DSN's
// password, and it recovers by itself when the database is back.
func TestPostgresUnreachable(t *testing.T) {
	dsn := pgtest.Schema(t)
	host := regexp.MustCompile(`@([^/]+)/`).FindStringSubmatch(dsn)
	if host == nil {
		t.Fatalf("test DSN %q has no @host:port/", dsn)
	}
	p := startProxy(t, host[1])
	// A password the test server ignores (trust), to prove it never shows.
	proxied := regexp.MustCompile(`//([^@]*)@[^/]+/`).ReplaceAllString(dsn, "//postgres:hunter2secret@"+p.lis.Addr().String()+"/")
	d := startPostgresDaemon(t, proxied)
	ctx := testContext(t, 60*time.Second)
	c := d.client(t)
	hc := healthpb.NewHealthClient(d.conn(t))
	if _, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Alias: "before"}); err != nil {
		t.Fatalf("CreateSession: %v", err)
	}

	p.cut()
	waitHealth(t, ctx, hc, healthpb.HealthCheckResponse_NOT_SERVING)
	_, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Alias: "during"})
	wantCode(t, err, codes.Unavailable)
	if bytes.Contains([]byte(err.Error()), []byte("hunter2secret")) {
		t.Errorf("error shows the DSN's password: %v", err)
	}

	p.restore()
	waitHealth(t, ctx, hc, healthpb.HealthCheckResponse_SERVING)
	if _, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Alias: "after"}); err != nil {
		t.Fatalf("CreateSession after the database came back: %v", err)
	}
	if bytes.Contains([]byte(d.Logs()), []byte("hunter2secret")) {
		t.Errorf("the daemon's log shows the DSN's password")
	}
}

func waitHealth(t *testing.T, ctx context.Context, hc healthpb.HealthClient, want healthpb.HealthCheckResponse_ServingStatus) {
	t.Helper()
	for {
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		if err == nil && r.GetStatus() == want {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("health never became %v (last: %v, %v)", want, r, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestPostgresExportImport moves a whole store from file to postgres and
// back with sessionctl export | sessionctl import: the exports are
// byte-identical (every message's protobuf encoding included) apart from
// what an import sets anew: the export time and each session's update time
// (and so the session's own encoding).
func TestPostgresExportImport(t *testing.T) {
	if sessionctlBin == "" {
		t.Skip("the tree has no cmd/sessionctl")
	}
	dsn := pgtest.Schema(t)
	ctx := testContext(t, 60*time.Second)
	src := startDaemon(t, t.TempDir())
	c := src.client(t)
	a, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Alias: "mv-a", Title: "A \x00 title", Labels: map[string]string{"k": "v"},
		Metadata: map[string]string{"m": "ünï"}, Messages: weatherConversation()})
	if err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	if _, err := c.ForkSession(ctx, &sessiondv1.ForkSessionRequest{Ref: byID("", a.GetSession().GetId()), MessageCount: 2, Alias: "mv-fork"}); err != nil {
		t.Fatalf("ForkSession: %v", err)
	}

	pg := startPostgresDaemon(t, dsn)
	back := startDaemon(t, t.TempDir())
	e1 := pipe(t, ctx, src, pg)
	e2 := pipe(t, ctx, pg, back)
	e3 := export(t, ctx, back)
	for _, e := range []*[]byte{&e1, &e2, &e3} {
		*e = normalizeExport(*e)
	}
	if !bytes.Equal(e1, e2) || !bytes.Equal(e2, e3) {
		t.Fatalf("exports differ:\nfile:\n%s\npostgres:\n%s\nfile again:\n%s", e1, e2, e3)
	}
	if n := bytes.Count(e1, []byte(`"type":"message"`)); n != len(weatherConversation())+2 {
		t.Errorf("export holds %d messages, want %d:\n%s", n, len(weatherConversation())+2, e1)
	}
}

var (
	exportedAt     = regexp.MustCompile(`"exported_at":"[^"]*"`)
	sessionUpdated = regexp.MustCompile(`("type":"session".*)"updatedAt":"[^"]*",(.*),"proto":"[^"]*"`)
)

// normalizeExport blanks what an import sets anew.
func normalizeExport(b []byte) []byte {
	b = exportedAt.ReplaceAll(b, []byte(`"exported_at":""`))
	return sessionUpdated.ReplaceAll(b, []byte(`$1$2`))
}

// export runs sessionctl export --all against d.
func export(t *testing.T, ctx context.Context, d *daemon) []byte {
	t.Helper()
	return ctlOut(t, ctx, exec.CommandContext(ctx, sessionctlBin, "--addr", d.Addr, "export", "--all"))
}

// pipe runs sessionctl export --all against from into sessionctl import -
// against to, and returns the export.
func pipe(t *testing.T, ctx context.Context, from, to *daemon) []byte {
	t.Helper()
	out := export(t, ctx, from)
	imp := exec.CommandContext(ctx, sessionctlBin, "--addr", to.Addr, "import", "-")
	imp.Stdin = bytes.NewReader(out)
	ctlOut(t, ctx, imp)
	return out
}

func ctlOut(t *testing.T, _ context.Context, cmd *exec.Cmd) []byte {
	t.Helper()
	cmd.Env = cleanEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) || err != nil {
			t.Fatalf("%q: %v\nstderr:\n%s", cmd.Args, err, stderr.String())
		}
	}
	return stdout.Bytes()
}
