package storetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// Simulation sizes: modest, because every write of the file backend fsyncs.
const (
	simSessions = 3
	simWorkers  = 4
	simOps      = 30 // per worker
)

// simKind is what a simulated operation does.
type simKind int

const (
	simAppend      simKind = iota // new messages, no expected revision
	simAppendRetry                // the same batch again, as after a lost answer
	simUpdate                     // a new, unique title
	simSave                       // a loaded prefix plus new messages, a unique title
	simSaveRetry                  // the same save again
	simRewind                     // to a count at most the one last seen
)

func (k simKind) String() string {
	return [...]string{"append", "append-retry", "update", "save", "save-retry", "rewind"}[k]
}

// simOp is one operation a worker ran, with its answer.
type simOp struct {
	worker, seq, session int
	kind                 simKind
	msgs                 []*sessiondv1.Message // append: the batch; save: the whole list
	title                string                // update, save
	count                int64                 // rewind: messages to keep
	expected             uint64

	err      error
	revision uint64 // answered revision, when err is nil
	answered int64  // answered message count, when err is nil
	title2   string // answered title (update, save, rewind)
}

func (o *simOp) String() string {
	return fmt.Sprintf("w%d#%d %v on s%d (expected %d) -> rev %d, count %d, err %v", o.worker, o.seq, o.kind, o.session, o.expected, o.revision, o.answered, o.err)
}

// simState is the model of one session at one revision.
type simState struct {
	title string
	msgs  []*sessiondv1.Message // normalised: created_at cleared
}

// simRead is what a concurrent reader saw.
type simRead struct {
	session  int
	revision uint64
	title    string
	msgs     []*sessiondv1.Message
}

// normalise drops created_at, which the store fills in and the model does
// not know; the simulation never sets it.
func normalise(ms []*sessiondv1.Message) []*sessiondv1.Message {
	out := make([]*sessiondv1.Message, len(ms))
	for i, m := range ms {
		c := proto.Clone(m).(*sessiondv1.Message)
		c.CreatedAt = nil
		out[i] = c
	}
	return out
}

func sameMsgs(a, b []*sessiondv1.Message) bool {
	return slices.EqualFunc(a, b, func(x, y *sessiondv1.Message) bool { return proto.Equal(x, y) })
}

// testSimulation runs random concurrent operations on a few sessions, then
// replays every acknowledged operation in revision order against an
// in-memory model, and checks that the model explains every revision, every
// answer, every snapshot a concurrent reader saw, and the final state.
func testSimulation(t *testing.T, h *harness) {
	s := h.open(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("simulation seed %d", seed)

	refs := make([]storage.Ref, simSessions)
	for i := range refs {
		se := create(t, s, storage.CreateRequest{Namespace: nsA, Title: "start", Alias: fmt.Sprintf("sim-%d", i)})
		refs[i] = storage.Ref{Namespace: nsA, ID: se.ID}
	}

	var (
		mu    sync.Mutex // guards ops and reads
		ops   []*simOp
		reads []simRead
	)
	record := func(o *simOp) {
		mu.Lock()
		ops = append(ops, o)
		mu.Unlock()
	}
	fail := make(chan error, simWorkers*simOps*2)

	stopReader := make(chan struct{})
	var readerWG sync.WaitGroup
	readerWG.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stopReader:
				return
			default:
			}
			n := i % simSessions
			se, ms, err := s.Load(t.Context(), refs[n], storage.LoadOptions{})
			if err != nil {
				fail <- fmt.Errorf("reader: Load: %w", err)
				return
			}
			mu.Lock()
			reads = append(reads, simRead{n, se.Revision, se.Title, normalise(ms)})
			mu.Unlock()
			time.Sleep(time.Millisecond)
		}
	})

	var wg sync.WaitGroup
	for w := range simWorkers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for i := range simOps {
				if err := simStep(t, s, refs, rng, w, i, record); err != nil {
					fail <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(stopReader)
	readerWG.Wait()
	close(fail)
	for err := range fail {
		t.Error(err)
	}
	if t.Failed() {
		return
	}

	// Replay per session in revision order.
	for n, ref := range refs {
		var mine []*simOp
		for _, o := range ops {
			if o.session == n && o.err == nil {
				mine = append(mine, o)
			}
		}
		states, err := simReplay(mine)
		if err != nil {
			t.Errorf("session %d: %v\nits operations:\n%s", n, err, simDump(mine))
			continue
		}
		final := uint64(len(states))
		se, ms := loadAll(t, s, ref)
		last := states[final]
		if se.Revision != final || se.Title != last.title || se.MessageCount != int64(len(last.msgs)) || !sameMsgs(normalise(ms), last.msgs) {
			t.Errorf("session %d: store has revision %d, title %q, messages %v; model has revision %d, title %q, messages %v",
				n, se.Revision, se.Title, ids(ms), final, last.title, ids(last.msgs))
		}
		if se.Alias != fmt.Sprintf("sim-%d", n) {
			t.Errorf("session %d lost its alias: %q", n, se.Alias)
		}
		for _, r := range reads {
			if r.session != n {
				continue
			}
			st, ok := states[r.revision]
			if !ok || st.title != r.title || !sameMsgs(st.msgs, r.msgs) {
				t.Errorf("session %d: a reader saw revision %d with title %q and messages %v; the model has title %q and %v there",
					n, r.revision, r.title, ids(r.msgs), st.title, ids(st.msgs))
			}
		}
	}
	t.Logf("simulation: %d operations acknowledged or refused, %d snapshots read", len(ops), len(reads))
}

// simStep runs one random operation (and maybe its retry) and records it.
func simStep(t *testing.T, s *storage.Store, refs []storage.Ref, rng *rand.Rand, w, i int, record func(*simOp)) error {
	ctx := t.Context()
	n := rng.IntN(len(refs))
	ref := refs[n]
	newMsgs := func(k int) []*sessiondv1.Message {
		out := make([]*sessiondv1.Message, k)
		for j := range out {
			out[j] = msg(fmt.Sprintf("w%d-%d-%d", w, i, j), fmt.Sprintf("worker %d step %d part %d", w, i, j))
		}
		return out
	}
	op := &simOp{worker: w, seq: i, session: n}
	switch p := rng.IntN(100); {
	case p < 40:
		op.kind = simAppend
		op.msgs = newMsgs(1 + rng.IntN(2))
		res, err := s.Append(ctx, storage.AppendRequest{Ref: ref, Messages: op.msgs})
		op.err, op.revision, op.answered = err, res.Revision, res.MessageCount
		record(op)
		if err != nil {
			return fmt.Errorf("%v: a blind append must succeed", op)
		}
		if rng.IntN(3) == 0 {
			// Half the retries carry the revision the first attempt got,
			// which is stale as soon as anything else writes.
			retry := &simOp{worker: w, seq: i, session: n, kind: simAppendRetry, msgs: op.msgs}
			if rng.IntN(2) == 0 {
				retry.expected = op.revision
			}
			res, err := s.Append(ctx, storage.AppendRequest{Ref: ref, Messages: op.msgs, ExpectedRevision: retry.expected})
			retry.err, retry.revision, retry.answered = err, res.Revision, res.MessageCount
			record(retry)
			// A rewind or save may have removed part or all of the batch
			// in between, which the retry appends again; a stale expected
			// revision then refuses it.
			if err != nil && (retry.expected == 0 || !errors.Is(err, storage.ErrConflict)) {
				return fmt.Errorf("%v: unexpected error", retry)
			}
		}
	case p < 60:
		op.kind = simUpdate
		op.title = fmt.Sprintf("title by w%d step %d", w, i)
		if rng.IntN(2) == 0 {
			se, err := s.Get(ctx, ref)
			if err != nil {
				return fmt.Errorf("simulation: Get: %w", err)
			}
			op.expected = se.Revision
		}
		se, err := s.Update(ctx, storage.UpdateRequest{Ref: ref, ExpectedRevision: op.expected, Fields: storage.UpdateTitle, Title: op.title})
		op.err = err
		if err == nil {
			op.revision, op.answered, op.title2 = se.Revision, se.MessageCount, se.Title
		}
		record(op)
		if err != nil && (op.expected == 0 || !errors.Is(err, storage.ErrConflict)) {
			return fmt.Errorf("%v: unexpected error", op)
		}
	case p < 80:
		op.kind = simSave
		se, ms, err := s.Load(ctx, ref, storage.LoadOptions{})
		if err != nil {
			return fmt.Errorf("simulation: Load: %w", err)
		}
		keep := rng.IntN(len(ms) + 1)
		op.msgs = append(ms[:keep:keep], newMsgs(rng.IntN(2))...)
		op.title = fmt.Sprintf("saved by w%d step %d", w, i)
		op.expected = se.Revision
		req := storage.SaveRequest{Ref: ref, ExpectedRevision: op.expected, Title: op.title, Messages: op.msgs}
		saved, err := s.Save(ctx, req)
		op.err = err
		if err == nil {
			op.revision, op.answered, op.title2 = saved.Revision, saved.MessageCount, saved.Title
		}
		record(op)
		if err != nil {
			if !errors.Is(err, storage.ErrConflict) {
				return fmt.Errorf("%v: unexpected error", op)
			}
			return nil
		}
		if rng.IntN(3) == 0 {
			retry := &simOp{worker: w, seq: i, session: n, kind: simSaveRetry, msgs: op.msgs, title: op.title, expected: op.expected}
			saved, err := s.Save(ctx, req)
			retry.err = err
			if err == nil {
				retry.revision, retry.answered, retry.title2 = saved.Revision, saved.MessageCount, saved.Title
			}
			record(retry)
			// A retry is a no-op while the save is still the current
			// state, and a revision conflict once something else wrote.
			if err != nil && !errors.Is(err, storage.ErrConflict) {
				return fmt.Errorf("%v: unexpected error", retry)
			}
		}
	default:
		op.kind = simRewind
		se, err := s.Get(ctx, ref)
		if err != nil {
			return fmt.Errorf("simulation: Get: %w", err)
		}
		op.expected = se.Revision
		op.count = rng.Int64N(se.MessageCount + 1)
		got, err := s.Rewind(ctx, storage.RewindRequest{Ref: ref, ExpectedRevision: op.expected, MessageCount: op.count})
		op.err = err
		if err == nil {
			op.revision, op.answered, op.title2 = got.Revision, got.MessageCount, got.Title
		}
		record(op)
		// Which of a stale revision and a count beyond the session is
		// reported first is the backend's choice.
		if err != nil && !errors.Is(err, storage.ErrConflict) && !errors.Is(err, storage.ErrInvalid) {
			return fmt.Errorf("%v: unexpected error", op)
		}
	}
	return nil
}

// definite reports whether a successful op certainly changed the session:
// its messages or title are new, so it cannot have been a no-op.
func (o *simOp) definite() bool {
	return o.kind == simAppend || o.kind == simUpdate || o.kind == simSave
}

// apply returns the state after o, when o changed the session, or an error
// if o could not have changed st.
func (o *simOp) apply(st simState) (simState, error) {
	next := simState{title: st.title, msgs: slices.Clone(st.msgs)}
	switch o.kind {
	case simAppend:
		for _, m := range o.msgs {
			if slices.ContainsFunc(st.msgs, func(x *sessiondv1.Message) bool { return x.GetId() == m.GetId() }) {
				return st, fmt.Errorf("appends %s, already in the session", m.GetId())
			}
		}
		next.msgs = append(next.msgs, normalise(o.msgs)...)
	case simAppendRetry:
		// Only the messages not in the session are appended.
		for _, m := range normalise(o.msgs) {
			if !slices.ContainsFunc(st.msgs, func(x *sessiondv1.Message) bool { return x.GetId() == m.GetId() }) {
				next.msgs = append(next.msgs, m)
			}
		}
		if len(next.msgs) == len(st.msgs) {
			return st, errors.New("a retry of messages all in the session cannot change it")
		}
	case simUpdate:
		next.title = o.title
	case simSave:
		next.title, next.msgs = o.title, normalise(o.msgs)
	case simRewind:
		if o.count >= int64(len(st.msgs)) {
			return st, fmt.Errorf("rewinds to %d of %d messages", o.count, len(st.msgs))
		}
		next.msgs = next.msgs[:o.count]
	case simSaveRetry:
		return st, errors.New("a retried save cannot change anything")
	}
	return next, nil
}

// noop reports whether o, run against st, is a no-op.
func (o *simOp) noop(st simState) bool {
	switch o.kind {
	case simAppendRetry:
		for _, m := range normalise(o.msgs) {
			i := slices.IndexFunc(st.msgs, func(x *sessiondv1.Message) bool { return x.GetId() == m.GetId() })
			if i < 0 || !proto.Equal(st.msgs[i], m) {
				return false
			}
		}
		return true
	case simRewind:
		return o.count == int64(len(st.msgs))
	case simSaveRetry:
		return st.title == o.title && sameMsgs(st.msgs, normalise(o.msgs))
	}
	return false
}

// checkAnswer checks what o answered against the state at its revision.
func (o *simOp) checkAnswer(st simState) error {
	if o.answered != int64(len(st.msgs)) {
		return fmt.Errorf("%v: answered %d messages, the model has %d", o, o.answered, len(st.msgs))
	}
	if o.kind != simAppend && o.kind != simAppendRetry && o.title2 != st.title {
		return fmt.Errorf("%v: answered title %q, the model has %q", o, o.title2, st.title)
	}
	return nil
}

// simReplay explains one session's acknowledged operations: every revision
// from 2 to the last was made by exactly one of them, and every other one
// answering that revision was a no-op there. It returns the model's state
// at every revision.
func simReplay(ops []*simOp) (map[uint64]simState, error) {
	byRev := make(map[uint64][]*simOp)
	var last uint64 = 1
	for _, o := range ops {
		byRev[o.revision] = append(byRev[o.revision], o)
		last = max(last, o.revision)
	}
	states := map[uint64]simState{1: {title: "start"}}
	for _, o := range byRev[1] {
		if !o.noop(states[1]) {
			return nil, fmt.Errorf("%v: answered revision 1 but is no no-op there", o)
		}
	}
	for rev := uint64(2); rev <= last; rev++ {
		prev := states[rev-1]
		claim := byRev[rev]
		var maker *simOp
		for _, o := range claim {
			if o.definite() {
				if maker != nil {
					return nil, fmt.Errorf("revision %d answered to two writes that both changed the session:\n  %v\n  %v", rev, maker, o)
				}
				maker = o
			}
		}
		candidates := claim
		if maker != nil {
			candidates = []*simOp{maker}
		}
		var explained bool
		var why []string
	next:
		for _, c := range candidates {
			st, err := c.apply(prev)
			if err != nil {
				why = append(why, fmt.Sprintf("%v: %v", c, err))
				continue
			}
			for _, o := range claim {
				if o != c && !o.noop(st) {
					why = append(why, fmt.Sprintf("if %v made it, %v is no no-op", c, o))
					continue next
				}
			}
			for _, o := range claim {
				if err := o.checkAnswer(st); err != nil {
					return nil, fmt.Errorf("revision %d: %w", rev, err)
				}
			}
			states[rev], explained = st, true
			break
		}
		if !explained {
			return nil, fmt.Errorf("nothing explains revision %d (lost, doubled or unacknowledged write?): %v", rev, why)
		}
	}
	return states, nil
}

func simDump(ops []*simOp) string {
	sorted := slices.Clone(ops)
	slices.SortStableFunc(sorted, func(a, b *simOp) int { return int(a.revision) - int(b.revision) })
	var out []byte
	for _, o := range sorted {
		out = fmt.Appendf(out, "  %v\n", o)
	}
	return string(out)
}
