package server

import (
	"context"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

const mCompact = "CompactSession"

// CompactSession implements SessionStoreService.
func (s *Server) CompactSession(ctx context.Context, req *sessiondv1.CompactSessionRequest) (*sessiondv1.CompactSessionResponse, error) {
	r := compactFromProto(req)
	ref, err := refArg("ref", req.GetRef())
	if err != nil {
		return nil, s.toStatus(mCompact, err)
	}
	r.Ref = ref
	sess, err := s.store.Compact(ctx, r)
	if err != nil {
		return nil, s.refStatus(mCompact, &ref, err)
	}
	return &sessiondv1.CompactSessionResponse{Session: sessionToProto(sess)}, nil
}
