package server

import (
	"context"
	"fmt"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// Unary handlers: validate, call storage, convert, map errors. Nothing else.

const (
	mCreate = "CreateSession"
	mGet    = "GetSession"
	mAppend = "AppendMessages"
	mUpdate = "UpdateSession"
	mDelete = "DeleteSession"
	mFork   = "ForkSession"
	mRewind = "RewindSession"
)

// CreateSession implements SessionStoreService.
func (s *Server) CreateSession(ctx context.Context, req *sessiondv1.CreateSessionRequest) (*sessiondv1.CreateSessionResponse, error) {
	if err := s.validCreate(req); err != nil {
		return nil, s.toStatus(mCreate, err)
	}
	sess, err := s.store.Create(ctx, createFromProto(req))
	if err != nil {
		return nil, s.refStatus(mCreate, &storage.Ref{Namespace: req.GetNamespace(), ID: req.GetId()}, err)
	}
	return &sessiondv1.CreateSessionResponse{Session: sessionToProto(sess)}, nil
}

func (s *Server) validCreate(req *sessiondv1.CreateSessionRequest) error {
	if err := s.limits.checkFrame(req); err != nil {
		return err
	}
	if err := storage.ValidateNamespace(req.GetNamespace()); err != nil {
		return err
	}
	if id := req.GetId(); id != "" {
		canon, err := storage.ParseSessionID("id", id)
		if err != nil {
			return err
		}
		req.Id = canon
	}
	if err := validOptionalAlias("alias", req.GetAlias()); err != nil {
		return err
	}
	if err := s.limits.validSessionFields("", req.GetTitle(), req.GetSummary(), req.GetMetadata(), req.GetLabels()); err != nil {
		return err
	}
	if err := validTimestamp("created_at", req.GetCreatedAt()); err != nil {
		return err
	}
	if p := req.GetParent(); p != nil {
		canon, err := storage.ParseSessionID("parent.session_id", p.GetSessionId())
		if err != nil {
			return err
		}
		p.SessionId = canon
		if err := notNegative("parent.message_count", p.GetMessageCount()); err != nil {
			return err
		}
	}
	_, err := s.limits.checkMessages("messages", req.GetMessages(), 0, map[string]int{})
	return err
}

// GetSession implements SessionStoreService.
func (s *Server) GetSession(ctx context.Context, req *sessiondv1.GetSessionRequest) (*sessiondv1.GetSessionResponse, error) {
	ref, err := validRef("ref", req.GetRef())
	if err != nil {
		return nil, s.toStatus(mGet, err)
	}
	sess, err := s.store.Get(ctx, ref)
	if err != nil {
		return nil, s.refStatus(mGet, &ref, err)
	}
	return &sessiondv1.GetSessionResponse{Session: sessionToProto(sess)}, nil
}

// AppendMessages implements SessionStoreService.
func (s *Server) AppendMessages(ctx context.Context, req *sessiondv1.AppendMessagesRequest) (*sessiondv1.AppendMessagesResponse, error) {
	r := appendFromProto(req)
	ref, err := s.validAppend(req)
	if err != nil {
		return nil, s.toStatus(mAppend, err)
	}
	r.Ref = ref
	res, err := s.store.Append(ctx, r)
	if err != nil {
		return nil, s.refStatus(mAppend, &ref, err)
	}
	return &sessiondv1.AppendMessagesResponse{Revision: res.Revision, MessageCount: res.MessageCount}, nil
}

func (s *Server) validAppend(req *sessiondv1.AppendMessagesRequest) (storage.Ref, error) {
	if err := s.limits.checkFrame(req); err != nil {
		return storage.Ref{}, err
	}
	ref, err := validRef("ref", req.GetRef())
	if err != nil {
		return ref, err
	}
	if len(req.GetMessages()) == 0 {
		return ref, fmt.Errorf("messages is empty; an append needs at least one: %w", storage.ErrInvalid)
	}
	_, err = s.limits.checkMessages("messages", req.GetMessages(), 0, map[string]int{})
	return ref, err
}

// UpdateSession implements SessionStoreService.
func (s *Server) UpdateSession(ctx context.Context, req *sessiondv1.UpdateSessionRequest) (*sessiondv1.UpdateSessionResponse, error) {
	ref, fields, err := s.validUpdate(req)
	if err != nil {
		return nil, s.toStatus(mUpdate, err)
	}
	r := updateFromProto(req, fields)
	r.Ref = ref
	sess, err := s.store.Update(ctx, r)
	if err != nil {
		return nil, s.refStatus(mUpdate, &ref, err)
	}
	return &sessiondv1.UpdateSessionResponse{Session: sessionToProto(sess)}, nil
}

func (s *Server) validUpdate(req *sessiondv1.UpdateSessionRequest) (storage.Ref, storage.UpdateField, error) {
	if err := s.limits.checkFrame(req); err != nil {
		return storage.Ref{}, 0, err
	}
	ref, err := validRef("ref", req.GetRef())
	if err != nil {
		return ref, 0, err
	}
	fields, err := maskFields(req.GetUpdateMask().GetPaths())
	if err != nil {
		return ref, 0, err
	}
	// Only masked fields are checked: the others are ignored, as the mask says.
	in := req.GetSession()
	if fields&storage.UpdateAlias != 0 {
		if err := validOptionalAlias("session.alias", in.GetAlias()); err != nil {
			return ref, 0, err
		}
	}
	var title, summary string
	var metadata, labels map[string]string
	if fields&storage.UpdateTitle != 0 {
		title = in.GetTitle()
	}
	if fields&storage.UpdateSummary != 0 {
		summary = in.GetSummary()
	}
	if fields&storage.UpdateMetadata != 0 {
		metadata = in.GetMetadata()
	}
	if fields&storage.UpdateLabels != 0 {
		labels = in.GetLabels()
	}
	return ref, fields, s.limits.validSessionFields("session.", title, summary, metadata, labels)
}

// DeleteSession implements SessionStoreService.
func (s *Server) DeleteSession(ctx context.Context, req *sessiondv1.DeleteSessionRequest) (*sessiondv1.DeleteSessionResponse, error) {
	ref, err := validRef("ref", req.GetRef())
	if err != nil {
		return nil, s.toStatus(mDelete, err)
	}
	if err := s.store.Delete(ctx, ref, req.GetExpectedRevision()); err != nil {
		return nil, s.refStatus(mDelete, &ref, err)
	}
	return &sessiondv1.DeleteSessionResponse{}, nil
}

// ForkSession implements SessionStoreService.
func (s *Server) ForkSession(ctx context.Context, req *sessiondv1.ForkSessionRequest) (*sessiondv1.ForkSessionResponse, error) {
	r := forkFromProto(req)
	err := func() error {
		ref, err := validRef("ref", req.GetRef())
		if err != nil {
			return err
		}
		r.Ref = ref
		if err := notNegative("message_count", r.MessageCount); err != nil {
			return err
		}
		if err := validOptionalAlias("alias", r.Alias); err != nil {
			return err
		}
		return s.limits.checkTitle("title", r.Title)
	}()
	if err != nil {
		return nil, s.toStatus(mFork, err)
	}
	sess, err := s.store.Fork(ctx, r)
	if err != nil {
		return nil, s.refStatus(mFork, &r.Ref, err)
	}
	return &sessiondv1.ForkSessionResponse{Session: sessionToProto(sess)}, nil
}

// RewindSession implements SessionStoreService.
func (s *Server) RewindSession(ctx context.Context, req *sessiondv1.RewindSessionRequest) (*sessiondv1.RewindSessionResponse, error) {
	r := rewindFromProto(req)
	ref, err := validRef("ref", req.GetRef())
	if err == nil {
		err = notNegative("message_count", r.MessageCount)
	}
	if err != nil {
		return nil, s.toStatus(mRewind, err)
	}
	r.Ref = ref
	sess, err := s.store.Rewind(ctx, r)
	if err != nil {
		return nil, s.refStatus(mRewind, &ref, err)
	}
	return &sessiondv1.RewindSessionResponse{Session: sessionToProto(sess)}, nil
}

// GetServerInfo implements SessionStoreService.
func (s *Server) GetServerInfo(context.Context, *sessiondv1.GetServerInfoRequest) (*sessiondv1.GetServerInfoResponse, error) {
	return &sessiondv1.GetServerInfoResponse{
		Version: s.version,
		Backend: s.backend,
		Limits:  s.limits.toProto(),
	}, nil
}
