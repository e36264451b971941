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
// simple in-memory reference store. It checks the suite itself: every rule
// the suite asserts can be met, and the suite does not depend on one
// backend's accidents.
func TestConformanceMemStore(t *testing.T) {
	RunConformance(t, func(t *testing.T) storage.Store {
		s := newMemStore()
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

// memStore keeps everything in maps under one mutex.
type memStore struct {
	mu       sync.Mutex // guards everything below
	closed   bool
	sessions map[string]*memSession       // by id
	aliases  map[string]map[string]string // namespace -> alias -> id
	broker   *storage.Broker
	lastTime time.Time
}

type memSession struct {
	meta storage.Session
	msgs []*sessiondv1.Message
}

var _ storage.Store = (*memStore)(nil)

func newMemStore() *memStore {
	return &memStore{sessions: map[string]*memSession{}, aliases: map[string]map[string]string{}, broker: storage.NewBroker()}
}

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

func mapsEqual(a, b map[string]string) bool { return maps.Equal(a, b) }

// locked runs fn under the lock, after the closed check.
func (s *memStore) locked(fn func() error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return storage.ErrClosed
	}
	return fn()
}

func (s *memStore) find(ref storage.Ref) (*memSession, error) {
	ref, err := storage.ValidateRef(ref)
	if err != nil {
		return nil, err
	}
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

// bump records a change and tells the watchers.
func (s *memStore) bump(se *memSession, typ storage.EventType, appended []*sessiondv1.Message) {
	se.meta.Revision++
	se.meta.UpdatedAt = s.now()
	se.meta.MessageCount = int64(len(se.msgs))
	s.broker.Publish(se.meta.ID, storage.Event{Type: typ, Revision: se.meta.Revision, Session: copyMeta(&se.meta), Messages: cloneMsgs(appended)})
}

func (s *memStore) Create(_ context.Context, req storage.CreateRequest) (*storage.Session, error) {
	var out *storage.Session
	err := s.locked(func() error {
		if err := storage.ValidateNamespace(req.Namespace); err != nil {
			return err
		}
		if err := checkText(req.Title, req.Summary, req.Metadata, req.Labels); err != nil {
			return err
		}
		if req.Alias != "" {
			if err := storage.ValidateAlias(req.Alias); err != nil {
				return err
			}
		}
		now := s.now()
		ms, err := storage.PrepareMessages("messages", req.Messages, now)
		if err != nil {
			return err
		}
		id := ""
		if req.ID != "" {
			if id, err = storage.ParseSessionID("id", req.ID); err != nil {
				return err
			}
			if old, ok := s.sessions[id]; ok {
				if old.meta.Namespace == req.Namespace && old.meta.Revision == 1 && old.meta.Alias == req.Alias &&
					old.meta.Title == req.Title && old.meta.Summary == req.Summary &&
					mapsEqual(old.meta.Metadata, req.Metadata) && mapsEqual(old.meta.Labels, req.Labels) &&
					(req.CreatedAt.IsZero() || req.CreatedAt.Equal(old.meta.CreatedAt)) &&
					parentEqual(old.meta.Parent, req.Parent) &&
					slices.EqualFunc(old.msgs, req.Messages, storage.SameMessage) {
					out = copyMeta(&old.meta)
					return nil
				}
				return fmt.Errorf("mem: id %s: %w", id, storage.ErrAlreadyExists)
			}
		} else {
			id = uuid.Must(uuid.NewV7()).String()
		}
		if s.aliasTaken(req.Namespace, req.Alias, "") {
			return fmt.Errorf("mem: alias %q: %w", req.Alias, storage.ErrAliasInUse)
		}
		created := req.CreatedAt
		if created.IsZero() {
			created = now
		}
		se := &memSession{msgs: ms, meta: storage.Session{
			ID: id, Namespace: req.Namespace, Title: req.Title, Summary: req.Summary,
			CreatedAt: created, UpdatedAt: now, Revision: 1, MessageCount: int64(len(ms)),
			Metadata: maps.Clone(req.Metadata), Labels: maps.Clone(req.Labels),
		}}
		if req.Parent != nil {
			p := *req.Parent
			se.meta.Parent = &p
		}
		s.sessions[id] = se
		s.setAlias(se, req.Alias)
		out = copyMeta(&se.meta)
		return nil
	})
	return out, err
}

// checkText applies the storage text validators to session fields.
func checkText(title, summary string, metadata, labels map[string]string) error {
	return errors.Join(storage.ValidateText("title", title), storage.ValidateText("summary", summary),
		storage.ValidateStringMap("metadata", metadata), storage.ValidateStringMap("labels", labels))
}

func parentEqual(a, b *storage.ForkOrigin) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func (s *memStore) Get(_ context.Context, ref storage.Ref) (*storage.Session, error) {
	var out *storage.Session
	err := s.locked(func() error {
		se, err := s.find(ref)
		if err != nil {
			return err
		}
		out = copyMeta(&se.meta)
		return nil
	})
	return out, err
}

func (s *memStore) Load(_ context.Context, ref storage.Ref, opts storage.LoadOptions) (*storage.Session, []*sessiondv1.Message, error) {
	var out *storage.Session
	var ms []*sessiondv1.Message
	err := s.locked(func() error {
		if opts.Offset < 0 || opts.Limit < 0 || opts.Tail && opts.Offset != 0 {
			return fmt.Errorf("mem: load options %+v: %w", opts, storage.ErrInvalid)
		}
		se, err := s.find(ref)
		if err != nil {
			return err
		}
		n := int64(len(se.msgs))
		from, to := min(opts.Offset, n), n
		if opts.Limit > 0 {
			if opts.Tail {
				from = max(0, n-opts.Limit)
			} else {
				to = min(n, from+opts.Limit)
			}
		}
		out, ms = copyMeta(&se.meta), cloneMsgs(se.msgs[from:to])
		return nil
	})
	return out, ms, err
}

func (s *memStore) List(_ context.Context, opts storage.ListOptions, yield func(*storage.Session) error) error {
	var list []*storage.Session
	err := s.locked(func() error {
		if err := storage.ValidateNamespace(opts.Namespace); err != nil {
			return err
		}
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
			if !match {
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

func (s *memStore) Save(_ context.Context, req storage.SaveRequest) (*storage.Session, error) {
	var out *storage.Session
	err := s.locked(func() error {
		ms, err := storage.PrepareMessages("messages", req.Messages, s.now())
		if err != nil {
			return err
		}
		if err := checkText(req.Title, req.Summary, req.Metadata, nil); err != nil {
			return err
		}
		se, err := s.find(req.Ref)
		if err != nil {
			if !req.CreateIfMissing || !isNotFound(err) {
				return err
			}
			ref, _ := storage.ValidateRef(req.Ref)
			if _, taken := s.sessions[ref.ID]; taken {
				return fmt.Errorf("mem: id %s: %w", ref.ID, storage.ErrAlreadyExists)
			}
			id := ref.ID
			if id == "" {
				id = uuid.Must(uuid.NewV7()).String()
			}
			now := s.now()
			se = &memSession{msgs: ms, meta: storage.Session{
				ID: id, Namespace: ref.Namespace, Title: req.Title, Summary: req.Summary,
				CreatedAt: now, UpdatedAt: now, Revision: 1, MessageCount: int64(len(ms)), Metadata: maps.Clone(req.Metadata),
			}}
			s.sessions[id] = se
			s.setAlias(se, ref.Alias)
			out = copyMeta(&se.meta)
			return nil
		}
		if se.meta.Title == req.Title && se.meta.Summary == req.Summary && mapsEqual(se.meta.Metadata, req.Metadata) &&
			slices.EqualFunc(se.msgs, req.Messages, storage.SameMessage) {
			out = copyMeta(&se.meta)
			return nil
		}
		if req.ExpectedRevision != 0 && req.ExpectedRevision != se.meta.Revision {
			return fmt.Errorf("mem: %w", storage.ErrConflict)
		}
		se.meta.Title, se.meta.Summary, se.meta.Metadata, se.msgs = req.Title, req.Summary, maps.Clone(req.Metadata), ms
		s.bump(se, storage.EventReplaced, nil)
		out = copyMeta(&se.meta)
		return nil
	})
	return out, err
}

func isNotFound(err error) bool { return errors.Is(err, storage.ErrNotFound) }

func (s *memStore) Append(_ context.Context, req storage.AppendRequest) (storage.AppendResult, error) {
	var out storage.AppendResult
	err := s.locked(func() error {
		ms, err := storage.PrepareMessages("messages", req.Messages, s.now())
		if err != nil {
			return err
		}
		se, err := s.find(req.Ref)
		if err != nil {
			return err
		}
		stored := 0
		for _, m := range req.Messages {
			if m.GetId() == "" {
				continue
			}
			i := slices.IndexFunc(se.msgs, func(x *sessiondv1.Message) bool { return x.GetId() == m.GetId() })
			if i < 0 {
				continue
			}
			if !storage.SameMessage(se.msgs[i], m) {
				return fmt.Errorf("mem: message %s: %w", m.GetId(), storage.ErrMessageConflict)
			}
			stored++
		}
		if stored == len(req.Messages) && stored > 0 {
			out = storage.AppendResult{Revision: se.meta.Revision, MessageCount: int64(len(se.msgs))}
			return nil
		}
		if stored > 0 {
			return fmt.Errorf("mem: batch mixes stored and new messages: %w", storage.ErrMessageConflict)
		}
		if req.ExpectedRevision != 0 && req.ExpectedRevision != se.meta.Revision {
			return fmt.Errorf("mem: %w", storage.ErrConflict)
		}
		se.msgs = append(se.msgs, ms...)
		s.bump(se, storage.EventAppended, ms)
		out = storage.AppendResult{Revision: se.meta.Revision, MessageCount: int64(len(se.msgs))}
		return nil
	})
	return out, err
}

func (s *memStore) Update(_ context.Context, req storage.UpdateRequest) (*storage.Session, error) {
	var out *storage.Session
	err := s.locked(func() error {
		if req.Fields == 0 {
			return fmt.Errorf("mem: no fields: %w", storage.ErrInvalid)
		}
		if err := checkText(req.Title, req.Summary, req.Metadata, req.Labels); err != nil {
			return err
		}
		if req.Fields&storage.UpdateAlias != 0 && req.Alias != "" {
			if err := storage.ValidateAlias(req.Alias); err != nil {
				return err
			}
		}
		se, err := s.find(req.Ref)
		if err != nil {
			return err
		}
		m := &se.meta
		f := req.Fields
		same := (f&storage.UpdateAlias == 0 || m.Alias == req.Alias) &&
			(f&storage.UpdateTitle == 0 || m.Title == req.Title) &&
			(f&storage.UpdateSummary == 0 || m.Summary == req.Summary) &&
			(f&storage.UpdateMetadata == 0 || mapsEqual(m.Metadata, req.Metadata)) &&
			(f&storage.UpdateLabels == 0 || mapsEqual(m.Labels, req.Labels))
		if same {
			out = copyMeta(m)
			return nil
		}
		if req.ExpectedRevision != 0 && req.ExpectedRevision != m.Revision {
			return fmt.Errorf("mem: %w", storage.ErrConflict)
		}
		if f&storage.UpdateAlias != 0 && s.aliasTaken(m.Namespace, req.Alias, m.ID) {
			return fmt.Errorf("mem: alias %q: %w", req.Alias, storage.ErrAliasInUse)
		}
		if f&storage.UpdateAlias != 0 {
			s.setAlias(se, req.Alias)
		}
		if f&storage.UpdateTitle != 0 {
			m.Title = req.Title
		}
		if f&storage.UpdateSummary != 0 {
			m.Summary = req.Summary
		}
		if f&storage.UpdateMetadata != 0 {
			m.Metadata = maps.Clone(req.Metadata)
		}
		if f&storage.UpdateLabels != 0 {
			m.Labels = maps.Clone(req.Labels)
		}
		s.bump(se, storage.EventUpdated, nil)
		out = copyMeta(m)
		return nil
	})
	return out, err
}

func (s *memStore) Delete(_ context.Context, ref storage.Ref, expected uint64) error {
	return s.locked(func() error {
		se, err := s.find(ref)
		if err != nil {
			return err
		}
		if expected != 0 && expected != se.meta.Revision {
			return fmt.Errorf("mem: %w", storage.ErrConflict)
		}
		s.setAlias(se, "")
		delete(s.sessions, se.meta.ID)
		s.broker.Publish(se.meta.ID, storage.Event{Type: storage.EventDeleted, Revision: se.meta.Revision + 1, Session: copyMeta(&se.meta)})
		return nil
	})
}

func (s *memStore) Fork(_ context.Context, req storage.ForkRequest) (*storage.Session, error) {
	var out *storage.Session
	err := s.locked(func() error {
		if req.Alias != "" {
			if err := storage.ValidateAlias(req.Alias); err != nil {
				return err
			}
		}
		if err := checkText(req.Title, "", nil, nil); err != nil {
			return err
		}
		src, err := s.find(req.Ref)
		if err != nil {
			return err
		}
		n := req.MessageCount
		if n < 0 || n > int64(len(src.msgs)) {
			return fmt.Errorf("mem: message_count %d: %w", n, storage.ErrInvalid)
		}
		if n == 0 {
			n = int64(len(src.msgs))
		}
		if s.aliasTaken(src.meta.Namespace, req.Alias, "") {
			return fmt.Errorf("mem: alias %q: %w", req.Alias, storage.ErrAliasInUse)
		}
		now := s.now()
		title := req.Title
		if title == "" {
			title = src.meta.Title
		}
		se := &memSession{msgs: cloneMsgs(src.msgs[:n]), meta: storage.Session{
			ID: uuid.Must(uuid.NewV7()).String(), Namespace: src.meta.Namespace, Title: title, Summary: src.meta.Summary,
			CreatedAt: now, UpdatedAt: now, Revision: 1, MessageCount: n,
			Metadata: maps.Clone(src.meta.Metadata), Labels: maps.Clone(src.meta.Labels),
			Parent: &storage.ForkOrigin{SessionID: src.meta.ID, MessageCount: n},
		}}
		s.sessions[se.meta.ID] = se
		s.setAlias(se, req.Alias)
		out = copyMeta(&se.meta)
		return nil
	})
	return out, err
}

func (s *memStore) Rewind(_ context.Context, req storage.RewindRequest) (*storage.Session, error) {
	var out *storage.Session
	err := s.locked(func() error {
		se, err := s.find(req.Ref)
		if err != nil {
			return err
		}
		if req.MessageCount < 0 || req.MessageCount > int64(len(se.msgs)) {
			return fmt.Errorf("mem: message_count %d: %w", req.MessageCount, storage.ErrInvalid)
		}
		if req.MessageCount == int64(len(se.msgs)) {
			out = copyMeta(&se.meta)
			return nil
		}
		if req.ExpectedRevision != 0 && req.ExpectedRevision != se.meta.Revision {
			return fmt.Errorf("mem: %w", storage.ErrConflict)
		}
		se.msgs = se.msgs[:req.MessageCount:req.MessageCount]
		s.bump(se, storage.EventReplaced, nil)
		out = copyMeta(&se.meta)
		return nil
	})
	return out, err
}

func (s *memStore) Search(ctx context.Context, opts storage.SearchOptions, yield func(storage.SearchHit) error) error {
	if opts.Query == "" {
		if err := s.locked(func() error { return nil }); err != nil {
			return err
		}
		return fmt.Errorf("mem: empty query: %w", storage.ErrInvalid)
	}
	q := strings.ToLower(opts.Query)
	var hits []storage.SearchHit
	err := s.List(ctx, storage.ListOptions{Namespace: opts.Namespace}, func(meta *storage.Session) error {
		_, ms, err := s.Load(ctx, storage.Ref{Namespace: meta.Namespace, ID: meta.ID}, storage.LoadOptions{})
		if err != nil {
			return err
		}
		for _, f := range []string{meta.Title, meta.Alias, meta.Summary} {
			if strings.Contains(strings.ToLower(f), q) {
				hits = append(hits, storage.SearchHit{Session: meta, MessageIndex: -1, Snippet: f})
				break
			}
		}
		for i, m := range ms {
			texts := []string{m.GetContent()}
			for _, p := range m.GetParts() {
				if p.GetText() != "" {
					texts = append(texts, p.GetText())
				}
			}
			for _, tc := range m.GetToolCalls() {
				texts = append(texts, tc.GetArguments())
			}
			for _, txt := range texts {
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

func (s *memStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return storage.ErrClosed
	}
	s.closed = true
	s.broker.Close()
	return nil
}
