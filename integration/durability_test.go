package integration

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	sdk "github.com/sessiond/sessiond/client"
	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// snapshot is everything a client can read from a daemon: per namespace,
// the listing, and every listed session loaded in full.
type snapshot struct {
	lists map[string][]*sessiondv1.Session
	loads map[string][]*sessiondv1.Message // by session id
	metas map[string]*sessiondv1.Session   // by session id, from LoadSession
}

func takeSnapshot(t *testing.T, ctx context.Context, c sessiondv1.SessionStoreServiceClient, namespaces ...string) snapshot {
	t.Helper()
	s := snapshot{lists: map[string][]*sessiondv1.Session{}, loads: map[string][]*sessiondv1.Message{}, metas: map[string]*sessiondv1.Session{}}
	for _, ns := range namespaces {
		list := mustList(t, ctx, c, &sessiondv1.ListSessionsRequest{Namespace: ns})
		s.lists[ns] = list
		for _, sess := range list {
			meta, msgs := mustLoad(t, ctx, c, &sessiondv1.LoadSessionRequest{Ref: byID(ns, sess.GetId())})
			s.metas[sess.GetId()] = meta
			s.loads[sess.GetId()] = msgs
		}
	}
	return s
}

func (s snapshot) diff(o snapshot) string {
	if d := protoDiff(s.lists, o.lists); d != "" {
		return "listings (-before +after):\n" + d
	}
	if d := protoDiff(s.metas, o.metas); d != "" {
		return "sessions (-before +after):\n" + d
	}
	if d := protoDiff(s.loads, o.loads); d != "" {
		return "messages (-before +after):\n" + d
	}
	return ""
}

// TestRestartKeepsEverything writes every kind of change, then checks that
// a daemon restarted on the same data dir, after SIGTERM and after SIGKILL,
// answers exactly what the first one did, and carries on from there.
func TestRestartKeepsEverything(t *testing.T) {
	dir := t.TempDir()
	d := startDaemon(t, dir)
	ctx := testContext(t, 60*time.Second)
	c := d.client(t)

	conv := weatherConversation()
	a, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{
		Alias: "keep-a", Title: "A", Summary: "s", Metadata: map[string]string{"k": "v"}, Labels: map[string]string{"l": "1"}, Messages: conv[:2],
	})
	if err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	aRef := byID("", a.GetSession().GetId())
	mustAppend := func(ref *sessiondv1.SessionRef, msgs ...*sessiondv1.Message) {
		t.Helper()
		if _, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: ref, Messages: msgs}); err != nil {
			t.Fatalf("AppendMessages: %v", err)
		}
	}
	for _, m := range conv[2:] {
		mustAppend(aRef, m)
	}
	if _, err := c.ForkSession(ctx, &sessiondv1.ForkSessionRequest{Ref: aRef, MessageCount: 3, Alias: "keep-fork"}); err != nil {
		t.Fatalf("ForkSession: %v", err)
	}
	if _, err := c.UpdateSession(ctx, &sessiondv1.UpdateSessionRequest{Ref: aRef, Session: &sessiondv1.Session{Alias: "keep-a2", Summary: "new summary"}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"alias", "summary"}}}); err != nil {
		t.Fatalf("UpdateSession: %v", err)
	}
	b, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Namespace: "team-b", Alias: "keep-b", Messages: conv[:4]})
	if err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	if _, err := c.RewindSession(ctx, &sessiondv1.RewindSessionRequest{Ref: byID("team-b", b.GetSession().GetId()), MessageCount: 1}); err != nil {
		t.Fatalf("RewindSession: %v", err)
	}
	mustAppend(byID("team-b", b.GetSession().GetId()), textMsg("after-rewind", sessiondv1.Role_ROLE_USER, "again"))
	if _, err := saveSession(ctx, c, &sessiondv1.SaveSessionHeader{Ref: byAlias("team-b", "keep-saved"), CreateIfMissing: true, Title: "saved"}, conv[:3], conv[3:]); err != nil {
		t.Fatalf("SaveSession: %v", err)
	}
	gone, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Alias: "keep-gone", Messages: conv[:1]})
	if err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	if _, err := c.DeleteSession(ctx, &sessiondv1.DeleteSessionRequest{Ref: byID("", gone.GetSession().GetId())}); err != nil {
		t.Fatalf("DeleteSession: %v", err)
	}

	before := takeSnapshot(t, ctx, c, "", "team-b")
	if len(before.lists[""]) != 2 || len(before.lists["team-b"]) != 2 {
		t.Fatalf("before restart: %d and %d sessions, want 2 and 2", len(before.lists[""]), len(before.lists["team-b"]))
	}

	d.stop(t)
	d = restartDaemon(t, d)
	c = d.client(t)
	if diff := before.diff(takeSnapshot(t, ctx, c, "", "team-b")); diff != "" {
		t.Fatalf("after SIGTERM and restart, %s", diff)
	}
	_, err = c.GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: byID("", gone.GetSession().GetId())})
	wantCode(t, err, codes.NotFound)

	d.kill(t)
	d = restartDaemon(t, d)
	c = d.client(t)
	if diff := before.diff(takeSnapshot(t, ctx, c, "", "team-b")); diff != "" {
		t.Fatalf("after SIGKILL and restart, %s", diff)
	}

	// Revisions, idempotency and aliases carry on where they were.
	rev := before.metas[a.GetSession().GetId()].GetRevision()
	r, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byAlias("", "keep-a2"), Messages: conv[4:], ExpectedRevision: rev})
	if err != nil {
		t.Fatalf("retried AppendMessages after restart: %v", err)
	}
	if r.GetRevision() != rev {
		t.Errorf("a retried append after restart moved the revision from %d to %d", rev, r.GetRevision())
	}
	r, err = c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byAlias("", "keep-a2"), Messages: []*sessiondv1.Message{textMsg("new", sessiondv1.Role_ROLE_USER, "after restart")}, ExpectedRevision: rev})
	if err != nil {
		t.Fatalf("AppendMessages after restart: %v", err)
	}
	if r.GetRevision() != rev+1 {
		t.Errorf("revision after restart = %d, want %d", r.GetRevision(), rev+1)
	}
	_, err = c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Namespace: "team-b", Alias: "keep-b"})
	wantCode(t, err, codes.AlreadyExists)
}

// TestSecondDaemonOnSameDataDir checks the data dir lock: a second daemon
// on a data dir in use exits with an error instead of sharing it.
func TestSecondDaemonOnSameDataDir(t *testing.T) {
	dir := t.TempDir()
	startDaemon(t, dir)
	ctx := testContext(t, 30*time.Second)
	cmd := exec.CommandContext(ctx, sessiondBin, "--listen", "127.0.0.1:0", "--data-dir", dir, "--log-format", "json")
	cmd.Env = cleanEnv()
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("a second sessiond on the same data dir exited 0; output:\n%s", out)
	}
	if ctx.Err() != nil {
		t.Fatalf("a second sessiond on the same data dir kept running; output:\n%s", out)
	}
	if !strings.Contains(string(out), "in use") && !strings.Contains(string(out), "lock") {
		t.Errorf("second sessiond's output does not say the data dir is in use:\n%s", out)
	}
}

// TestDataLossIsolated damages one session's stored bytes while the daemon
// is stopped: that session answers DATA_LOSS, every other session keeps
// serving, and the daemon starts.
func TestDataLossIsolated(t *testing.T) {
	dir := t.TempDir()
	d := startDaemon(t, dir)
	ctx := testContext(t, 60*time.Second)
	c := d.client(t)

	// The marker appears in the damaged session's messages only, both in
	// the initial create and in an append that is followed by more, so
	// that the damage is never an incomplete last record (which a
	// backend may legitimately trim).
	const marker = "DAMAGE-ME-7f3a9c"
	healthy, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Alias: "healthy", Messages: []*sessiondv1.Message{textMsg("h1", sessiondv1.Role_ROLE_USER, "fine")}})
	if err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	victim, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Alias: "victim", Messages: []*sessiondv1.Message{textMsg("v1", sessiondv1.Role_ROLE_USER, marker+" in the snapshot")}})
	if err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	for i, content := range []string{marker + " in the journal", "after the damage", "and more"} {
		if _, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byAlias("", "victim"), Messages: []*sessiondv1.Message{textMsg(fmt.Sprintf("v%d", i+2), sessiondv1.Role_ROLE_USER, content)}}); err != nil {
			t.Fatalf("AppendMessages: %v", err)
		}
	}
	for i := range 3 {
		if _, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byAlias("", "healthy"), Messages: []*sessiondv1.Message{textMsg(fmt.Sprintf("h%d", i+2), sessiondv1.Role_ROLE_ASSISTANT, "still fine")}}); err != nil {
			t.Fatalf("AppendMessages: %v", err)
		}
	}
	_, healthyMsgs := mustLoad(t, ctx, c, &sessiondv1.LoadSessionRequest{Ref: byAlias("", "healthy")})
	d.stop(t)

	damaged := flipMarkerBytes(t, dir, marker)
	t.Logf("damaged %d occurrence(s) of the marker: %q", len(damaged), damaged)

	d = restartDaemon(t, d)
	c = d.client(t)
	_, _, _, err = loadSession(ctx, c, &sessiondv1.LoadSessionRequest{Ref: byID("", victim.GetSession().GetId())})
	wantCode(t, err, codes.DataLoss)

	// The rest of the store is untouched and writable.
	_, got := mustLoad(t, ctx, c, &sessiondv1.LoadSessionRequest{Ref: byID("", healthy.GetSession().GetId())})
	if diff := protoDiff(healthyMsgs, got); diff != "" {
		t.Errorf("healthy session after another's damage (-want +got):\n%s", diff)
	}
	if _, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byAlias("", "healthy"), Messages: []*sessiondv1.Message{textMsg("h9", sessiondv1.Role_ROLE_USER, "writes go on")}}); err != nil {
		t.Errorf("AppendMessages to a healthy session: %v", err)
	}
	if _, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Alias: "new-after-damage"}); err != nil {
		t.Errorf("CreateSession after damage: %v", err)
	}
	if _, err := listSessions(ctx, c, &sessiondv1.ListSessionsRequest{}); err != nil {
		t.Errorf("ListSessions with a damaged session: %v", err)
	}
	hits, err := searchSessions(ctx, c, &sessiondv1.SearchSessionsRequest{Query: "fine"})
	if err != nil {
		t.Errorf("SearchSessions with a damaged session: %v", err)
	} else if len(hits) == 0 {
		t.Errorf("SearchSessions found nothing in the healthy session")
	}
	// The daemon is still up after all that.
	if d.Exited() {
		t.Fatal("sessiond exited after serving a damaged session")
	}
	if _, err := c.GetServerInfo(ctx, &sessiondv1.GetServerInfoRequest{}); err != nil {
		t.Errorf("GetServerInfo: %v", err)
	}
}

// flipMarkerBytes inverts one byte in the middle of every occurrence of
// marker in the files under dir and returns "path@offset" for each.
func flipMarkerBytes(t *testing.T, dir, marker string) []string {
	t.Helper()
	var (
		hits  []string
		files []string
	)
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return err
		}
		files = append(files, path)
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		changed := false
		for off := 0; ; {
			i := bytes.Index(b[off:], []byte(marker))
			if i < 0 {
				break
			}
			at := off + i + len(marker)/2
			b[at] ^= 0xff
			changed = true
			rel, _ := filepath.Rel(dir, path)
			hits = append(hits, fmt.Sprintf("%s@%d", rel, at))
			off += i + len(marker)
		}
		if changed {
			info, err := e.Info()
			if err != nil {
				return err
			}
			return os.WriteFile(path, b, info.Mode().Perm())
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk data dir: %v", err)
	}
	if len(hits) == 0 {
		t.Fatalf("marker %q is in none of the data dir's files: %q", marker, files)
	}
	return hits
}

// TestShutdownUnavailable checks SIGTERM's effect on clients: an open watch
// ends with UNAVAILABLE, the daemon exits 0 promptly, and later calls are
// UNAVAILABLE.
func TestShutdownUnavailable(t *testing.T) {
	d := startDaemon(t, t.TempDir(), "--shutdown-timeout", "5s")
	ctx := testContext(t, 60*time.Second)
	c := d.client(t)
	cr, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Alias: "w"})
	if err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	stream, err := c.WatchSession(ctx, &sessiondv1.WatchSessionRequest{Ref: byID("", cr.GetSession().GetId())})
	if err != nil {
		t.Fatalf("WatchSession: %v", err)
	}
	watchErr := make(chan error, 1)
	go func() {
		for {
			if _, err := stream.Recv(); err != nil {
				watchErr <- err
				return
			}
		}
	}()
	// Give the watch time to be established before the shutdown; were it
	// not yet, the test would still pass, checking less.
	time.Sleep(200 * time.Millisecond)

	start := time.Now()
	d.stop(t) // expects exit status 0
	if took := time.Since(start); took > 4*time.Second {
		t.Errorf("shutdown with an open watch took %v; watches should end at once, not at --shutdown-timeout", took)
	}
	select {
	case err := <-watchErr:
		wantCode(t, err, codes.Unavailable)
	case <-time.After(10 * time.Second):
		t.Fatal("watch still open 10s after the daemon exited")
	}
	callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = c.GetServerInfo(callCtx, &sessiondv1.GetServerInfoRequest{})
	wantCode(t, err, codes.Unavailable)
}

// writeLog records, for one client, which message ids the daemon
// acknowledged and which were sent without an answer.
type writeLog struct {
	acked   []string
	unacked map[string]bool // sent, but the call failed
	pending []*sessiondv1.Message
}

// messageFor makes the deterministic message of a client's seq-th write,
// so that a reader can check its content from its id alone.
func messageFor(client, seq int) *sessiondv1.Message {
	id := fmt.Sprintf("c%d-%06d", client, seq)
	return textMsg(id, sessiondv1.Role_ROLE_USER, contentFor(id, seq))
}

func contentFor(id string, seq int) string {
	return id + ":" + strings.Repeat("x", (seq*37)%700)
}

// appendLoop appends batches of one to three messages to ref until an
// append fails or stop is closed. It first retries the batch a previous
// cycle left without an answer, as a client SDK does: a retry must land
// exactly once whether or not the first attempt did.
func appendLoop(ctx context.Context, c sessiondv1.SessionStoreServiceClient, ref *sessiondv1.SessionRef, client int, seq *int, log *writeLog, stop <-chan struct{}, rng *rand.Rand, acks *atomic.Int64) (err error) {
	return appendLoopVia(ctx, unaryAppend(c), ref, client, seq, log, stop, rng, acks)
}

// appender sends one append and returns its error.
type appender func(ctx context.Context, req *sessiondv1.AppendMessagesRequest) error

func unaryAppend(c sessiondv1.SessionStoreServiceClient) appender {
	return func(ctx context.Context, req *sessiondv1.AppendMessagesRequest) error {
		_, err := c.AppendMessages(ctx, req)
		return err
	}
}

// streamAppend sends each append over one AppendStream call (on
// streamCtx), opened by the first, and waits for its answer: a per-request
// status is returned as a status error, and a broken stream fails the
// append.
func streamAppend(streamCtx context.Context, c sessiondv1.SessionStoreServiceClient) appender {
	var st grpc.BidiStreamingClient[sessiondv1.AppendStreamRequest, sessiondv1.AppendStreamResponse]
	return func(ctx context.Context, req *sessiondv1.AppendMessagesRequest) error {
		if st == nil {
			var err error
			if st, err = c.AppendStream(streamCtx); err != nil {
				return err
			}
		}
		if err := st.Send(&sessiondv1.AppendStreamRequest{Append: req}); err != nil {
			_, err = st.Recv() // the status the stream ended with
			return err
		}
		resp, err := st.Recv()
		if err != nil {
			return err
		}
		return sdk.AppendStreamError(resp)
	}
}

// appendLoopVia is appendLoop with appends sent by send.
func appendLoopVia(ctx context.Context, appendOne appender, ref *sessiondv1.SessionRef, client int, seq *int, log *writeLog, stop <-chan struct{}, rng *rand.Rand, acks *atomic.Int64) (err error) {
	send := func(batch []*sessiondv1.Message) error {
		callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		err := appendOne(callCtx, &sessiondv1.AppendMessagesRequest{Ref: ref, Messages: batch})
		if err != nil {
			log.pending = batch
			for _, m := range batch {
				log.unacked[m.GetId()] = true
			}
			return err
		}
		log.pending = nil
		acks.Add(int64(len(batch)))
		for _, m := range batch {
			log.acked = append(log.acked, m.GetId())
			delete(log.unacked, m.GetId())
		}
		return nil
	}
	if log.pending != nil {
		if err := send(log.pending); err != nil {
			return err
		}
	}
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		n := 1 + rng.IntN(3)
		batch := make([]*sessiondv1.Message, n)
		for i := range batch {
			*seq++
			batch[i] = messageFor(client, *seq)
		}
		if err := send(batch); err != nil {
			return err
		}
	}
}

// crashCheck tallies a verification of the written sessions.
type crashCheck struct {
	checked    int // acknowledged messages found as they should be
	lost       int // acknowledged messages missing
	duplicated int // message ids present more than once
	unackedIn  int // messages whose append failed but that landed (allowed once)
}

// verifyWrites loads every session and checks each client's writes: every
// acknowledged message present exactly once with its content, in the
// client's order, and no id present twice.
func verifyWrites(t *testing.T, ctx context.Context, c sessiondv1.SessionStoreServiceClient, sessionIDs []string, clientsPerSession int, logs []*writeLog) crashCheck {
	t.Helper()
	var res crashCheck
	for si, id := range sessionIDs {
		_, msgs, _, err := loadSession(ctx, c, &sessiondv1.LoadSessionRequest{Ref: byID("", id)})
		if err != nil {
			t.Fatalf("session %d is not loadable after restart: %v", si, err)
		}
		count := map[string]int{}
		pos := map[string]int{}
		for i, m := range msgs {
			count[m.GetId()]++
			pos[m.GetId()] = i
			var client, seq int
			if _, err := fmt.Sscanf(m.GetId(), "c%d-%06d", &client, &seq); err != nil || m.GetContent() != contentFor(m.GetId(), seq) {
				t.Errorf("session %d message %d: id %q content %.40q is not what any client wrote", si, i, m.GetId(), m.GetContent())
			}
		}
		for id, n := range count {
			if n > 1 {
				res.duplicated += n - 1
				t.Errorf("session %d: message %q present %d times", si, id, n)
			}
		}
		for ci := si * clientsPerSession; ci < (si+1)*clientsPerSession; ci++ {
			last := -1
			for _, id := range logs[ci].acked {
				p, ok := pos[id]
				if !ok {
					res.lost++
					t.Errorf("session %d: acknowledged message %q is missing", si, id)
					continue
				}
				res.checked++
				if p <= last {
					t.Errorf("session %d: client %d's acknowledged message %q is out of its order", si, ci, id)
				}
				last = p
			}
			for id := range logs[ci].unacked {
				if count[id] > 0 {
					res.unackedIn++
				}
			}
		}
	}
	return res
}

// streamedAcks counts the acknowledged writes of the streaming clients
// (the second half of logs).
func streamedAcks(logs []*writeLog) int {
	n := 0
	for _, l := range logs[len(logs)/2:] {
		n += len(l.acked)
	}
	return n
}

// createSessions creates n empty sessions aliased prefix-0, prefix-1, ...
// and returns their ids.
func createSessions(t *testing.T, ctx context.Context, c sessiondv1.SessionStoreServiceClient, prefix string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		r, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Alias: fmt.Sprintf("%s-%d", prefix, i)})
		if err != nil {
			t.Fatalf("CreateSession: %v", err)
		}
		ids[i] = r.GetSession().GetId()
	}
	return ids
}

// killDuringStart starts a daemon on dir and kills it after delay, whether
// or not it has finished starting.
func killDuringStart(t *testing.T, dir string, delay time.Duration) {
	t.Helper()
	cmd := exec.Command(sessiondBin, "--listen", "127.0.0.1:0", "--data-dir", dir, "--log-format", "json")
	cmd.Env = cleanEnv()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start sessiond: %v", err)
	}
	time.Sleep(delay)
	_ = cmd.Process.Kill()
	_ = cmd.Wait() // killed, or exited on its own: either is fine here
}

// TestSIGTERMDuringWrites sends SIGTERM while clients append: the daemon
// drains and exits 0, and after a restart every acknowledged write is
// there exactly once.
func TestSIGTERMDuringWrites(t *testing.T) {
	const sessions, clientsPerSession = 2, 2
	dir := t.TempDir()
	d := startDaemon(t, dir)
	ctx := testContext(t, 60*time.Second)
	c := d.client(t)
	ids := createSessions(t, ctx, c, "term", sessions)
	logs := make([]*writeLog, sessions*clientsPerSession)
	var (
		wg   sync.WaitGroup
		acks atomic.Int64
	)
	stop := make(chan struct{}) // never closed: the writers end at their first error
	for ci := range logs {
		logs[ci] = &writeLog{unacked: map[string]bool{}}
		wc := d.client(t)
		seq := 0
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(ci), 1))
			_ = appendLoop(ctx, wc, byID("", ids[ci/clientsPerSession]), ci, &seq, logs[ci], stop, rng, &acks)
		})
	}
	// SIGTERM once writes are flowing (bounded, for a slow machine).
	for deadline := time.Now().Add(10 * time.Second); acks.Load() < 100 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	d.stop(t)
	wg.Wait()

	d = restartDaemon(t, d)
	res := verifyWrites(t, ctx, d.client(t), ids, clientsPerSession, logs)
	t.Logf("SIGTERM during writes: %d acknowledged writes checked, %d lost, %d duplicated, %d unacknowledged that landed", res.checked, res.lost, res.duplicated, res.unackedIn)
	if res.checked == 0 {
		t.Error("no write was acknowledged before SIGTERM: the test checked nothing")
	}
}

// TestKill9DuringConcurrentWrites kills the daemon with SIGKILL at random
// moments while 8 clients append to 4 sessions with AppendMessages calls
// and 8 more to 4 other sessions over AppendStream, restarts it, and checks
// after every restart that every acknowledged message is present exactly
// once, every session loads, and a message whose append failed is present
// at most once. Clients retry their unanswered batch after each restart.
func TestKill9DuringConcurrentWrites(t *testing.T) {
	const (
		sessions          = 8 // the first half written unary, the second streamed
		clientsPerSession = 2
		minCycles         = 20
		budget            = 40 * time.Second // more cycles while time allows
		maxCycles         = 60
	)
	dir := t.TempDir()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	ctx := testContext(t, 120*time.Second)

	d := startDaemon(t, dir)
	c := d.client(t)
	ids := createSessions(t, ctx, c, "crash", sessions)
	logs := make([]*writeLog, sessions*clientsPerSession)
	seqs := make([]int, len(logs))
	var acks atomic.Int64 // appendLoop counts acknowledged writes here; this test reads the logs
	for i := range logs {
		logs[i] = &writeLog{unacked: map[string]bool{}}
	}

	start := time.Now()
	var (
		cycles     int
		startKills int
		total      crashCheck
		maxKillAt  time.Duration
	)
	for cycles < maxCycles && (cycles < minCycles || time.Since(start) < budget) {
		if cycles > 0 {
			// Now and then, crash the recovery itself: kill a daemon while
			// it opens the store, before it has announced itself.
			if rng.IntN(4) == 0 {
				killDuringStart(t, dir, time.Duration(rng.IntN(30))*time.Millisecond)
				startKills++
			}
			d = restartDaemon(t, d)
			res := verifyWrites(t, ctx, d.client(t), ids, clientsPerSession, logs)
			total.lost += res.lost
			total.duplicated += res.duplicated
			if t.Failed() {
				t.Fatalf("cycle %d: writes damaged (seed %d)", cycles, seed)
			}
		}
		cycles++

		var wg sync.WaitGroup
		stop := make(chan struct{})
		var conns []*grpc.ClientConn
		for ci := range logs {
			cc, err := grpc.NewClient(d.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatalf("dial: %v", err)
			}
			conns = append(conns, cc)
			crng := rand.New(rand.NewPCG(rng.Uint64(), uint64(ci)))
			send := unaryAppend(sessiondv1.NewSessionStoreServiceClient(cc))
			if ci >= len(logs)/2 {
				send = streamAppend(ctx, sessiondv1.NewSessionStoreServiceClient(cc))
			}
			wg.Go(func() {
				err := appendLoopVia(ctx, send, byID("", ids[ci/clientsPerSession]), ci, &seqs[ci], logs[ci], stop, crng, &acks)
				if err != nil && status.Code(err) != codes.Unavailable && status.Code(err) != codes.Canceled {
					// Only a dead daemon may fail a write here.
					t.Errorf("client %d: append failed with %v", ci, err)
				}
			})
		}
		killAt := time.Duration(5+rng.IntN(150)) * time.Millisecond
		maxKillAt = max(maxKillAt, killAt)
		time.Sleep(killAt)
		d.kill(t)
		close(stop)
		wg.Wait()
		for _, cc := range conns {
			_ = cc.Close()
		}
	}

	d = restartDaemon(t, d)
	res := verifyWrites(t, ctx, d.client(t), ids, clientsPerSession, logs)
	total.checked = res.checked
	total.unackedIn = res.unackedIn
	total.lost += res.lost
	total.duplicated += res.duplicated
	t.Logf("kill -9: %d cycles in %v (kills up to %v after start, %d more during start-up), %d clients on %d sessions (half streamed): %d acknowledged writes checked (%d streamed), %d lost, %d duplicated; %d unacknowledged writes landed (allowed once)",
		cycles, time.Since(start).Round(time.Millisecond), maxKillAt, startKills, len(logs), sessions, total.checked, streamedAcks(logs), total.lost, total.duplicated, total.unackedIn)
	if total.checked < cycles {
		t.Errorf("only %d acknowledged writes in %d cycles: the test checked too little", total.checked, cycles)
	}
	// Sanity of the checker itself: every client must have had writes acknowledged.
	for ci, l := range logs {
		if len(l.acked) == 0 {
			t.Errorf("client %d never had a write acknowledged", ci)
		}
	}
}
