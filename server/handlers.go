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

// withRef checks the ref a request names and runs call on it, mapping
// call's error for method and the session.
func withRef[T any](s *Server, method string, pref *sessiondv1.SessionRef, call func(storage.Ref) (T, error)) (T, error) {
	var zero T
	ref, err := refArg("ref", pref)
	if err != nil {
		return zero, s.toStatus(method, err)
	}
	resp, err := call(ref)
	if err != nil {
		return zero, s.refStatus(method, &ref, err)
	}
	return resp, nil
}

// GetSession implements SessionStoreService.
func (s *Server) GetSession(ctx context.Context, req *sessiondv1.GetSessionRequest) (*sessiondv1.GetSessionResponse, error) {
	return withRef(s, mGet, req.GetRef(), func(ref storage.Ref) (*sessiondv1.GetSessionResponse, error) {
		sess, err := s.store.Get(ctx, ref)
		return &sessiondv1.GetSessionResponse{Session: sessionToProto(sess)}, err
	})
}

// AppendMessages implements SessionStoreService.
func (s *Server) AppendMessages(ctx context.Context, req *sessiondv1.AppendMessagesRequest) (*sessiondv1.AppendMessagesResponse, error) {
	return s.appendMessages(ctx, mAppend, req)
}

// appendMessages stores one append, for AppendMessages and for each
// request of AppendStream (method names the call in errors).
func (s *Server) appendMessages(ctx context.Context, method string, req *sessiondv1.AppendMessagesRequest) (*sessiondv1.AppendMessagesResponse, error) {
	return withRef(s, method, req.GetRef(), func(ref storage.Ref) (*sessiondv1.AppendMessagesResponse, error) {
		res, err := s.store.Append(ctx, storage.AppendRequest{Ref: ref, ExpectedRevision: req.GetExpectedRevision(), Messages: req.GetMessages()})
		return &sessiondv1.AppendMessagesResponse{Revision: res.Revision, MessageCount: res.MessageCount, AppendedCount: res.Appended}, err
	})
}

// UpdateSession implements SessionStoreService.
func (s *Server) UpdateSession(ctx context.Context, req *sessiondv1.UpdateSessionRequest) (*sessiondv1.UpdateSessionResponse, error) {
	return withRef(s, mUpdate, req.GetRef(), func(ref storage.Ref) (*sessiondv1.UpdateSessionResponse, error) {
		fields, err := maskFields(req.GetUpdateMask().GetPaths())
		if err == nil && fields&storage.UpdateExpireAfter != 0 {
			err = validDuration("session.expire_after", req.GetSession().GetExpireAfter())
		}
		if err != nil {
			return nil, err
		}
		sess, err := s.store.Update(ctx, updateFromProto(ref, req, fields))
		return &sessiondv1.UpdateSessionResponse{Session: sessionToProto(sess)}, underParent("session", sessionField, err)
	})
}

// DeleteSession implements SessionStoreService.
func (s *Server) DeleteSession(ctx context.Context, req *sessiondv1.DeleteSessionRequest) (*sessiondv1.DeleteSessionResponse, error) {
	return withRef(s, mDelete, req.GetRef(), func(ref storage.Ref) (*sessiondv1.DeleteSessionResponse, error) {
		return &sessiondv1.DeleteSessionResponse{}, s.store.Delete(ctx, ref, req.GetExpectedRevision())
	})
}

// ForkSession implements SessionStoreService.
func (s *Server) ForkSession(ctx context.Context, req *sessiondv1.ForkSessionRequest) (*sessiondv1.ForkSessionResponse, error) {
	return withRef(s, mFork, req.GetRef(), func(ref storage.Ref) (*sessiondv1.ForkSessionResponse, error) {
		sess, err := s.store.Fork(ctx, forkFromProto(ref, req))
		return &sessiondv1.ForkSessionResponse{Session: sessionToProto(sess)}, err
	})
}

// RewindSession implements SessionStoreService.
func (s *Server) RewindSession(ctx context.Context, req *sessiondv1.RewindSessionRequest) (*sessiondv1.RewindSessionResponse, error) {
	return withRef(s, mRewind, req.GetRef(), func(ref storage.Ref) (*sessiondv1.RewindSessionResponse, error) {
		sess, err := s.store.Rewind(ctx, rewindFromProto(ref, req))
		return &sessiondv1.RewindSessionResponse{Session: sessionToProto(sess)}, err
	})
}

// GetServerInfo implements SessionStoreService.
func (s *Server) GetServerInfo(ctx context.Context, _ *sessiondv1.GetServerInfoRequest) (*sessiondv1.GetServerInfoResponse, error) {
	resp := &sessiondv1.GetServerInfoResponse{
		Version: s.version,
		Backend: s.backend,
		Limits:  s.store.Limits().Proto(),
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
