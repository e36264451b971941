package storetest

import (
	"context"
	"slices"
	"time"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

var _ storage.LiveDriver = (*memStore)(nil)

// stored finds a message of se by id, for the shared rule functions.
func (se *memSession) stored(id string) (*sessiondv1.Message, bool, error) {
	i := slices.IndexFunc(se.msgs, func(x *sessiondv1.Message) bool { return x.GetId() == id })
	if i < 0 {
		return nil, false, nil
	}
	return se.msgs[i], true, nil
}

// replaceLast puts m in place of se's last message. The slice is copied:
// forks may share its array.
func (se *memSession) replaceLast(m *sessiondv1.Message) {
	se.msgs = slices.Clone(se.msgs)
	se.msgs[len(se.msgs)-1] = m
}

func (s *memStore) AppendDelta(_ context.Context, req storage.DeltaRequest, limits storage.Limits) (storage.DeltaResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	se, err := s.find(req.Ref)
	if err != nil {
		return storage.DeltaResult{}, err
	}
	next, open, _, applied, err := storage.CheckDelta(se.meta.ID, se.meta.Tally, req.Delta, limits, se.stored)
	if err != nil {
		return storage.DeltaResult{}, err
	}
	if next != nil {
		se.replaceLast(next)
		se.meta.Revision++
		se.meta.UpdatedAt = s.now()
		s.publish(se.meta.ID, storage.Event{Type: storage.EventDelta, Revision: se.meta.Revision, Session: copyMeta(&se.meta), Delta: applied})
		open = next
	}
	return storage.DeltaResult{Revision: se.meta.Revision, Length: int64(len(open.GetContent())), ReasoningLength: int64(len(open.GetReasoning().GetText()))}, nil
}

func (s *memStore) FinishMessage(_ context.Context, req storage.FinishRequest, limits storage.Limits) (storage.FinishResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	se, err := s.find(req.Ref)
	if err != nil {
		return storage.FinishResult{}, err
	}
	closed, cur, _, tally, err := storage.CheckFinish(se.meta.ID, se.meta.Tally, se.meta.UpdatedAt, req, limits, se.stored)
	if err != nil {
		return storage.FinishResult{}, err
	}
	if closed == nil {
		return storage.FinishResult{Revision: se.meta.Revision, Message: cloneMsgs([]*sessiondv1.Message{cur})[0]}, nil
	}
	se.replaceLast(closed)
	se.meta.Tally = tally
	s.bump(se, storage.EventFinished, []*sessiondv1.Message{closed})
	return storage.FinishResult{Revision: se.meta.Revision, Message: cloneMsgs([]*sessiondv1.Message{closed})[0], Closed: true}, nil
}

func (s *memStore) Streaming(_ context.Context, idleBefore time.Time, yield func(*storage.Session) error) error {
	var list []*storage.Session
	err := s.locked(func() error {
		for _, se := range s.sessions {
			if se.meta.OpenMessageID != "" && se.meta.UpdatedAt.Before(idleBefore) {
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
