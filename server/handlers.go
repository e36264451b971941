package server

import (
	"context"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/internal/auth"
	"github.com/sessiond/sessiond/storage"
)

// Unary handlers: convert, call storage, convert back, map errors. Nothing
// else: storage checks the request.

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
	err := validTimestamp("created_at", req.GetCreatedAt())
	if err == nil {
		err = validDuration("expire_after", req.GetExpireAfter())
	}
	if err != nil {
		return nil, s.toStatus(mCreate, err)
	}
	sess, err := s.store.Create(ctx, createFromProto(req))
	if err != nil {
		return nil, s.refStatus(mCreate, &storage.Ref{Namespace: req.GetNamespace(), ID: req.GetId()}, err)
	}
	return &sessiondv1.CreateSessionResponse{Session: sessionToProto(sess)}, nil
}

// GetSession implements SessionStoreService.
func (s *Server) GetSession(ctx context.Context, req *sessiondv1.GetSessionRequest) (*sessiondv1.GetSessionResponse, error) {
	ref, err := refArg("ref", req.GetRef())
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
	return s.appendMessages(ctx, mAppend, req)
}

// appendMessages stores one append, for AppendMessages and for each
// request of AppendStream (method names the call in errors).
func (s *Server) appendMessages(ctx context.Context, method string, req *sessiondv1.AppendMessagesRequest) (*sessiondv1.AppendMessagesResponse, error) {
	ref, err := refArg("ref", req.GetRef())
	if err != nil {
		return nil, s.toStatus(method, err)
	}
	res, err := s.store.Append(ctx, storage.AppendRequest{Ref: ref, ExpectedRevision: req.GetExpectedRevision(), Messages: req.GetMessages()})
	if err != nil {
		return nil, s.refStatus(method, &ref, err)
	}
	return &sessiondv1.AppendMessagesResponse{Revision: res.Revision, MessageCount: res.MessageCount, AppendedCount: res.Appended}, nil
}

// UpdateSession implements SessionStoreService.
func (s *Server) UpdateSession(ctx context.Context, req *sessiondv1.UpdateSessionRequest) (*sessiondv1.UpdateSessionResponse, error) {
	ref, err := refArg("ref", req.GetRef())
	var fields storage.UpdateField
	if err == nil {
		fields, err = maskFields(req.GetUpdateMask().GetPaths())
	}
	if err == nil && fields&storage.UpdateExpireAfter != 0 {
		err = validDuration("session.expire_after", req.GetSession().GetExpireAfter())
	}
	if err != nil {
		return nil, s.toStatus(mUpdate, err)
	}
	r := updateFromProto(req, fields)
	r.Ref = ref
	sess, err := s.store.Update(ctx, r)
	if err != nil {
		return nil, s.refStatus(mUpdate, &ref, underParent("session", sessionField, err))
	}
	return &sessiondv1.UpdateSessionResponse{Session: sessionToProto(sess)}, nil
}

// DeleteSession implements SessionStoreService.
func (s *Server) DeleteSession(ctx context.Context, req *sessiondv1.DeleteSessionRequest) (*sessiondv1.DeleteSessionResponse, error) {
	ref, err := refArg("ref", req.GetRef())
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
	ref, err := refArg("ref", req.GetRef())
	if err != nil {
		return nil, s.toStatus(mFork, err)
	}
	r.Ref = ref
	sess, err := s.store.Fork(ctx, r)
	if err != nil {
		return nil, s.refStatus(mFork, &r.Ref, err)
	}
	return &sessiondv1.ForkSessionResponse{Session: sessionToProto(sess)}, nil
}

// RewindSession implements SessionStoreService.
func (s *Server) RewindSession(ctx context.Context, req *sessiondv1.RewindSessionRequest) (*sessiondv1.RewindSessionResponse, error) {
	r := rewindFromProto(req)
	ref, err := refArg("ref", req.GetRef())
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
func (s *Server) GetServerInfo(ctx context.Context, _ *sessiondv1.GetServerInfoRequest) (*sessiondv1.GetServerInfoResponse, error) {
	resp := &sessiondv1.GetServerInfoResponse{
		Version: s.version,
		Backend: s.backend,
		Limits:  s.limits.Proto(),
	}
	// The caller's own scope, so that a client (the viewer's namespace
	// picker) can offer the namespaces it may use.
	if tok, ok := callerToken(ctx); ok {
		access := &sessiondv1.TokenAccess{Name: tok.Name, Role: tok.Role.String()}
		for _, ns := range tok.Namespaces {
			if ns == auth.AllNamespaces {
				access.AllNamespaces = true
			} else {
				access.Namespaces = append(access.Namespaces, ns)
			}
		}
		resp.Token = access
	}
	return resp, nil
}
