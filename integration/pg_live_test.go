package integration

import (
	"context"
	"fmt"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage/postgres/pgtest"
)

// TestPostgresLiveTurnAcrossReplicas streams deltas into an open message
// through replica A while watchers on replica B, one from the start and one
// joining mid-message from a revision it loaded, each see every delta once,
// in order, one revision per delta; B's loads and searches see the text so
// far, and the finish reaches both watchers.
func TestPostgresLiveTurnAcrossReplicas(t *testing.T) {
	ctx := testContext(t, 60*time.Second)
	_, ca, cb, ref, start := startLiveTurn(t, ctx)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	early := watchFrom(t, wctx, cb, ref, start)

	// Each delta names its number, so a gap, a reordering or a repeat shows.
	const deltas = 200
	piece := func(i int) string { return fmt.Sprintf("d%05d ", i) }
	var text strings.Builder
	var midRev uint64
	var midText string
	var late sessiondv1.SessionStoreService_WatchSessionClient
	for i := range deltas {
		res, err := ca.AppendDelta(ctx, &sessiondv1.AppendDeltaRequest{Ref: ref, MessageId: "open", Offset: int64(text.Len()), Content: piece(i)})
		if err != nil {
			t.Fatalf("AppendDelta %d on A: %v", i, err)
		}
		text.WriteString(piece(i))
		if want := start + uint64(i) + 1; res.GetRevision() != want {
			t.Fatalf("delta %d: revision %d, want %d (one revision per delta)", i, res.GetRevision(), want)
		}
		if i == deltas/2 {
			// A reader on B mid-message: the text so far, at a revision it
			// then watches from.
			sess, msgs := mustLoad(t, ctx, cb, &sessiondv1.LoadSessionRequest{Ref: ref})
			midRev, midText = sess.GetRevision(), msgs[1].GetContent()
			if !strings.HasPrefix(text.String(), midText) || len(midText) < len(piece(0))*(i+1) {
				t.Fatalf("load on B mid-message: %d bytes %.40q, want at least the %d deltas acknowledged", len(midText), midText, i+1)
			}
		}
		if i == deltas/2+20 {
			// It watches from that revision some deltas later: a replay
			// of those from the kept history, then the live ones.
			late = watchFrom(t, wctx, cb, ref, midRev)
		}
	}

	// B's load and search see the text so far.
	_, msgs := mustLoad(t, ctx, cb, &sessiondv1.LoadSessionRequest{Ref: ref})
	if got := msgs[1]; got.GetContent() != text.String() || got.GetState() != sessiondv1.MessageState_MESSAGE_STATE_STREAMING {
		t.Fatalf("load on B: %v with %d bytes, want the open message with all %d", got.GetState(), len(got.GetContent()), text.Len())
	}
	search, err := cb.SearchSessions(ctx, &sessiondv1.SearchSessionsRequest{Query: piece(deltas - 1)})
	if err != nil {
		t.Fatalf("SearchSessions on B: %v", err)
	}
	hit, err := search.Recv()
	if err != nil || hit.GetSession().GetId() != ref.GetId() {
		t.Fatalf("search on B for the last delta: %v, %v; want a hit in the session", hit, err)
	}

	fin, err := ca.FinishMessage(ctx, &sessiondv1.FinishMessageRequest{Ref: ref, MessageId: "open"})
	if err != nil {
		t.Fatalf("FinishMessage on A: %v", err)
	}

	for _, w := range []struct {
		name string
		sub  sessiondv1.SessionStoreService_WatchSessionClient
		from uint64
		text string
	}{{"the early watcher", early, start, ""}, {"the watcher from mid-message", late, midRev, midText}} {
		name := w.name + " on B"
		if got := followDeltas(t, name, w.sub, w.from, w.text, fin.GetRevision()-1); got != text.String() {
			t.Fatalf("%s built %d bytes, want the %d streamed", name, len(got), text.Len())
		}
		nextFinished(t, name, w.sub, fin.GetRevision())
	}
}

// followDeltas reads a live turn's deltas from watch sub, which has had
// the events up to revision from (text: the open message's content then),
// up to revision to: one delta per revision, each at the end of the text
// so far. It returns the text built.
func followDeltas(t *testing.T, name string, sub sessiondv1.SessionStoreService_WatchSessionClient, from uint64, text string, to uint64) string {
	t.Helper()
	for rev := from; rev < to; {
		ev, err := sub.Recv()
		if err != nil {
			t.Fatalf("%s, after revision %d: %v", name, rev, err)
		}
		d := ev.GetDelta()
		if ev.GetType() != sessiondv1.EventType_EVENT_TYPE_DELTA || ev.GetRevision() != rev+1 || d.GetOffset() != int64(len(text)) {
			t.Fatalf("%s: %v at revision %d offset %d, want a delta at revision %d offset %d", name, ev.GetType(), ev.GetRevision(), d.GetOffset(), rev+1, len(text))
		}
		text += d.GetContent()
		rev = ev.GetRevision()
	}
	return text
}

// nextFinished checks that sub's next event is the finish at revision fin.
func nextFinished(t *testing.T, name string, sub sessiondv1.SessionStoreService_WatchSessionClient, fin uint64) {
	t.Helper()
	ev, err := sub.Recv()
	if err != nil || ev.GetType() != sessiondv1.EventType_EVENT_TYPE_FINISHED || ev.GetRevision() != fin {
		t.Fatalf("%s after the deltas: %v, %v; want FINISHED at revision %d", name, ev, err, fin)
	}
}

// TestPostgresLiveTurnWatcherHeldBack: a watcher on replica B whose
// replica reads nothing (stopped with SIGSTOP, as a loaded machine can
// hold it back) while replica A streams several hundred deltas, far more
// than the last storage.WatchHistory revisions every session keeps, still
// gets every delta once and in order once it reads again, with no reset:
// while a message is open its deltas stay in the history, and for a grace
// period after its finish, so that B may be held back across the finish
// too.
func TestPostgresLiveTurnWatcherHeldBack(t *testing.T) {
	for _, c := range []struct {
		name string
		// finishHeld finishes the turn while B is stopped.
		finishHeld bool
	}{{"finish after", false}, {"finish while held", true}} {
		t.Run(c.name, func(t *testing.T) {
			ctx := testContext(t, 120*time.Second)
			b, ca, cb, ref, start := startLiveTurn(t, ctx)
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			watch := watchFrom(t, wctx, cb, ref, start)

			if err := b.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			stopped := true
			resume := func() {
				if stopped {
					if err := b.Signal(syscall.SIGCONT); err != nil {
						t.Errorf("SIGCONT to B: %v", err)
					}
					stopped = false
				}
			}
			defer resume()
			const deltas = 600
			var text strings.Builder
			for i := range deltas {
				piece := fmt.Sprintf("d%05d ", i)
				if _, err := ca.AppendDelta(ctx, &sessiondv1.AppendDeltaRequest{Ref: ref, MessageId: "open", Offset: int64(text.Len()), Content: piece}); err != nil {
					t.Fatalf("AppendDelta %d on A: %v", i, err)
				}
				text.WriteString(piece)
			}
			finish := func() uint64 {
				fin, err := ca.FinishMessage(ctx, &sessiondv1.FinishMessageRequest{Ref: ref, MessageId: "open"})
				if err != nil {
					t.Fatalf("FinishMessage on A: %v", err)
				}
				return fin.GetRevision()
			}
			var fin uint64
			if c.finishHeld {
				fin = finish()
			}
			resume()
			const name = "the held-back watcher on B"
			if got := followDeltas(t, name, watch, start, "", start+deltas); got != text.String() {
				t.Fatalf("%s built %d bytes, want the %d streamed", name, len(got), text.Len())
			}
			if !c.finishHeld {
				fin = finish()
			}
			nextFinished(t, name, watch, fin)
		})
	}
}

// startLiveTurn starts two replicas, A and B, on one database, and
// creates through A a session holding a question and an open answer,
// message "open". It returns B, clients of A and B, the session and its
// revision.
func startLiveTurn(t *testing.T, ctx context.Context) (b *daemon, ca, cb sessiondv1.SessionStoreServiceClient, ref *sessiondv1.SessionRef, start uint64) {
	t.Helper()
	dsn := pgtest.Schema(t)
	a := startPostgresDaemon(t, dsn)
	b = startPostgresDaemon(t, dsn)
	ca, cb = a.client(t), b.client(t)
	created, err := ca.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Messages: []*sessiondv1.Message{
		textMsg("q", sessiondv1.Role_ROLE_USER, "tell me a story"),
		{Id: "open", Role: sessiondv1.Role_ROLE_ASSISTANT, State: sessiondv1.MessageState_MESSAGE_STATE_STREAMING}}})
	if err != nil {
		t.Fatalf("CreateSession on A: %v", err)
	}
	waitIndexed(t, ctx, dsn, created.GetSession().GetId())
	return b, ca, cb, byID("", created.GetSession().GetId()), created.GetSession().GetRevision()
}

// waitIndexed waits until a replica's search indexer has signed session
// id's messages up to its open one. Deltas add no message, so no indexer
// takes the session's row lock again during the turn, and none holds it
// in a replica a test then stops with SIGSTOP.
func waitIndexed(t *testing.T, ctx context.Context, dsn, id string) {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	for {
		var done bool
		if err := conn.QueryRow(ctx, `SELECT search_count >= message_count - (open_message_id IS NOT NULL)::int
			FROM sessions WHERE id = $1`, id).Scan(&done); err != nil {
			t.Fatalf("read session %s's search count: %v", id, err)
		}
		if done {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("session %s's messages were not indexed: %v", id, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// watchFrom starts a watch of ref on c after revision from.
func watchFrom(t *testing.T, ctx context.Context, c sessiondv1.SessionStoreServiceClient, ref *sessiondv1.SessionRef, from uint64) sessiondv1.SessionStoreService_WatchSessionClient {
	t.Helper()
	w, err := c.WatchSession(ctx, &sessiondv1.WatchSessionRequest{Ref: ref, FromRevision: from})
	if err != nil {
		t.Fatalf("WatchSession from revision %d: %v", from, err)
	}
	if _, err := w.Header(); err != nil && err != io.EOF {
		t.Fatalf("watch header: %v", err)
	}
	return w
}
