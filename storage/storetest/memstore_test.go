package storetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// TestConformanceMemStore runs the suite against memStore, a deliberately
// simple in-memory reference driver. It checks the suite itself: every rule
// the suite asserts can be met, and the suite does not depend on one
// backend's accidents. Its data outlives a closed driver and may be shared
// by several open ones, so it also exercises the suite's reopen and shared
// checks.
func TestConformanceMemStore(t *testing.T) {
	var mu sync.Mutex
	data := map[string]*memData{}
	RunConformance(t, Harness{
		NewData: func(t *testing.T) string {
			mu.Lock()
			defer mu.Unlock()
			addr := fmt.Sprintf("mem-%d", len(data))
			data[addr] = &memData{sessions: map[string]*memSession{}, aliases: map[string]map[string]string{}}
			return addr
		},
		Open: func(_ context.Context, addr string) (*storage.Store, error) {
			mu.Lock()
			d := data[addr]
			mu.Unlock()
			if d == nil {
				return nil, fmt.Errorf("mem: no data at %s", addr)
			}
			s := &memStore{memData: d, broker: storage.NewBroker()}
			d.mu.Lock()
			d.open = append(d.open, s)
			d.mu.Unlock()
			return storage.New(s, storage.Limits{}), nil
		},
		Shared: true,
	})
}

// memData is a store's data, under one mutex. Every driver open on it
// publishes its changes to the brokers of all.
type memData struct {
	mu       sync.Mutex                   // guards everything below
	sessions map[string]*memSession       // by id
	aliases  map[string]map[string]string // namespace -> alias -> id
	lastTime time.Time
	open     []*memStore
}

// memStore is one open driver on a memData.
type memStore struct {
	*memData
	broker *storage.Broker
}

type memSession struct {
	meta        storage.Session
	msgs        []*sessiondv1.Message
	compactions []storage.StoredCompaction // oldest first; meta.Compaction is the last's range
}

func (se *memSession) setCompactions(cs []storage.StoredCompaction) {
	se.compactions = cs
	se.meta.Compaction = storage.LatestCompaction(cs)
}

var _ storage.Driver = (*memStore)(nil)

// now returns a strictly increasing time, so updated_at orders writes.
func (s *memStore) now() time.Time {
	n := time.Now()
	if !n.After(s.lastTime) {
		n = s.lastTime.Add(time.Nanosecond)
	}
	s.lastTime = n
	return n
}

func copyMeta(se *storage.Session) *storage.Session {
	c := *se
	c.Metadata = maps.Clone(se.Metadata)
	c.Labels = maps.Clone(se.Labels)
	if se.Parent != nil {
		p := *se.Parent
		c.Parent = &p
	}
	return &c
}

func cloneMsgs(ms []*sessiondv1.Message) []*sessiondv1.Message {
	out := make([]*sessiondv1.Message, len(ms))
	for i, m := range ms {
		out[i] = proto.Clone(m).(*sessiondv1.Message)
	}
	return out
}

// locked runs fn under the lock. The Store refuses calls after Close, so
// none reaches a closed driver.
func (s *memStore) locked(fn func() error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fn()
}

func (s *memStore) find(ref storage.Ref) (*memSession, error) {
	id := ref.ID
	if id == "" {
		id = s.aliases[ref.Namespace][ref.Alias]
	}
	se, ok := s.sessions[id]
	if !ok || se.meta.Namespace != ref.Namespace {
		return nil, fmt.Errorf("mem: %+v: %w", ref, storage.ErrNotFound)
	}
	return se, nil
}

func (s *memStore) setAlias(se *memSession, alias string) {
	ns := se.meta.Namespace
	if se.meta.Alias != "" {
		delete(s.aliases[ns], se.meta.Alias)
	}
	se.meta.Alias = alias
	if alias != "" {
		if s.aliases[ns] == nil {
			s.aliases[ns] = map[string]string{}
		}
		s.aliases[ns][alias] = se.meta.ID
	}
}

func (s *memStore) aliasTaken(ns, alias, self string) bool {
	id, ok := s.aliases[ns][alias]
	return alias != "" && ok && id != self
}

// publish tells the watchers of every open driver.
func (s *memStore) publish(id string, ev storage.Event) {
	for _, o := range s.open {
		o.broker.Publish(id, ev)
	}
}

// bump records a change and tells the watchers.
func (s *memStore) bump(se *memSession, typ storage.EventType, appended []*sessiondv1.Message) {
	se.meta.Revision++
	se.meta.UpdatedAt = s.now()
	se.meta.MessageCount = int64(len(se.msgs))
	s.publish(se.meta.ID, storage.Event{Type: typ, Revision: se.meta.Revision, Session: copyMeta(&se.meta), Messages: appended})
}

// storedAt reads a session's messages for the shared rule functions.
func (se *memSession) storedAt(i int) (*sessiondv1.Message, error) { return se.msgs[i], nil }

func (s *memStore) Create(_ context.Context, req storage.CreateRequest, msgs storage.Messages) (*storage.Session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	id := req.ID
	if id != "" {
		if old, ok := s.sessions[id]; ok {
			same, err := storage.SameCreate(&old.meta, req, msgs, old.storedAt)
			if err != nil {
				return nil, err
			}
			if !same {
				return nil, fmt.Errorf("mem: id %s: %w", id, storage.ErrAlreadyExists)
			}
			return copyMeta(&old.meta), nil
		}
	} else {
		id = uuid.Must(uuid.NewV7()).String()
	}
	if s.aliasTaken(req.Namespace, req.Alias, "") {
		return nil, storage.AliasInUse(req.Namespace, req.Alias)
	}
	created := req.CreatedAt
	if created.IsZero() {
		created = now
	}
	se := &memSession{msgs: msgs.Prepared, meta: storage.Session{
		ID: id, Namespace: req.Namespace, Title: req.Title, TitleDerived: req.TitleDerived, Summary: req.Summary,
		CreatedAt: created, UpdatedAt: now, Revision: max(req.Revision, 1), MessageCount: int64(len(msgs.Prepared)),
		Metadata: maps.Clone(req.Metadata), Labels: maps.Clone(req.Labels), Tally: msgs.Tally, ExpireAfter: req.ExpireAfter,
	}}
	if req.Parent != nil {
		p := *req.Parent
		se.meta.Parent = &p
	}
	s.sessions[id] = se
	s.setAlias(se, req.Alias)
	return copyMeta(&se.meta), nil
}

func (s *memStore) Get(_ context.Context, ref storage.Ref) (*storage.Session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	se, err := s.find(ref)
	if err != nil {
		return nil, err
	}
	return copyMeta(&se.meta), nil
}

func (s *memStore) Load(_ context.Context, ref storage.Ref, opts storage.LoadOptions) (*storage.Session, []*sessiondv1.Message, error) {
	var out *storage.Session
	var ms []*sessiondv1.Message
	err := s.locked(func() error {
		se, err := s.find(ref)
		if err != nil {
			return err
		}
		out = copyMeta(&se.meta)
		if opts.View != storage.ViewContext || se.meta.Compaction == nil {
			from, to := opts.Window(int64(len(se.msgs)))
			ms = cloneMsgs(se.msgs[from:to])
			return nil
		}
		summary, from, to := opts.ContextWindow(int64(len(se.msgs)), se.meta.Compaction.ThroughCount)
		if summary {
			m := new(sessiondv1.Message)
			if err := proto.Unmarshal(se.compactions[len(se.compactions)-1].Summary, m); err != nil {
				return err
			}
			ms = append(ms, m)
		}
		ms = append(ms, cloneMsgs(se.msgs[from:to])...)
		return nil
	})
	return out, ms, err
}

func (s *memStore) List(_ context.Context, opts storage.ListOptions, yield func(*storage.Session) error) error {
	var list []*storage.Session
	err := s.locked(func() error {
		for _, se := range s.sessions {
			m := &se.meta
			if m.Namespace != opts.Namespace || !strings.HasPrefix(m.Alias, opts.AliasPrefix) ||
				!opts.UpdatedAfter.IsZero() && !m.UpdatedAt.After(opts.UpdatedAfter) ||
				!opts.UpdatedBefore.IsZero() && !m.UpdatedAt.Before(opts.UpdatedBefore) {
				continue
			}
			if opts.AliasPrefix != "" && m.Alias == "" {
				continue
			}
			match := true
			for k, v := range opts.Labels {
				if got, ok := m.Labels[k]; !ok || got != v {
					match = false
				}
			}
			if !match || opts.Model != "" && !slices.Contains(m.Models, opts.Model) {
				continue
			}
			if a := opts.After; a != nil && !listBefore(&storage.Session{UpdatedAt: a.UpdatedAt, ID: a.ID}, m) {
				continue
			}
			list = append(list, copyMeta(m))
		}
		return nil
	})
	if err != nil {
		return err
	}
	slices.SortFunc(list, func(a, b *storage.Session) int {
		if listBefore(a, b) {
			return -1
		}
		return 1
	})
	if opts.Limit > 0 && int64(len(list)) > opts.Limit {
		list = list[:opts.Limit]
	}
	for _, se := range list {
		if err := yield(se); err != nil {
			return err
		}
	}
	return nil
}

func (s *memStore) Save(_ context.Context, req storage.SaveRequest, msgs storage.Messages) (*storage.Session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	se, err := s.find(req.Ref)
	if err != nil {
		if !req.CreateIfMissing || !errors.Is(err, storage.ErrNotFound) {
			return nil, err
		}
		ref := req.Ref
		if _, taken := s.sessions[ref.ID]; taken {
			return nil, fmt.Errorf("mem: id %s: %w", ref.ID, storage.ErrAlreadyExists)
		}
		if req.ExpectedRevision != 0 {
			return nil, storage.CheckRevision(ref.ID, req.ExpectedRevision, 0)
		}
		id := ref.ID
		if id == "" {
			id = uuid.Must(uuid.NewV7()).String()
		}
		now := s.now()
		se = &memSession{msgs: msgs.Prepared, meta: storage.Session{
			ID: id, Namespace: ref.Namespace, Title: req.Title, TitleDerived: req.TitleDerived, Summary: req.Summary,
			CreatedAt: now, UpdatedAt: now, Revision: 1, MessageCount: int64(len(msgs.Prepared)), Metadata: maps.Clone(req.Metadata),
			Tally: msgs.Tally,
		}}
		s.sessions[id] = se
		s.setAlias(se, ref.Alias)
		return copyMeta(&se.meta), nil
	}
	if same, err := storage.SameSave(&se.meta, req, msgs, se.storedAt); err != nil {
		return nil, err
	} else if same {
		return copyMeta(&se.meta), nil
	}
	if err := storage.CheckRevision(se.meta.ID, req.ExpectedRevision, se.meta.Revision); err != nil {
		return nil, err
	}
	se.meta.Title, se.meta.TitleDerived, se.meta.Summary, se.meta.Metadata, se.msgs = req.Title, req.TitleDerived, req.Summary, maps.Clone(req.Metadata), msgs.Prepared
	se.meta.Tally = msgs.Tally
	se.setCompactions(nil)
	s.bump(se, storage.EventReplaced, nil)
	return copyMeta(&se.meta), nil
}

func (s *memStore) Append(_ context.Context, req storage.AppendRequest, msgs storage.Messages) (storage.AppendResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	se, err := s.find(req.Ref)
	if err != nil {
		return storage.AppendResult{}, err
	}
	fresh, err := storage.CheckAppend(se.meta.ID, msgs, req.ExpectedRevision, se.meta.Revision, se.meta.Tally, func(id string) (*sessiondv1.Message, bool, error) {
		i := slices.IndexFunc(se.msgs, func(x *sessiondv1.Message) bool { return x.GetId() == id })
		if i < 0 {
			return nil, false, nil
		}
		return se.msgs[i], true, nil
	})
	if err != nil {
		return storage.AppendResult{}, err
	}
	if len(fresh.Prepared) > 0 {
		se.meta.Tally = fresh.Tally
		storage.DeriveTitle(&se.meta, fresh.Prepared)
		se.msgs = append(se.msgs[:len(se.msgs):len(se.msgs)], fresh.Prepared...)
		s.bump(se, storage.EventAppended, fresh.Prepared)
	}
	return storage.AppendResult{Revision: se.meta.Revision, MessageCount: int64(len(se.msgs)), Appended: int64(len(fresh.Prepared))}, nil
}

func (s *memStore) Update(_ context.Context, req storage.UpdateRequest) (*storage.Session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	se, err := s.find(req.Ref)
	if err != nil {
		return nil, err
	}
	next, changed := storage.ApplyUpdate(&se.meta, req)
	if !changed {
		return copyMeta(&se.meta), nil
	}
	if err := storage.CheckRevision(se.meta.ID, req.ExpectedRevision, se.meta.Revision); err != nil {
		return nil, err
	}
	if s.aliasTaken(next.Namespace, next.Alias, next.ID) {
		return nil, storage.AliasInUse(next.Namespace, next.Alias)
	}
	alias := next.Alias
	next.Alias = se.meta.Alias
	se.meta = *next
	s.setAlias(se, alias)
	s.bump(se, storage.EventUpdated, nil)
	return copyMeta(&se.meta), nil
}

func (s *memStore) Delete(_ context.Context, ref storage.Ref, expected uint64) error {
	return s.locked(func() error {
		se, err := s.find(ref)
		if err != nil {
			return err
		}
		if err := storage.CheckRevision(se.meta.ID, expected, se.meta.Revision); err != nil {
			return err
		}
		s.setAlias(se, "")
		delete(s.sessions, se.meta.ID)
		gone := copyMeta(&se.meta)
		gone.Revision++
		s.publish(gone.ID, storage.Event{Type: storage.EventDeleted, Revision: gone.Revision, Session: gone})
		return nil
	})
}

func (s *memStore) Fork(_ context.Context, req storage.ForkRequest) (*storage.Session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	src, err := s.find(req.Ref)
	if err != nil {
		return nil, err
	}
	n := req.MessageCount
	if err := storage.CheckCount(src.meta.ID, n, int64(len(src.msgs))); err != nil {
		return nil, err
	}
	if n == 0 {
		n = int64(len(src.msgs))
	}
	if s.aliasTaken(src.meta.Namespace, req.Alias, "") {
		return nil, storage.AliasInUse(src.meta.Namespace, req.Alias)
	}
	now := s.now()
	title, derived := req.Title, false
	if title == "" {
		title, derived = src.meta.Title, src.meta.TitleDerived
	}
	se := &memSession{msgs: src.msgs[:n:n], meta: storage.Session{
		ID: uuid.Must(uuid.NewV7()).String(), Namespace: src.meta.Namespace, Title: title, TitleDerived: derived, Summary: src.meta.Summary,
		CreatedAt: now, UpdatedAt: now, Revision: 1, MessageCount: n,
		Metadata: maps.Clone(src.meta.Metadata), Labels: maps.Clone(src.meta.Labels),
		Parent: &storage.ForkOrigin{SessionID: src.meta.ID, MessageCount: n},
		Tally:  storage.Recount(src.msgs[:n]), ExpireAfter: src.meta.ExpireAfter,
	}}
	se.setCompactions(storage.KeepCompactions(src.compactions, n))
	s.sessions[se.meta.ID] = se
	s.setAlias(se, req.Alias)
	return copyMeta(&se.meta), nil
}

func (s *memStore) Rewind(_ context.Context, req storage.RewindRequest) (*storage.Session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	se, err := s.find(req.Ref)
	if err != nil {
		return nil, err
	}
	if err := storage.CheckCount(se.meta.ID, req.MessageCount, int64(len(se.msgs))); err != nil {
		return nil, err
	}
	if req.MessageCount == int64(len(se.msgs)) {
		return copyMeta(&se.meta), nil
	}
	if err := storage.CheckRevision(se.meta.ID, req.ExpectedRevision, se.meta.Revision); err != nil {
		return nil, err
	}
	se.msgs = se.msgs[:req.MessageCount:req.MessageCount]
	se.meta.Tally = storage.Recount(se.msgs)
	se.setCompactions(storage.KeepCompactions(se.compactions, req.MessageCount))
	s.bump(se, storage.EventReplaced, nil)
	return copyMeta(&se.meta), nil
}

func (s *memStore) Search(ctx context.Context, opts storage.SearchOptions, yield func(storage.SearchHit) error) error {
	q := strings.ToLower(opts.Query)
	var hits []storage.SearchHit
	err := s.List(ctx, storage.ListOptions{Namespace: opts.Namespace}, func(meta *storage.Session) error {
		_, ms, err := s.Load(ctx, storage.Ref{Namespace: meta.Namespace, ID: meta.ID}, storage.LoadOptions{})
		if err != nil {
			return err
		}
		for _, f := range []string{meta.GivenTitle(), meta.Alias, meta.Summary} {
			if strings.Contains(strings.ToLower(f), q) {
				hits = append(hits, storage.SearchHit{Session: meta, MessageIndex: -1, Snippet: f})
				break
			}
		}
		for i, m := range ms {
			for _, txt := range storage.MessageTexts(m) {
				if strings.Contains(strings.ToLower(txt), q) {
					hits = append(hits, storage.SearchHit{Session: meta, MessageIndex: int64(i), Snippet: txt})
					break
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i, h := range hits {
		if opts.Limit > 0 && int64(i) >= opts.Limit {
			break
		}
		if err := yield(h); err != nil {
			return err
		}
	}
	return nil
}

func (s *memStore) Watch(_ context.Context, ref storage.Ref, from uint64) (*storage.Subscription, error) {
	var sub *storage.Subscription
	err := s.locked(func() error {
		se, err := s.find(ref)
		if err != nil {
			return err
		}
		sub, err = s.broker.Subscribe(se.meta.ID, se.meta.Revision, from)
		return err
	})
	return sub, err
}

func (s *memStore) Expired(_ context.Context, opts storage.ExpiredOptions, yield func(*storage.Session) error) error {
	var list []*storage.Session
	err := s.locked(func() error {
		for _, se := range s.sessions {
			if opts.Expires(&se.meta) && (opts.Limit == 0 || int64(len(list)) < opts.Limit) {
				list = append(list, copyMeta(&se.meta))
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, se := range list {
		if err := yield(se); err != nil {
			return err
		}
	}
	return nil
}

func (s *memStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.open = slices.DeleteFunc(s.open, func(o *memStore) bool { return o == s })
	s.broker.Close()
	return nil
}

func (s *memStore) Compact(_ context.Context, req storage.CompactRequest, summary storage.Messages) (*storage.Session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	se, err := s.find(req.Ref)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(se.msgs, func(m *sessiondv1.Message) bool { return m.GetId() == req.ThroughMessageID })
	if i < 0 {
		return nil, storage.ThroughNotFound(se.meta.ID, req.ThroughMessageID)
	}
	noop, err := storage.CheckCompact(&se.meta, req, int64(i), func() (*sessiondv1.Message, error) {
		m := new(sessiondv1.Message)
		return m, proto.Unmarshal(se.compactions[len(se.compactions)-1].Summary, m)
	}, se.msgs[i+1:])
	if err != nil {
		return nil, err
	}
	if !noop {
		now := s.now()
		c := storage.StoredCompaction{Compaction: storage.Compaction{
			ThroughCount: int64(i) + 1, ThroughID: req.ThroughMessageID, Revision: se.meta.Revision + 1,
			CreatedAt: now, SummaryID: summary.Prepared[0].GetId(),
		}, Summary: summary.Encoded[0]}
		se.setCompactions(append(se.compactions[:len(se.compactions):len(se.compactions)], c))
		s.bump(se, storage.EventCompacted, nil)
	}
	return copyMeta(&se.meta), nil
}
