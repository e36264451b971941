package server

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sessiond/sessiond/storage"
)

// codeOf is the one table from storage's sentinel errors to gRPC codes.
// Order matters only for errors that wrap several.
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
	{storage.ErrTooLarge, codes.ResourceExhausted},
	{storage.ErrNoSpace, codes.ResourceExhausted},
	{storage.ErrWatchReset, codes.OutOfRange},
	{storage.ErrDataLoss, codes.DataLoss},
	{storage.ErrClosed, codes.Unavailable},
	{storage.ErrLocked, codes.Unavailable},
	{storage.ErrUnavailable, codes.Unavailable},
	{storage.ErrMessageState, codes.FailedPrecondition},
	{storage.ErrUnsupported, codes.Unimplemented},
	{context.Canceled, codes.Canceled},
	{context.DeadlineExceeded, codes.DeadlineExceeded},
}

// toStatus turns an error from storage or validation into a gRPC status
// error; see refStatus. It is for calls that name no one session.
func (s *Server) toStatus(method string, err error) error {
	return s.refStatus(method, nil, err)
}

// refStatus turns an error from storage or validation into a gRPC status
// error for a call about the session ref names (nil: none).
//
// What a client reads is written here or by package storage, never by a
// backend: a backend's wording, paths and OS errors are its internals. So a
// missing session is answered in the server's words, naming the ref; damage,
// a full disk and a closed store get a fixed message and their detail goes
// to the log, since it holds paths. The other expected errors keep their
// message, which storage's rules word (storage.FieldError names the field,
// storage.LimitError the limit, CheckRevision the revisions, AliasInUse the
// alias), and which a Driver must keep free of internals; invalid fields,
// limits and a full disk also get google.rpc details (errorDetails).
// Anything else is logged in full and answered INTERNAL without detail.
func (s *Server) refStatus(method string, ref *storage.Ref, err error) error {
	if err == nil {
		return nil
	}
	for _, c := range codeOf {
		if errors.Is(err, c.err) {
			return withDetails(status.New(c.code, s.publicMessage(method, c.err, ref, err)), err).Err()
		}
	}
	// Errors that already carry a code: a failed Send or Recv on a stream,
	// or a status built by a handler.
	if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown {
		return st.Err()
	}
	s.log.Error("internal error", s.errFields(method, ref, err)...)
	return status.Error(codes.Internal, "internal error")
}

// publicMessage is the status message for err, which wraps sentinel.
func (s *Server) publicMessage(method string, sentinel error, ref *storage.Ref, err error) string {
	switch sentinel {
	case storage.ErrNotFound:
		if ref != nil {
			return describeRef(*ref) + " not found"
		}
		return "session not found"
	case storage.ErrAlreadyExists:
		// A fork's ref is its source, not the id that clashed.
		if ref != nil && ref.ID != "" && method != mFork {
			return fmt.Sprintf("session id %s is already in use", ref.ID)
		}
		return "a session with that id already exists"
	case storage.ErrDataLoss:
		s.log.Error("damaged session", s.errFields(method, ref, err)...)
		what := "the session"
		if ref != nil {
			what = describeRef(*ref)
		}
		return what + " is damaged: its stored data failed a checksum or cannot be read; other sessions are unaffected, and the daemon's log has the details"
	case storage.ErrNoSpace:
		s.cond.Log(s.log, zapcore.ErrorLevel, "no space", "storage full", s.errFields(method, ref, err)...)
		return "the daemon's storage is full; nothing was written"
	case storage.ErrClosed, storage.ErrLocked:
		s.log.Warn("store unavailable", s.errFields(method, ref, err)...)
		return "the store is closed; the daemon is shutting down"
	case storage.ErrUnavailable:
		s.cond.Log(s.log, zapcore.WarnLevel, "unavailable", "store unavailable", s.errFields(method, ref, err)...)
		return "the daemon's storage cannot serve this now (database unreachable, no file descriptor left, a read-only data dir or a failing disk; its log says which); retry later (appends with message ids are safe to retry)"
	}
	return err.Error()
}

// errFields are the fields of a line the error mapping logs: the method,
// the session the call named, and the error.
func (s *Server) errFields(method string, ref *storage.Ref, err error) []zap.Field {
	return append(append([]zap.Field{zap.String("method", method)}, storageRefFields(ref)...), zap.Error(err))
}

// describeRef names a session as a client asked for it.
func describeRef(ref storage.Ref) string {
	ns := storage.DescribeNamespace(ref.Namespace)
	if ref.ID != "" {
		return fmt.Sprintf("session %s in %s", ref.ID, ns)
	}
	return fmt.Sprintf("session with alias %q in %s", ref.Alias, ns)
}
