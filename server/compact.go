package server

import (
	"context"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

const mCompact = "CompactSession"

// CompactSession implements SessionStoreService.
func (s *Server) CompactSession(ctx context.Context, req *sessiondv1.CompactSessionRequest) (*sessiondv1.CompactSessionResponse, error) {
	return withRef(s, mCompact, req.GetRef(), func(ref storage.Ref) (*sessiondv1.CompactSessionResponse, error) {
		sess, err := s.store.Compact(ctx, compactFromProto(ref, req))
		return &sessiondv1.CompactSessionResponse{Session: sessionToProto(sess)}, err
	})
}
