package file

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"
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

func mapsEqual(a, b map[string]string) bool { return maps.Equal(a, b) } // nil equals empty

func metaEqual(a, b *storage.Session) bool {
	pa, pb := a.Parent, b.Parent
	return a.ID == b.ID && a.Namespace == b.Namespace && a.Alias == b.Alias && a.Title == b.Title &&
		a.Summary == b.Summary && a.CreatedAt.Equal(b.CreatedAt) && a.UpdatedAt.Equal(b.UpdatedAt) &&
		a.Revision == b.Revision && a.MessageCount == b.MessageCount &&
		mapsEqual(a.Metadata, b.Metadata) && mapsEqual(a.Labels, b.Labels) &&
		(pa == nil) == (pb == nil) && (pa == nil || *pa == *pb)
}

func marshalMessages(ms []*sessiondv1.Message) ([][]byte, error) {
	out := make([][]byte, len(ms))
	for i, m := range ms {
		b, err := proto.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("file: encode message %d: %v: %w", i, err, storage.ErrInvalid)
		}
		out[i] = b
	}
	return out, nil
}

func unmarshalMessage(id string, b []byte) (*sessiondv1.Message, error) {
	m := new(sessiondv1.Message)
	if err := proto.Unmarshal(b, m); err != nil {
		return nil, damage(id, fmt.Errorf("stored message: %v", err))
	}
	return m, nil
}

// sameStored reports whether the stored encoded message is the one the
// client sent again.
func sameStored(sid string, stored []byte, incoming *sessiondv1.Message) (bool, error) {
	m, err := unmarshalMessage(sid, stored)
	if err != nil {
		return false, err
	}
	return storage.SameMessage(m, incoming), nil
}

// Create makes a session with revision 1.
func (s *Store) Create(ctx context.Context, req storage.CreateRequest) (*storage.Session, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := storage.ValidateNamespace(req.Namespace); err != nil {
		return nil, err
	}
	if req.Alias != "" {
		if err := storage.ValidateAlias(req.Alias); err != nil {
			return nil, err
		}
	}
	parentID := ""
	if req.Parent != nil {
		parentID = req.Parent.SessionID
	}
	if err := errors.Join(storage.ValidateText("title", req.Title), storage.ValidateText("summary", req.Summary),
		storage.ValidateText("parent.session_id", parentID),
		storage.ValidateStringMap("metadata", req.Metadata), storage.ValidateStringMap("labels", req.Labels)); err != nil {
		return nil, err
	}
	id := ""
	if req.ID != "" {
		var err error
		if id, err = storage.ParseSessionID("id", req.ID); err != nil {
			return nil, err
		}
	}
	t := now(time.Time{})
	prepared, err := storage.PrepareMessages("messages", req.Messages, t)
	if err != nil {
		return nil, err
	}
	enc, err := marshalMessages(prepared)
	if err != nil {
		return nil, err
	}
	created := t
	if !req.CreatedAt.IsZero() {
		created = req.CreatedAt.UTC()
		if created.After(t) {
			t = created
		}
	}
	meta := &storage.Session{
		ID: id, Namespace: req.Namespace, Alias: req.Alias, Title: req.Title, Summary: req.Summary,
		CreatedAt: created, UpdatedAt: t, Revision: 1, MessageCount: int64(len(enc)),
		Metadata: maps.Clone(req.Metadata), Labels: maps.Clone(req.Labels),
	}
	if req.Parent != nil {
		p := *req.Parent
		meta.Parent = &p
	}
	if err := s.begin(); err != nil {
		return nil, err
	}
	defer s.writes.Done()
	return s.create(ctx, meta, enc, &req, req.ID != "")
}

// create reserves the id and alias, writes the files, and publishes the
// session. retry, when set, is the request to compare an existing id with.
//
// With fixedID, meta.ID is the caller's and a taken id is ErrAlreadyExists
// (or, when retry is set and matches, the existing session); otherwise a
// fresh UUIDv7 is drawn.
func (s *Store) create(ctx context.Context, meta *storage.Session, enc [][]byte, retry *storage.CreateRequest, fixedID bool) (*storage.Session, error) {
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
		if s.closed {
			s.mu.Unlock()
			e.wmu.Unlock()
			return nil, fmt.Errorf("file: %w", storage.ErrClosed)
		}
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
			return nil, fmt.Errorf("file: alias %q in namespace %q: %w", meta.Alias, meta.Namespace, storage.ErrAliasInUse)
		}
		// Reserve id and alias; e.meta stays nil (invisible) until durable.
		s.byID[meta.ID] = e
		if meta.Alias != "" {
			n.byAlias[meta.Alias] = e
		}
		s.mu.Unlock()

		j, err := s.createFiles(meta, enc)
		if err != nil {
			s.mu.Lock()
			e.gone = true
			delete(s.byID, meta.ID)
			if meta.Alias != "" && n.byAlias[meta.Alias] == e {
				delete(n.byAlias, meta.Alias)
			}
			s.mu.Unlock()
			e.wmu.Unlock()
			return nil, fmt.Errorf("file: create session %s: %w", meta.ID, err)
		}
		e.j, e.gen, e.ids = j, 1, ids
		e.view.Store(newView(meta, enc[:len(enc):len(enc)]))
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
func (s *Store) createRetry(_ context.Context, e *entry, req *storage.CreateRequest) (*storage.Session, error) {
	exists := fmt.Errorf("file: session %s: %w", req.ID, storage.ErrAlreadyExists)
	e.wmu.Lock() // waits for a create in progress to finish
	defer s.unlock(e)
	s.mu.RLock()
	meta, gone, damaged := e.meta, e.gone, e.damaged
	s.mu.RUnlock()
	if gone {
		return nil, errRetry
	}
	if meta == nil || damaged != nil || meta.Namespace != req.Namespace || meta.Revision != 1 {
		return nil, exists
	}
	p := req.Parent
	same := meta.Alias == req.Alias && meta.Title == req.Title && meta.Summary == req.Summary &&
		mapsEqual(meta.Metadata, req.Metadata) && mapsEqual(meta.Labels, req.Labels) &&
		(p == nil) == (meta.Parent == nil) && (p == nil || *p == *meta.Parent) &&
		(req.CreatedAt.IsZero() || req.CreatedAt.Equal(meta.CreatedAt)) &&
		meta.MessageCount == int64(len(req.Messages))
	if !same {
		return nil, exists
	}
	if err := s.loadLocked(e); err != nil {
		return nil, err
	}
	v := e.view.Load()
	for i, m := range req.Messages {
		ok, err := sameStored(e.id, v.msgs[i], m)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, exists
		}
	}
	return cloneMeta(v.meta), nil
}

// Get returns a session's metadata.
func (s *Store) Get(ctx context.Context, ref storage.Ref) (*storage.Session, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ref, err := storage.ValidateRef(ref)
	if err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, fmt.Errorf("file: %w", storage.ErrClosed)
	}
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
	ref, err := storage.ValidateRef(ref)
	if err != nil {
		return nil, err
	}
	e, err := s.resolve(ref)
	if err != nil {
		return nil, err
	}
	if v := e.view.Load(); v != nil {
		return v, nil
	}
	var v *view
	err = s.withLoaded(ref, func(_ *entry, loaded *view) error {
		v = loaded
		return nil
	})
	return v, err
}

// withLoaded runs fn like withSession, with the session's state in memory:
// v is its current view.
func (s *Store) withLoaded(ref storage.Ref, fn func(e *entry, v *view) error) error {
	return s.withSession(ref, func(e *entry) error {
		if err := s.loadLocked(e); err != nil {
			return err
		}
		return fn(e, e.view.Load())
	})
}

// replaceWrite records e as changed, makes m and msgs its new state, and
// tells watchers. what names the operation for errors. Caller holds e.wmu
// and has loaded e.
func (s *Store) replaceWrite(e *entry, what string, m *storage.Session, msgs [][]byte) error {
	if err := s.beginWrite(e, dirtyWrite); err != nil {
		return fmt.Errorf("file: %s session %s: %w", what, e.id, err)
	}
	if err := s.replaceLocked(e, m, msgs); err != nil {
		return fmt.Errorf("file: %s session %s: %w", what, e.id, err)
	}
	s.broker.Publish(e.id, storage.Event{Type: storage.EventReplaced, Revision: m.Revision, Session: cloneMeta(m)})
	return nil
}

// Load returns a session's metadata and the selected messages.
func (s *Store) Load(ctx context.Context, ref storage.Ref, opts storage.LoadOptions) (*storage.Session, []*sessiondv1.Message, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	if opts.Offset < 0 || opts.Limit < 0 {
		return nil, nil, fmt.Errorf("file: load offset %d, limit %d: must not be negative: %w", opts.Offset, opts.Limit, storage.ErrInvalid)
	}
	if opts.Tail && opts.Offset != 0 {
		return nil, nil, fmt.Errorf("file: load with tail takes no offset (got %d): %w", opts.Offset, storage.ErrInvalid)
	}
	v, err := s.readView(ref)
	if err != nil {
		return nil, nil, err
	}
	n := int64(len(v.msgs))
	from, to := min(opts.Offset, n), n
	if opts.Limit > 0 {
		if opts.Tail {
			from = max(0, n-opts.Limit)
		} else {
			to = min(n, from+opts.Limit)
		}
	}
	out := make([]*sessiondv1.Message, 0, to-from)
	for _, b := range v.msgs[from:to] {
		m, err := unmarshalMessage(v.meta.ID, b)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, m)
	}
	return cloneMeta(v.meta), out, nil
}

// List calls yield for each matching session in list order. It collects a
// page under the read lock, then yields it with no lock held.
func (s *Store) List(ctx context.Context, opts storage.ListOptions, yield func(*storage.Session) error) error {
	if err := storage.ValidateNamespace(opts.Namespace); err != nil {
		return err
	}
	if opts.Limit < 0 {
		return fmt.Errorf("file: list limit %d is negative: %w", opts.Limit, storage.ErrInvalid)
	}
	var cur listKey // the last session looked at, when started
	started := opts.After != nil
	if started {
		cur = listKey{t: opts.After.UpdatedAt, id: opts.After.ID}
	}
	sent := int64(0)
	page := make([]*storage.Session, 0, 256)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		page = page[:0]
		s.mu.RLock()
		if s.closed {
			s.mu.RUnlock()
			return fmt.Errorf("file: %w", storage.ErrClosed)
		}
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
				if matches(m, &opts) {
					page = append(page, m)
				}
			}
		}
		s.mu.RUnlock()
		for _, m := range page {
			if opts.Limit > 0 && sent >= opts.Limit {
				return nil
			}
			if err := yield(cloneMeta(m)); err != nil {
				return err
			}
			sent++
		}
		if done || (opts.Limit > 0 && sent >= opts.Limit) {
			return nil
		}
	}
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
	return true
}

// Save replaces a session's messages, title, summary and metadata.
func (s *Store) Save(ctx context.Context, req storage.SaveRequest) (*storage.Session, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ref, err := storage.ValidateRef(req.Ref)
	if err != nil {
		return nil, err
	}
	if err := errors.Join(storage.ValidateText("title", req.Title), storage.ValidateText("summary", req.Summary),
		storage.ValidateStringMap("metadata", req.Metadata)); err != nil {
		return nil, err
	}
	prepared, err := storage.PrepareMessages("messages", req.Messages, time.Now().UTC())
	if err != nil {
		return nil, err
	}
	enc, err := marshalMessages(prepared)
	if err != nil {
		return nil, err
	}
	if err := s.begin(); err != nil {
		return nil, err
	}
	defer s.writes.Done()
	var raced error // a create that lost a race, to answer if the winner is not ours to save into
	for range 10 {
		var out *storage.Session
		err := s.withLoaded(ref, func(e *entry, v *view) error {
			if noop, err := s.sameContent(e.id, v, req.Title, req.Summary, req.Metadata, req.Messages); err != nil {
				return err
			} else if noop {
				out = cloneMeta(v.meta)
				return nil
			}
			if err := checkRev(e.id, req.ExpectedRevision, v.meta.Revision); err != nil {
				return err
			}
			m := cloneMeta(v.meta)
			m.Title, m.Summary, m.Metadata = req.Title, req.Summary, maps.Clone(req.Metadata)
			m.MessageCount, m.Revision, m.UpdatedAt = int64(len(enc)), m.Revision+1, now(v.meta.UpdatedAt)
			if err := s.replaceWrite(e, "save", m, enc); err != nil {
				return err
			}
			out = cloneMeta(m)
			return nil
		})
		if !errors.Is(err, storage.ErrNotFound) || !req.CreateIfMissing {
			return out, err
		}
		if raced != nil {
			return nil, raced
		}
		t := now(time.Time{})
		meta := &storage.Session{
			ID: ref.ID, Namespace: ref.Namespace, Alias: ref.Alias, Title: req.Title, Summary: req.Summary,
			CreatedAt: t, UpdatedAt: t, Revision: 1, MessageCount: int64(len(enc)), Metadata: maps.Clone(req.Metadata),
		}
		if req.ExpectedRevision != 0 {
			return nil, fmt.Errorf("file: save with expected revision %d creates nothing: %w", req.ExpectedRevision, storage.ErrConflict)
		}
		out, err = s.create(ctx, meta, enc, nil, ref.ID != "")
		if err == nil {
			return out, nil
		}
		if (errors.Is(err, storage.ErrAliasInUse) && ref.Alias != "") || (errors.Is(err, storage.ErrAlreadyExists) && ref.ID != "") {
			raced = err
			continue // created by someone else meanwhile: save into it
		}
		return nil, err
	}
	return nil, fmt.Errorf("file: save of %v keeps racing creates: %w", ref, storage.ErrConflict)
}

// sameContent reports whether a save would change nothing.
func (s *Store) sameContent(id string, v *view, title, summary string, md map[string]string, msgs []*sessiondv1.Message) (bool, error) {
	if v.meta.Title != title || v.meta.Summary != summary || !mapsEqual(v.meta.Metadata, md) || len(v.msgs) != len(msgs) {
		return false, nil
	}
	for i, m := range msgs {
		same, err := sameStored(id, v.msgs[i], m)
		if err != nil || !same {
			return false, err
		}
	}
	return true, nil
}

func checkRev(id string, expected, current uint64) error {
	if expected != 0 && expected != current {
		return fmt.Errorf("file: session %s is at revision %d, expected %d: %w", id, current, expected, storage.ErrConflict)
	}
	return nil
}

// replaceLocked writes a whole new state (save, rewind, fold) and publishes
// it to readers. Caller holds e.wmu and has loaded e.
func (s *Store) replaceLocked(e *entry, m *storage.Session, msgs [][]byte) error {
	msgs = msgs[:len(msgs):len(msgs)] // later appends must not write into a reader's array
	if err := s.rewriteLocked(e, m, msgs); err != nil {
		return err
	}
	ids, err := indexIDs(msgs)
	if err != nil {
		return damage(e.id, err)
	}
	e.ids = ids
	e.view.Store(newView(m, msgs))
	s.setMeta(e, m)
	s.touch(e)
	return nil
}

// appendOp is one Append waiting for a group commit.
type appendOp struct {
	ctx      context.Context
	ref      storage.Ref
	exp      uint64
	orig     []*sessiondv1.Message
	prepared []*sessiondv1.Message
	enc      [][]byte
	done     bool // set under the session's wmu
	res      storage.AppendResult
	err      error
}

// Append adds messages atomically, sharing one journal flush with the
// appends to the same session that are waiting at that moment (group
// commit): the first to get the session's lock writes everyone's records
// in one frame with one fdatasync.
func (s *Store) Append(ctx context.Context, req storage.AppendRequest) (storage.AppendResult, error) {
	if err := ctx.Err(); err != nil {
		return storage.AppendResult{}, err
	}
	ref, err := storage.ValidateRef(req.Ref)
	if err != nil {
		return storage.AppendResult{}, err
	}
	prepared, err := storage.PrepareMessages("messages", req.Messages, time.Now().UTC())
	if err != nil {
		return storage.AppendResult{}, err
	}
	enc, err := marshalMessages(prepared)
	if err != nil {
		return storage.AppendResult{}, err
	}
	if err := s.begin(); err != nil {
		return storage.AppendResult{}, err
	}
	defer s.writes.Done()
	op := &appendOp{ctx: ctx, ref: ref, exp: req.ExpectedRevision, orig: req.Messages, prepared: prepared, enc: enc}
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
		}
		s.unlock(e)
		if errors.Is(op.err, errRetry) {
			continue
		}
		return op.res, op.err
	}
	return storage.AppendResult{}, fmt.Errorf("file: append to %v keeps racing renames: %w", ref, storage.ErrConflict)
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
	live := batch[:0:0]
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
	msgs := v.msgs
	added := map[string]int{} // ids appended earlier in this batch -> index in msgs
	type change struct {
		op   *appendOp
		meta storage.Session
	}
	var recs []record
	var changes []change
	for _, op := range live {
		if err := op.ctx.Err(); err != nil {
			finish(op, storage.AppendResult{}, err)
			continue
		}
		cur := storage.AppendResult{Revision: meta.Revision, MessageCount: meta.MessageCount}
		old, fresh := 0, 0
		var err error
		for i, m := range op.orig {
			j, ok := e.ids[m.GetId()]
			if !ok {
				j, ok = added[m.GetId()]
			}
			if m.GetId() == "" || !ok {
				fresh++
				continue
			}
			old++
			same, serr := sameStored(e.id, msgs[j], m)
			if serr != nil {
				err = serr
				break
			}
			if !same {
				err = fmt.Errorf("file: messages[%d].id %q is in session %s with other content: %w", i, m.GetId(), e.id, storage.ErrMessageConflict)
				break
			}
		}
		switch {
		case err != nil:
			finish(op, storage.AppendResult{}, err)
			continue
		case old > 0 && fresh > 0:
			finish(op, storage.AppendResult{}, fmt.Errorf("file: append to %s mixes %d stored and %d new messages: %w", e.id, old, fresh, storage.ErrMessageConflict))
			continue
		case fresh == 0:
			finish(op, cur, nil) // a retry of an append that landed, or nothing to add
			continue
		}
		if err := checkRev(e.id, op.exp, meta.Revision); err != nil {
			finish(op, storage.AppendResult{}, err)
			continue
		}
		meta.Revision++
		meta.MessageCount += int64(len(op.enc))
		meta.UpdatedAt = now(meta.UpdatedAt)
		for i, p := range op.prepared {
			added[p.GetId()] = len(msgs) + i
		}
		msgs = append(msgs, op.enc...)
		recs = append(recs, record{kind: recAppend, rev: meta.Revision, updatedAt: meta.UpdatedAt, msgs: op.enc})
		changes = append(changes, change{op: op, meta: meta})
	}
	if len(recs) == 0 {
		return
	}
	if err := s.beginWrite(e, dirtyWrite); err != nil {
		err = fmt.Errorf("file: append to session %s: %w", e.id, err)
		for _, c := range changes {
			finish(c.op, storage.AppendResult{}, err)
		}
		return
	}
	if err := s.writeJournal(e, encodeCommit(recs)); err != nil {
		err = fmt.Errorf("file: append to session %s: %w", e.id, err)
		for _, c := range changes {
			finish(c.op, storage.AppendResult{}, err)
		}
		return
	}
	maps.Copy(e.ids, added)
	final := meta
	e.view.Store(&view{meta: &final, msgs: msgs, size: v.size + msgsSize(msgs[len(v.msgs):])})
	s.setMeta(e, &final)
	for _, c := range changes {
		m := c.meta
		s.broker.Publish(e.id, storage.Event{Type: storage.EventAppended, Revision: m.Revision, Session: cloneMeta(&m), Messages: c.op.prepared})
		finish(c.op, storage.AppendResult{Revision: m.Revision, MessageCount: m.MessageCount}, nil)
	}
	s.touch(e)
	s.maybeFold(e)
}

// maybeFold folds a long journal into a new snapshot. Caller holds e.wmu.
func (s *Store) maybeFold(e *entry) {
	if e.j == nil || e.j.tail < s.opts.foldBytes {
		return
	}
	v := e.view.Load()
	if err := s.replaceLocked(e, v.meta, v.msgs); err != nil {
		// The journal still holds everything; folding is only an optimisation.
		s.log.Warn("could not fold journal; will retry on a later append", zap.String("session", e.id), zap.Error(err))
	}
}

// Update changes the selected metadata fields with one journal record.
func (s *Store) Update(ctx context.Context, req storage.UpdateRequest) (*storage.Session, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if req.Fields == 0 {
		return nil, fmt.Errorf("file: update names no field: %w", storage.ErrInvalid)
	}
	if req.Fields&UpdateAll != req.Fields {
		return nil, fmt.Errorf("file: update names unknown fields %#x: %w", req.Fields&^UpdateAll, storage.ErrInvalid)
	}
	if err := errors.Join(storage.ValidateText("title", req.Title), storage.ValidateText("summary", req.Summary),
		storage.ValidateStringMap("metadata", req.Metadata), storage.ValidateStringMap("labels", req.Labels)); err != nil {
		return nil, err
	}
	if req.Fields&storage.UpdateAlias != 0 && req.Alias != "" {
		if err := storage.ValidateAlias(req.Alias); err != nil {
			return nil, err
		}
	}
	if err := s.begin(); err != nil {
		return nil, err
	}
	defer s.writes.Done()
	var out *storage.Session
	err := s.withLoaded(req.Ref, func(e *entry, v *view) error {
		m := cloneMeta(v.meta)
		if req.Fields&storage.UpdateAlias != 0 {
			m.Alias = req.Alias
		}
		if req.Fields&storage.UpdateTitle != 0 {
			m.Title = req.Title
		}
		if req.Fields&storage.UpdateSummary != 0 {
			m.Summary = req.Summary
		}
		if req.Fields&storage.UpdateMetadata != 0 {
			m.Metadata = maps.Clone(req.Metadata)
		}
		if req.Fields&storage.UpdateLabels != 0 {
			m.Labels = maps.Clone(req.Labels)
		}
		if metaEqual(m, v.meta) {
			out = cloneMeta(v.meta)
			return nil
		}
		if err := checkRev(e.id, req.ExpectedRevision, v.meta.Revision); err != nil {
			return err
		}
		// Reserve the new alias before writing, so that no other session
		// can take it meanwhile.
		var n *nsIndex
		if m.Alias != v.meta.Alias && m.Alias != "" {
			s.mu.Lock()
			n = s.nsFor(m.Namespace)
			if other := n.byAlias[m.Alias]; other != nil && other != e {
				s.mu.Unlock()
				return fmt.Errorf("file: alias %q in namespace %q: %w", m.Alias, m.Namespace, storage.ErrAliasInUse)
			}
			n.byAlias[m.Alias] = e
			s.mu.Unlock()
		}
		unreserve := func() {
			if n != nil {
				s.mu.Lock()
				if n.byAlias[m.Alias] == e {
					delete(n.byAlias, m.Alias)
				}
				s.mu.Unlock()
			}
		}
		if err := s.beginWrite(e, dirtyWrite); err != nil {
			unreserve()
			return fmt.Errorf("file: update session %s: %w", e.id, err)
		}
		m.Revision++
		m.UpdatedAt = now(v.meta.UpdatedAt)
		if err := s.writeJournal(e, encodeCommit([]record{{kind: recMeta, rev: m.Revision, meta: m}})); err != nil {
			unreserve()
			return fmt.Errorf("file: update session %s: %w", e.id, err)
		}
		e.view.Store(&view{meta: m, msgs: v.msgs, size: v.size})
		s.setMeta(e, m)
		s.broker.Publish(e.id, storage.Event{Type: storage.EventUpdated, Revision: m.Revision, Session: cloneMeta(m)})
		out = cloneMeta(m)
		s.maybeFold(e)
		return nil
	})
	return out, err
}

// UpdateAll is every field Update knows.
const UpdateAll = storage.UpdateAlias | storage.UpdateTitle | storage.UpdateSummary | storage.UpdateMetadata | storage.UpdateLabels

// Delete removes a session and its files.
func (s *Store) Delete(ctx context.Context, ref storage.Ref, expectedRevision uint64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.begin(); err != nil {
		return err
	}
	defer s.writes.Done()
	return s.withSession(ref, func(e *entry) error {
		s.mu.RLock()
		meta, damaged := e.meta, e.damaged
		s.mu.RUnlock()
		if damaged == nil {
			if err := checkRev(e.id, expectedRevision, meta.Revision); err != nil {
				return err
			}
		} else if expectedRevision != 0 {
			return damaged // its revision is unknown; deleting it takes no expectation
		}
		// Recorded as a reset: should the id be created again, the last
		// checkpoint's entry does not describe the new session.
		if err := s.beginWrite(e, dirtyReset); err != nil {
			return fmt.Errorf("file: delete session %s: %w", e.id, err)
		}
		if err := s.removeFiles(e.id); err != nil {
			return fmt.Errorf("file: delete session %s: %w", e.id, err)
		}
		s.forget(e)
		s.mu.Lock()
		e.gone = true
		delete(s.byID, e.id)
		if meta != nil {
			n := s.nsFor(meta.Namespace)
			n.remove(e)
			if meta.Alias != "" && n.byAlias[meta.Alias] == e {
				delete(n.byAlias, meta.Alias)
			}
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
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := storage.ValidateText("title", req.Title); err != nil {
		return nil, err
	}
	if req.MessageCount < 0 {
		return nil, fmt.Errorf("file: fork message_count %d is negative: %w", req.MessageCount, storage.ErrInvalid)
	}
	if req.Alias != "" {
		if err := storage.ValidateAlias(req.Alias); err != nil {
			return nil, err
		}
	}
	if err := s.begin(); err != nil {
		return nil, err
	}
	defer s.writes.Done()
	v, err := s.readView(req.Ref)
	if err != nil {
		return nil, err
	}
	n := req.MessageCount
	if n == 0 {
		n = int64(len(v.msgs))
	}
	if n > int64(len(v.msgs)) {
		return nil, fmt.Errorf("file: message_count %d is more than the %d messages of session %s: %w", n, len(v.msgs), v.meta.ID, storage.ErrInvalid)
	}
	t := now(time.Time{})
	src := v.meta
	m := &storage.Session{
		Namespace: src.Namespace, Alias: req.Alias, Title: src.Title, Summary: src.Summary,
		CreatedAt: t, UpdatedAt: t, Revision: 1, MessageCount: n,
		Metadata: maps.Clone(src.Metadata), Labels: maps.Clone(src.Labels),
		Parent: &storage.ForkOrigin{SessionID: src.ID, MessageCount: n},
	}
	if req.Title != "" {
		m.Title = req.Title
	}
	msgs := append([][]byte(nil), v.msgs[:n]...)
	return s.create(ctx, m, msgs, nil, false)
}

// Rewind keeps a session's first messages.
func (s *Store) Rewind(ctx context.Context, req storage.RewindRequest) (*storage.Session, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if req.MessageCount < 0 {
		return nil, fmt.Errorf("file: rewind message_count %d is negative: %w", req.MessageCount, storage.ErrInvalid)
	}
	if err := s.begin(); err != nil {
		return nil, err
	}
	defer s.writes.Done()
	var out *storage.Session
	err := s.withLoaded(req.Ref, func(e *entry, v *view) error {
		if req.MessageCount > int64(len(v.msgs)) {
			return fmt.Errorf("file: message_count %d is more than the %d messages of session %s: %w", req.MessageCount, len(v.msgs), e.id, storage.ErrInvalid)
		}
		if req.MessageCount == int64(len(v.msgs)) {
			out = cloneMeta(v.meta)
			return nil
		}
		if err := checkRev(e.id, req.ExpectedRevision, v.meta.Revision); err != nil {
			return err
		}
		m := cloneMeta(v.meta)
		m.MessageCount, m.Revision, m.UpdatedAt = req.MessageCount, m.Revision+1, now(v.meta.UpdatedAt)
		if err := s.replaceWrite(e, "rewind", m, v.msgs[:req.MessageCount]); err != nil {
			return err
		}
		out = cloneMeta(m)
		return nil
	})
	return out, err
}

// Watch subscribes to a session's changes.
func (s *Store) Watch(ctx context.Context, ref storage.Ref, fromRevision uint64) (*storage.Subscription, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
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
		if err != nil {
			return fmt.Errorf("file: watch session %s: %w", e.id, err)
		}
		return nil
	})
	return sub, err
}
