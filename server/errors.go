package server

import (
	"context"
	"errors"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sessiond/sessiond/storage"
)

// codeOf is the one table from storage's sentinel errors to gRPC codes
// (DESIGN.md "Errors"). Order matters only for errors that wrap several.
var codeOf = []struct {
	err  error
	code codes.Code
}{
	{storage.ErrNotFound, codes.NotFound},
	{storage.ErrAliasInUse, codes.AlreadyExists},
	{storage.ErrAlreadyExists, codes.AlreadyExists},
	{storage.ErrMessageConflict, codes.AlreadyExists},
	{storage.ErrConflict, codes.Aborted},
	{storage.ErrInvalid, codes.InvalidArgument},
	{errTooLarge, codes.ResourceExhausted},
	{storage.ErrNoSpace, codes.ResourceExhausted},
	{storage.ErrWatchReset, codes.OutOfRange},
	{storage.ErrDataLoss, codes.DataLoss},
	{storage.ErrClosed, codes.Unavailable},
	{storage.ErrLocked, codes.Unavailable},
	{context.Canceled, codes.Canceled},
	{context.DeadlineExceeded, codes.DeadlineExceeded},
}

// toStatus turns an error from storage or validation into a gRPC status
// error. Expected errors keep their message, which names the field, limit or
// session; anything else is logged in full and answered INTERNAL without
// detail, since it may carry paths or other internals.
func (s *Server) toStatus(method string, err error) error {
	if err == nil {
		return nil
	}
	for _, c := range codeOf {
		if errors.Is(err, c.err) {
			return status.Error(c.code, err.Error())
		}
	}
	// Errors that already carry a code: a failed Send or Recv on a stream,
	// or a status built by a handler.
	if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown {
		return st.Err()
	}
	s.log.Error("internal error", zap.String("method", method), zap.Error(err))
	return status.Error(codes.Internal, "internal error")
}
