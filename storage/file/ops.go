package file

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/protobuf/proto"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// now returns the current time, strictly after prev so that every change
// moves updated_at forward even on a coarse or stepped-back clock.
func now(prev time.Time) time.Time {
	t := time.Now().UTC()
	if !t.After(prev) {
		t = prev.Add(time.Microsecond)
	}
	return t
}

func metaEqual(a, b *storage.Session) bool {
	pa, pb := a.Parent, b.Parent
	return a.ID == b.ID && a.Namespace == b.Namespace && a.Alias == b.Alias && a.Title == b.Title && a.TitleDerived == b.TitleDerived &&
		a.Summary == b.Summary && a.CreatedAt.Equal(b.CreatedAt) && a.UpdatedAt.Equal(b.UpdatedAt) &&
		a.Revision == b.Revision && a.MessageCount == b.MessageCount &&
		storage.SameTally(a.Tally, b.Tally) && a.ExpireAfter == b.ExpireAfter &&
		maps.Equal(a.Metadata, b.Metadata) && maps.Equal(a.Labels, b.Labels) &&
		(pa == nil) == (pb == nil) && (pa == nil || *pa == *pb)
}

func unmarshalMessage(id string, b []byte) (*sessiondv1.Message, error) {
	m := new(sessiondv1.Message)
	if err := proto.Unmarshal(b, m); err != nil {
		return nil, damage(id, fmt.Errorf("stored message: %v", err))
	}
	return m, nil
}

// storedAt reads v's messages for the shared rule functions.
func (v *view) storedAt(i int) (*sessiondv1.Message, error) {
	return unmarshalMessage(v.meta.ID, v.at(i))
}

// Create makes a session at revision req.Revision.
func (s *Store) Create(ctx context.Context, req storage.CreateRequest, msgs storage.Messages) (*storage.Session, error) {
	t := now(time.Time{})
	enc := msgs.Encoded
	created := t
	if !req.CreatedAt.IsZero() {
		created = req.CreatedAt.UTC()
		if created.After(t) {
			t = created
		}
	}
	meta := &storage.Session{
		ID: req.ID, Namespace: req.Namespace, Alias: req.Alias, Title: req.Title, TitleDerived: req.TitleDerived, Summary: req.Summary,
		CreatedAt: created, UpdatedAt: t, Revision: max(req.Revision, 1), MessageCount: int64(len(enc)),
		Metadata: maps.Clone(req.Metadata), Labels: maps.Clone(req.Labels), Tally: msgs.Tally, ExpireAfter: req.ExpireAfter,
	}
	if req.Parent != nil {
		p := *req.Parent
		meta.Parent = &p
	}
	return s.create(ctx, meta, enc, nil, &createRetry{req, msgs}, req.ID != "")
}

// createRetry is a create with a client-chosen id, to compare with the
// session that has the id.
type createRetry struct {
	req  storage.CreateRequest
	msgs storage.Messages
}

// create reserves the id and alias, writes the files, and publishes the
// session. retry, when set, is the request to compare an existing id with.
//
// With fixedID, meta.ID is the caller's and a taken id is ErrAlreadyExists
// (or, when retry is set and matches, the existing session); otherwise a
// fresh UUIDv7 is drawn.
func (s *Store) create(ctx context.Context, meta *storage.Session, enc [][]byte, cs []storage.StoredCompaction, retry *createRetry, fixedID bool) (*storage.Session, error) {
	ids, err := indexIDs(enc)
	if err != nil {
		return nil, fmt.Errorf("file: create session: %w", err)
	}
	for range 100 {
		if !fixedID {
			u, err := uuid.NewV7()
			if err != nil {
				return nil, fmt.Errorf("file: new session id: %w", err)
			}
			meta.ID = u.String()
		}
		e := &entry{id: meta.ID}
		e.wmu.Lock()
		s.mu.Lock()
		if old := s.byID[meta.ID]; old != nil {
			s.mu.Unlock()
			e.wmu.Unlock()
			if !fixedID {
				continue // a fresh id collided: draw again
			}
			if retry == nil {
				return nil, fmt.Errorf("file: session %s: %w", meta.ID, storage.ErrAlreadyExists)
			}
			got, err := s.createRetry(ctx, old, retry)
			if errors.Is(err, errRetry) {
				continue
			}
			return got, err
		}
		n := s.nsFor(meta.Namespace)
		if meta.Alias != "" && n.byAlias[meta.Alias] != nil {
			s.mu.Unlock()
			e.wmu.Unlock()
			return nil, storage.AliasInUse(meta.Namespace, meta.Alias)
		}
		// Reserve id and alias; e.meta stays nil (invisible) until durable.
		s.byID[meta.ID] = e
		if meta.Alias != "" {
			n.byAlias[meta.Alias] = e
		}
		s.mu.Unlock()

		j, err := s.createFiles(meta, enc, cs)
		if err != nil {
			s.mu.Lock()
			e.gone = true
			delete(s.byID, meta.ID)
			n.release(meta.Alias, e)
			s.mu.Unlock()
			e.wmu.Unlock()
			return nil, fmt.Errorf("file: create session %s: %w", meta.ID, err)
		}
		e.j, e.gen, e.ids = j, 1, ids
		e.view.Store(newView(meta, enc[:len(enc):len(enc)], cs))
		s.setMeta(e, meta)
		s.touch(e)
		s.unlock(e)
		s.noteChange() // unknown to the last checkpoint: rescanned after a crash
		return cloneMeta(meta), nil
	}
	return nil, fmt.Errorf("file: create keeps colliding: %w", storage.ErrAlreadyExists)
}

var errRetry = errors.New("retry")

// createRetry answers a create whose client-chosen id exists: the session
// itself if the create is an exact retry, else ErrAlreadyExists.
func (s *Store) createRetry(_ context.Context, e *entry, retry *createRetry) (*storage.Session, error) {
	exists := fmt.Errorf("file: session %s: %w", retry.req.ID, storage.ErrAlreadyExists)
	e.wmu.Lock() // waits for a create in progress to finish
	defer s.unlock(e)
	s.mu.RLock()
	meta, gone, damaged := e.meta, e.gone, e.damaged
	s.mu.RUnlock()
	if gone {
		return nil, errRetry
	}
	if meta == nil || damaged != nil {
		return nil, exists
	}
	var v *view
	same, err := storage.SameCreate(meta, retry.req, retry.msgs, func(i int) (*sessiondv1.Message, error) {
		if v == nil {
			if err := s.loadLocked(e); err != nil {
				return nil, err
			}
			v = e.view.Load()
		}
		return v.storedAt(i)
	})
	if err != nil {
		return nil, err
	}
	if !same {
		return nil, exists
	}
	return cloneMeta(meta), nil
}

// Get returns a session's metadata.
func (s *Store) Get(ctx context.Context, ref storage.Ref) (*storage.Session, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	e, err := s.resolveLocked(ref)
	if err != nil {
		return nil, err
	}
	if e.damaged != nil {
		return nil, e.damaged
	}
	return cloneMeta(e.meta), nil
}

// readView returns a consistent state of ref's session, loading it if
// needed.
func (s *Store) readView(ref storage.Ref) (*view, error) {
	e, err := s.resolve(ref)
	if err != nil {
		return nil, err
	}
	if v := e.view.Load(); v != nil {
		s.reads.hits.Add(1)
		return v, nil
	}
	return withLoaded(s, ref, func(_ *entry, v *view) (*view, error) { return v, nil })
}

// withLoaded runs fn like withSession, with the session's state in memory:
// v is its current view. It returns what fn returns.
func withLoaded[T any](s *Store, ref storage.Ref, fn func(e *entry, v *view) (T, error)) (T, error) {
	var out T
	err := s.withSession(ref, func(e *entry) error {
		err := s.loadLocked(e)
		if err == nil {
			out, err = fn(e, e.view.Load())
		}
		return err
	})
	return out, err
}

// replaceWrite records e as changed, makes m and msgs its new state, and
// tells watchers. what names the operation for errors. Caller holds e.wmu
// and has loaded e.
func (s *Store) replaceWrite(e *entry, what string, m *storage.Session, msgs [][]byte, cs []storage.StoredCompaction) error {
	s.beginWrite(e)
	// A new generation has no journal frame to name the session in the
	// log: a touch does, durably before the files change, so that an Open
	// after a crash does not trust the last checkpoint's metadata for it.
	if err := s.walCommit(&walReq{rec: walRec{kind: walKindTouch, id: e.id}}); err != nil {
		return fmt.Errorf("file: %s session %s: %w", what, e.id, err)
	}
	if err := s.replaceLocked(e, m, msgs, cs); err != nil {
		return fmt.Errorf("file: %s session %s: %w", what, e.id, err)
	}
	s.broker.Publish(e.id, storage.Event{Type: storage.EventReplaced, Revision: m.Revision, Session: cloneMeta(m)})
	return nil
}

// Load returns a session's metadata and the selected messages.
func (s *Store) Load(ctx context.Context, ref storage.Ref, opts storage.LoadOptions) (*storage.Session, []*sessiondv1.Message, error) {
	v, err := s.readView(ref)
	if err != nil {
		return nil, nil, err
	}
	summary, from, to := v.bounds(opts)
	out := make([]*sessiondv1.Message, 0, to-from+int64(len(summary)))
	err = v.window(opts, func(m *sessiondv1.Message) error {
		out = append(out, m)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return cloneMeta(v.meta), out, nil
}

var _ storage.LoadStreamer = (*Store)(nil)

// LoadStream is Load from the session's current view (an immutable
// snapshot of its encoded messages, shared with the cache and other
// readers), decoding one message at a time as each asks for it.
func (s *Store) LoadStream(ctx context.Context, ref storage.Ref, opts storage.LoadOptions, start func(*storage.Session) error, each func(*sessiondv1.Message) error) error {
	v, err := s.readView(ref)
	if err != nil {
		return err
	}
	if err := start(cloneMeta(v.meta)); err != nil {
		return err
	}
	return v.window(opts, each)
}

// bounds returns the encoded summary that starts the window opts selects
// (nil if none) and the range of v.msgs that follows.
func (v *view) bounds(opts storage.LoadOptions) (summary []byte, from, to int64) {
	n := int64(len(v.msgs))
	if opts.View != storage.ViewContext || len(v.cs) == 0 {
		from, to = opts.Window(n)
		return nil, from, to
	}
	latest := v.cs[len(v.cs)-1]
	withSummary, from, to := opts.ContextWindow(n, latest.ThroughCount)
	if withSummary {
		summary = latest.Summary
	}
	return summary, from, to
}

// window calls each with the messages of v that opts selects, in order,
// decoding one at a time: in the context view, the latest compaction's
// summary first when the window starts there.
func (v *view) window(opts storage.LoadOptions, each func(*sessiondv1.Message) error) error {
	emit := func(b []byte) error {
		m, err := unmarshalMessage(v.meta.ID, b)
		if err != nil {
			return err
		}
		return each(m)
	}
	summary, from, to := v.bounds(opts)
	if summary != nil {
		if err := emit(summary); err != nil {
			return err
		}
	}
	for i := from; i < to; i++ {
		if err := emit(v.at(int(i))); err != nil {
			return err
		}
	}
	return nil
}

// List calls yield for each matching session in list order. It collects a
// page under the read lock, then yields it with no lock held. It yields the
// index's own metadata, which is never modified once published: a listing
// copies nothing.
func (s *Store) List(ctx context.Context, opts storage.ListOptions, yield func(*storage.Session) error) error {
	return s.walkList(ctx, &opts, func(_ *entry, m *storage.Session) error { return yield(m) })
}

// walkList calls each for every session matching opts in list order, with
// the session's metadata as it was when its page was collected (shared:
// each must not modify it). It collects a page under the read lock, then
// walks it with no lock held.
func (s *Store) walkList(ctx context.Context, opts *storage.ListOptions, each func(*entry, *storage.Session) error) error {
	var cur listKey // the last session looked at, when started
	started := opts.After != nil
	if started {
		cur = listKey{t: opts.After.UpdatedAt, id: opts.After.ID}
	}
	sent := int64(0)
	type item struct {
		e *entry
		m *storage.Session
	}
	page := make([]item, 0, 256)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		page = page[:0]
		s.mu.RLock()
		done := true
		if n := s.ns[opts.Namespace]; n != nil {
			i := len(n.list) - 1
			if started {
				i = n.search(cur) - 1
			}
			for ; i >= 0; i-- {
				e := n.list[i]
				m := e.meta
				if !opts.UpdatedAfter.IsZero() && !m.UpdatedAt.After(opts.UpdatedAfter) {
					break // all older from here on
				}
				if len(page) == cap(page) {
					done = false
					break
				}
				cur, started = e.key, true
				if matches(m, opts) {
					page = append(page, item{e, m})
				}
			}
		}
		s.mu.RUnlock()
		for _, it := range page {
			if opts.Limit > 0 && sent >= opts.Limit {
				return nil
			}
			if err := each(it.e, it.m); err != nil {
				return err
			}
			sent++
		}
		if done || (opts.Limit > 0 && sent >= opts.Limit) {
			return nil
		}
	}
}

// Expired yields the sessions past their idle time to live, from the
// in-memory index (no file is read): a walk of every session's metadata,
// which the sweeper's interval keeps rare.
func (s *Store) Expired(ctx context.Context, opts storage.ExpiredOptions, yield func(*storage.Session) error) error {
	return s.scanIndex(opts.Limit, opts.Expires, yield)
}

// scanIndex yields copies of the sessions of the in-memory index that match
// (at most limit of them, 0 for all), collected under the read lock and
// yielded after it. No file is read.
func (s *Store) scanIndex(limit int64, match func(*storage.Session) bool, yield func(*storage.Session) error) error {
	var found []*storage.Session
	s.mu.RLock()
	for _, n := range s.ns {
		for _, e := range n.list {
			if limit > 0 && int64(len(found)) >= limit {
				break
			}
			if match(e.meta) {
				found = append(found, e.meta)
			}
		}
	}
	s.mu.RUnlock()
	for _, m := range found {
		if err := yield(cloneMeta(m)); err != nil {
			return err
		}
	}
	return nil
}

func matches(m *storage.Session, o *storage.ListOptions) bool {
	if !o.UpdatedBefore.IsZero() && !m.UpdatedAt.Before(o.UpdatedBefore) {
		return false
	}
	if o.AliasPrefix != "" && (m.Alias == "" || !strings.HasPrefix(m.Alias, o.AliasPrefix)) {
		return false
	}
	for k, v := range o.Labels {
		if got, ok := m.Labels[k]; !ok || got != v {
			return false
		}
	}
	return o.Model == "" || slices.Contains(m.Models, o.Model)
}

// Save replaces a session's messages, title, summary and metadata.
func (s *Store) Save(ctx context.Context, req storage.SaveRequest, msgs storage.Messages) (*storage.Session, error) {
	ref := req.Ref
	enc := msgs.Encoded
	var raced error // a create that lost a race, to answer if the winner is not ours to save into
	for range 10 {
		out, err := withLoaded(s, ref, func(e *entry, v *view) (*storage.Session, error) {
			if noop, err := storage.SameSave(v.meta, req, msgs, v.storedAt); err != nil {
				return nil, err
			} else if noop {
				return cloneMeta(v.meta), nil
			}
			if err := storage.CheckRevision(e.id, req.ExpectedRevision, v.meta.Revision); err != nil {
				return nil, err
			}
			m := cloneMeta(v.meta)
			m.Title, m.TitleDerived, m.Summary, m.Metadata, m.Tally = req.Title, req.TitleDerived, req.Summary, maps.Clone(req.Metadata), msgs.Tally
			m.MessageCount, m.Revision, m.UpdatedAt = int64(len(enc)), m.Revision+1, now(v.meta.UpdatedAt)
			m.Compaction = nil // the compactions' ranges went with the messages
			if err := s.replaceWrite(e, "save", m, enc, nil); err != nil {
				return nil, err
			}
			return cloneMeta(m), nil
		})
		if !errors.Is(err, storage.ErrNotFound) || !req.CreateIfMissing {
			return out, err
		}
		if raced != nil {
			return nil, raced
		}
		t := now(time.Time{})
		meta := &storage.Session{
			ID: ref.ID, Namespace: ref.Namespace, Alias: ref.Alias, Title: req.Title, TitleDerived: req.TitleDerived, Summary: req.Summary,
			CreatedAt: t, UpdatedAt: t, Revision: 1, MessageCount: int64(len(enc)), Metadata: maps.Clone(req.Metadata),
			Tally: msgs.Tally,
		}
		if req.ExpectedRevision != 0 {
			return nil, fmt.Errorf("save with expected revision %d creates nothing: %w", req.ExpectedRevision, storage.ErrConflict)
		}
		out, err = s.create(ctx, meta, enc, nil, nil, ref.ID != "")
		if err == nil {
			return out, nil
		}
		if (errors.Is(err, storage.ErrAliasInUse) && ref.Alias != "") || (errors.Is(err, storage.ErrAlreadyExists) && ref.ID != "") {
			raced = err
			continue // created by someone else meanwhile: save into it
		}
		return nil, err
	}
	return nil, fmt.Errorf("save of %v keeps racing creates: %w", ref, storage.ErrConflict)
}

// replaceLocked writes a whole new state (save, rewind, fold) and publishes
// it to readers. Caller holds e.wmu and has loaded e.
func (s *Store) replaceLocked(e *entry, m *storage.Session, msgs [][]byte, cs []storage.StoredCompaction) error {
	msgs = msgs[:len(msgs):len(msgs)] // later appends must not write into a reader's array
	if err := s.rewriteLocked(e, m, msgs, cs); err != nil {
		return err
	}
	ids, err := indexIDs(msgs)
	if err != nil {
		return damage(e.id, err)
	}
	e.ids = ids
	e.view.Store(newView(m, msgs, cs))
	s.setMeta(e, m)
	s.touch(e)
	return nil
}

// encBufs holds commit frame encode buffers for reuse; encKeep bounds the
// size of one kept.
var encBufs = sync.Pool{New: func() any { return new([]byte) }}

const encKeep = 64 << 10

// appendOp is one Append waiting for a group commit.
type appendOp struct {
	ctx  context.Context
	ref  storage.Ref
	exp  uint64
	msgs storage.Messages
	done bool // set under the session's wmu
	res  storage.AppendResult
	err  error
}

// Append adds messages atomically, sharing one journal flush with the
// appends to the same session that are waiting at that moment (group
// commit): the first to get the session's lock writes everyone's records
// in one frame with one fdatasync.
func (s *Store) Append(ctx context.Context, req storage.AppendRequest, msgs storage.Messages) (storage.AppendResult, error) {
	ref := req.Ref
	op := &appendOp{ctx: ctx, ref: ref, exp: req.ExpectedRevision, msgs: msgs}
	for range 100 {
		e, err := s.resolve(ref)
		if err != nil {
			return storage.AppendResult{}, err
		}
		op.done, op.err = false, nil
		e.qmu.Lock()
		e.queue = append(e.queue, op)
		e.qmu.Unlock()
		e.wmu.Lock()
		if !op.done {
			e.qmu.Lock()
			batch := e.queue
			e.queue = nil
			e.qmu.Unlock()
			s.commitAppends(e, batch)
			// Hand the batch's array back for the next append to queue in,
			// unless one already queued in a new array.
			clear(batch)
			e.qmu.Lock()
			if e.queue == nil {
				e.queue = batch[:0]
			}
			e.qmu.Unlock()
		}
		s.unlock(e)
		if errors.Is(op.err, errRetry) {
			continue
		}
		return op.res, op.err
	}
	return storage.AppendResult{}, fmt.Errorf("append to %v keeps racing renames: %w", ref, storage.ErrConflict)
}

// commitAppends applies a batch of appends to e in order, with one journal
// write and one fdatasync for all that change the session. Caller holds
// e.wmu.
func (s *Store) commitAppends(e *entry, batch []*appendOp) {
	finish := func(op *appendOp, res storage.AppendResult, err error) {
		op.res, op.err, op.done = res, err, true
	}
	// Each op must still name e: a rename or delete may have come between
	// its lookup and now.
	s.mu.RLock()
	live := batch[:0] // batch is this call's own: filtered in place
	for _, op := range batch {
		if got, err := s.resolveLocked(op.ref); err != nil {
			finish(op, storage.AppendResult{}, err)
		} else if got != e {
			finish(op, storage.AppendResult{}, errRetry)
		} else {
			live = append(live, op)
		}
	}
	s.mu.RUnlock()
	if len(live) == 0 {
		return
	}
	if err := s.loadLocked(e); err != nil {
		for _, op := range live {
			finish(op, storage.AppendResult{}, err)
		}
		return
	}
	v := e.view.Load()
	meta := *v.meta
	msgs := v.all()
	type change struct {
		op   *appendOp
		meta storage.Session
		msgs []*sessiondv1.Message // the op's new messages
	}
	// Most batches hold an append or two: their records and changes stay
	// on the stack.
	var recBuf [4]record
	var changeBuf [2]change
	var addedBuf [4]string
	recs, changes := recBuf[:0], changeBuf[:0]
	// The batch's new ids go into e.ids at once, so that a later append
	// of the batch finds them; added lists them to take back should the
	// write fail.
	added := addedBuf[:0]
	for _, op := range live {
		if err := op.ctx.Err(); err != nil {
			finish(op, storage.AppendResult{}, err)
			continue
		}
		fresh, err := storage.CheckAppend(e.id, op.msgs, op.exp, meta.Revision, meta.Tally, func(id string) (*sessiondv1.Message, bool, error) {
			j, ok := e.ids[id]
			if !ok {
				return nil, false, nil
			}
			m, err := unmarshalMessage(e.id, msgs[j])
			return m, err == nil, err
		})
		if err != nil {
			finish(op, storage.AppendResult{}, err)
			continue
		}
		if len(fresh.Prepared) == 0 { // a retry of an append that landed
			finish(op, storage.AppendResult{Revision: meta.Revision, MessageCount: meta.MessageCount}, nil)
			continue
		}
		enc := fresh.Encoded
		meta.Tally = fresh.Tally
		storage.DeriveTitle(&meta, fresh.Prepared)
		meta.Revision++
		meta.MessageCount += int64(len(enc))
		meta.UpdatedAt = now(meta.UpdatedAt)
		for i, p := range fresh.Prepared {
			e.ids[p.GetId()] = len(msgs) + i
			added = append(added, p.GetId())
		}
		msgs = append(msgs, enc...)
		recs = append(recs, record{kind: recAppend, rev: meta.Revision, updatedAt: meta.UpdatedAt, msgs: enc})
		changes = append(changes, change{op: op, meta: meta, msgs: fresh.Prepared})
	}
	if len(recs) == 0 {
		return
	}
	s.beginWrite(e)
	bp := encBufs.Get().(*[]byte)
	frame := encodeCommitInto(*bp, recs)
	err := s.writeJournal(e, frame, len(changes))
	if cap(frame) <= encKeep {
		*bp = frame // the WAL has copied it: free to reuse
		encBufs.Put(bp)
	}
	if err != nil {
		for _, id := range added {
			delete(e.ids, id)
		}
		err = fmt.Errorf("file: append to session %s: %w", e.id, err)
		for _, c := range changes {
			finish(c.op, storage.AppendResult{}, err)
		}
		return
	}
	final := meta
	e.view.Store(&view{meta: &final, msgs: msgs, size: v.size + msgsSize(msgs[len(v.msgs):]), cs: v.cs})
	s.setMeta(e, &final)
	for _, c := range changes {
		s.broker.PublishBuilt(e.id, func() storage.Event {
			return storage.Event{Type: storage.EventAppended, Revision: c.meta.Revision, Session: cloneMeta(&c.meta), Messages: c.msgs}
		})
		finish(c.op, storage.AppendResult{Revision: c.meta.Revision, MessageCount: c.meta.MessageCount, Appended: int64(len(c.msgs))}, nil)
	}
	s.touch(e)
	s.maybeFold(e)
}

// observeFlush counts a flush that made appends durable and hands its
// record to the flush observer, if any.
func (s *Store) observeFlush(appends int, bytes int64, took time.Duration) {
	s.stats.flushes.Add(1)
	s.stats.flushAppends.Add(int64(appends))
	if s.opts.onFlush != nil {
		s.opts.onFlush(storage.FlushRecord{Appends: appends, Bytes: bytes, Latency: took})
	}
}

// FlushStats reports how many flushes made appends durable since Open, and
// how many appends they covered: appends/flushes is the mean batch size.
func (s *Store) FlushStats() (flushes, appends int64) {
	return s.stats.flushes.Load(), s.stats.flushAppends.Load()
}

// maybeFold ends a long journal as a segment of the session (foldLocked).
// When the segments hold more than twice what the session holds (metadata
// changes, which later ones replace, are most of them), it writes the
// session whole instead: that costs at most half the bytes written since
// the last whole snapshot, and keeps the files within about three times
// the session's size. Caller holds e.wmu.
func (s *Store) maybeFold(e *entry) {
	if e.j == nil || e.j.tail < s.opts.foldBytes {
		return
	}
	v := e.view.Load()
	fold := func() error { return s.foldLocked(e, v.meta) }
	if e.segs != nil && e.segs.bytes()+e.j.tail > 2*v.size+s.opts.foldBytes {
		fold = func() error { return s.replaceLocked(e, v.meta, v.all(), v.cs) }
	}
	if err := fold(); err != nil {
		// The journal still holds everything; folding is only an optimisation.
		s.cond.Log(s.log, zapcore.WarnLevel, "fold", "could not fold journal; will retry on a later append", zap.String("session", e.id), zap.Error(err))
	}
}

// Update changes the selected metadata fields with one journal record.
func (s *Store) Update(ctx context.Context, req storage.UpdateRequest) (*storage.Session, error) {
	return withLoaded(s, req.Ref, func(e *entry, v *view) (*storage.Session, error) {
		m, changed := storage.ApplyUpdate(v.meta, req)
		if !changed {
			return cloneMeta(v.meta), nil
		}
		if err := storage.CheckRevision(e.id, req.ExpectedRevision, v.meta.Revision); err != nil {
			return nil, err
		}
		// Reserve the new alias before writing, so that no other session
		// can take it meanwhile.
		var n *nsIndex
		if m.Alias != v.meta.Alias && m.Alias != "" {
			s.mu.Lock()
			n = s.nsFor(m.Namespace)
			if other := n.byAlias[m.Alias]; other != nil && other != e {
				s.mu.Unlock()
				return nil, storage.AliasInUse(m.Namespace, m.Alias)
			}
			n.byAlias[m.Alias] = e
			s.mu.Unlock()
		}
		s.beginWrite(e)
		m.Revision++
		m.UpdatedAt = now(v.meta.UpdatedAt)
		if err := s.writeJournal(e, encodeCommit([]record{{kind: recMeta, rev: m.Revision, meta: m}}), 0); err != nil {
			if n != nil { // give the reserved alias back
				s.mu.Lock()
				n.release(m.Alias, e)
				s.mu.Unlock()
			}
			return nil, fmt.Errorf("file: update session %s: %w", e.id, err)
		}
		e.view.Store(v.with(m, v.cs))
		s.setMeta(e, m)
		s.broker.Publish(e.id, storage.Event{Type: storage.EventUpdated, Revision: m.Revision, Session: cloneMeta(m)})
		s.maybeFold(e)
		return cloneMeta(m), nil
	})
}

// Delete removes a session and its files.
func (s *Store) Delete(ctx context.Context, ref storage.Ref, expectedRevision uint64) error {
	return s.withSession(ref, func(e *entry) error {
		s.mu.RLock()
		meta, damaged := e.meta, e.damaged
		s.mu.RUnlock()
		if damaged == nil {
			if err := storage.CheckRevision(e.id, expectedRevision, meta.Revision); err != nil {
				return err
			}
		} else if expectedRevision != 0 {
			return damaged // its revision is unknown; deleting it takes no expectation
		}
		s.beginWrite(e)
		if err := s.removeFiles(e.id); err != nil {
			return fmt.Errorf("file: delete session %s: %w", e.id, err)
		}
		s.discardPending(e.j)
		s.forget(e)
		// The drop voids the session's records in the write-ahead log, so
		// that a replay never writes them into a new session with the same
		// id, and says that the last checkpoint's entry does not describe
		// such a session. Without it, the checkpoint must not be trusted.
		if err := s.walCommit(&walReq{rec: walRec{kind: walKindDrop, id: e.id}}); err != nil {
			s.log.Warn("could not record a delete in the write-ahead log; the next open after a crash rescans every session",
				zap.String("session", e.id), zap.Error(err))
			if err := s.distrustCheckpoint(); err != nil {
				s.log.Warn("could not remove the checkpoint mark; creating the same session id again before the next clean close is unsafe after a crash",
					zap.String("session", e.id), zap.Error(err))
			}
		}
		s.mu.Lock()
		e.gone = true
		delete(s.byID, e.id)
		if meta != nil {
			n := s.nsFor(meta.Namespace)
			n.remove(e)
			n.release(meta.Alias, e)
		}
		s.mu.Unlock()
		if meta != nil {
			m := cloneMeta(meta)
			m.Revision++
			s.broker.Publish(e.id, storage.Event{Type: storage.EventDeleted, Revision: m.Revision, Session: m})
		}
		return nil
	})
}

// Fork copies a session's first messages into a new session.
func (s *Store) Fork(ctx context.Context, req storage.ForkRequest) (*storage.Session, error) {
	v, err := s.readView(req.Ref)
	if err != nil {
		return nil, err
	}
	n := req.MessageCount
	if err := storage.CheckCount(v.meta.ID, n, int64(len(v.msgs))); err != nil {
		return nil, err
	}
	if n == 0 {
		n = int64(len(v.msgs))
	}
	kept := v.span(0, int(n))
	tally, err := tallyStored(v.meta.ID, storage.Tally{}, kept)
	if err != nil {
		return nil, damage(v.meta.ID, err)
	}
	t := now(time.Time{})
	src := v.meta
	m := &storage.Session{
		Namespace: src.Namespace, Alias: req.Alias, Title: src.Title, TitleDerived: src.TitleDerived, Summary: src.Summary,
		CreatedAt: t, UpdatedAt: t, Revision: 1, MessageCount: n,
		Metadata: maps.Clone(src.Metadata), Labels: maps.Clone(src.Labels),
		Parent: &storage.ForkOrigin{SessionID: src.ID, MessageCount: n},
		Tally:  tally, ExpireAfter: src.ExpireAfter,
	}
	if req.Title != "" {
		m.Title, m.TitleDerived = req.Title, false
	}
	cs := storage.KeepCompactions(v.cs, n)
	m.Compaction = storage.LatestCompaction(cs)
	msgs := append([][]byte(nil), kept...)
	return s.create(ctx, m, msgs, cs, nil, false)
}

// Rewind keeps a session's first messages.
func (s *Store) Rewind(ctx context.Context, req storage.RewindRequest) (*storage.Session, error) {
	return withLoaded(s, req.Ref, func(e *entry, v *view) (*storage.Session, error) {
		if err := storage.CheckCount(e.id, req.MessageCount, int64(len(v.msgs))); err != nil {
			return nil, err
		}
		if req.MessageCount == int64(len(v.msgs)) {
			return cloneMeta(v.meta), nil
		}
		if err := storage.CheckRevision(e.id, req.ExpectedRevision, v.meta.Revision); err != nil {
			return nil, err
		}
		kept := v.span(0, int(req.MessageCount))
		tally, err := tallyStored(e.id, storage.Tally{}, kept)
		if err != nil {
			return nil, damage(e.id, err)
		}
		m := cloneMeta(v.meta)
		m.MessageCount, m.Revision, m.UpdatedAt = req.MessageCount, m.Revision+1, now(v.meta.UpdatedAt)
		m.Tally = tally
		cs := storage.KeepCompactions(v.cs, req.MessageCount)
		m.Compaction = storage.LatestCompaction(cs)
		if err := s.replaceWrite(e, "rewind", m, kept, cs); err != nil {
			return nil, err
		}
		return cloneMeta(m), nil
	})
}

// Watch subscribes to a session's changes.
func (s *Store) Watch(ctx context.Context, ref storage.Ref, fromRevision uint64) (*storage.Subscription, error) {
	var sub *storage.Subscription
	err := s.withSession(ref, func(e *entry) error {
		s.mu.RLock()
		meta, damaged := e.meta, e.damaged
		s.mu.RUnlock()
		if damaged != nil {
			return damaged
		}
		var err error
		sub, err = s.broker.Subscribe(e.id, meta.Revision, fromRevision)
		return err // the broker's words name from_revision
	})
	return sub, err
}
