package client

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Sentinel errors. Every error an RPC returns wraps one of them (when its
// gRPC code has a meaning here) and the original gRPC status, so callers test
// errors.Is(err, client.ErrNotFound) and can still reach the status with
// status.FromError or status.Code.
var (
	// ErrNotFound: no session with that id or alias in the namespace.
	ErrNotFound = errors.New("session not found")
	// ErrAliasInUse: the alias (or the client-chosen session id) is taken in
	// CreateSession, UpdateSession, ForkSession or a SaveSession that creates.
	ErrAliasInUse = errors.New("alias in use")
	// ErrMessageConflict: AppendMessages carried a message id that the session
	// already holds with other content (the daemon stores nothing of that
	// batch; messages it holds with the same content are merely skipped).
	ErrMessageConflict = errors.New("message id in use with other content")
	// ErrConflict: the session is not at the expected revision; another
	// writer changed it. A Handle answers it with Reload.
	ErrConflict = errors.New("revision conflict")
	// ErrInvalid: a request field is malformed or out of range; the message
	// names the field.
	ErrInvalid = errors.New("invalid argument")
	// ErrTooLarge: a message, frame or field is over a server limit (named in
	// the message), or the daemon's disk is full.
	ErrTooLarge = errors.New("over a server limit")
	// ErrDataLoss: the stored session failed its checksum; the daemon keeps
	// serving every other session.
	ErrDataLoss = errors.New("stored session is damaged")
	// ErrWatchReset: a watch cannot continue; reload the session and watch
	// again from its current revision.
	ErrWatchReset = errors.New("watch must reload")
	// ErrUnavailable: the daemon cannot be reached or is shutting down. Writes
	// that fail with it may be retried: the SDK's appends are idempotent.
	ErrUnavailable = errors.New("sessiond unavailable")
	// ErrMessageState: AppendDelta or FinishMessage named a message that
	// is not open, or a delta's offset is past the end of the message (the
	// message gives its length).
	ErrMessageState = errors.New("message is not in the state the write needs")
	// ErrClosed: the Client or Handle has been closed.
	ErrClosed = errors.New("closed")
	// ErrSpool: a handle's spool (WithSpool) could not be written, or a
	// spool file found by Open was damaged or conflicted with the session;
	// the message names the file, which is kept.
	ErrSpool = errors.New("spool")
)

// rpc names an RPC for error mapping and messages.
type rpc string

// The RPCs, as error messages name them.
const (
	rpcCreate rpc = "CreateSession"
	rpcGet    rpc = "GetSession"
	rpcLoad   rpc = "LoadSession"
	rpcList   rpc = "ListSessions"
	rpcSave   rpc = "SaveSession"
	rpcAppend rpc = "AppendMessages"
	// rpcAppendStream is an append sent over AppendStream.
	rpcAppendStream rpc = "AppendStream"
	rpcUpdate       rpc = "UpdateSession"
	rpcDelete       rpc = "DeleteSession"
	rpcFork         rpc = "ForkSession"
	rpcRewind       rpc = "RewindSession"
	rpcSearch       rpc = "SearchSessions"
	rpcWatch        rpc = "WatchSession"
	rpcInfo         rpc = "GetServerInfo"
	rpcCompact      rpc = "CompactSession"
	rpcDelta        rpc = "AppendDelta"
	rpcFinish       rpc = "FinishMessage"
)

// sentinelFor maps a gRPC code back to a sentinel. The meaning of a code
// depends on the RPC: ALREADY_EXISTS is a taken alias or id where sessions
// are made or renamed, but a clashing message id in AppendMessages.
func sentinelFor(op rpc, code codes.Code) error {
	switch code {
	case codes.NotFound:
		return ErrNotFound
	case codes.AlreadyExists:
		if op == rpcAppend || op == rpcAppendStream {
			return ErrMessageConflict
		}
		return ErrAliasInUse
	case codes.FailedPrecondition:
		if op == rpcDelta || op == rpcFinish {
			return ErrMessageState
		}
		// FAILED_PRECONDITION is not in the contract elsewhere, but a proxy
		// or a future server may use it for the same "state changed" meaning.
		return ErrConflict
	case codes.Aborted:
		return ErrConflict
	case codes.InvalidArgument:
		return ErrInvalid
	case codes.OutOfRange:
		if op == rpcWatch {
			return ErrWatchReset
		}
		return ErrInvalid
	case codes.ResourceExhausted:
		return ErrTooLarge
	case codes.DataLoss:
		return ErrDataLoss
	case codes.Unavailable:
		return ErrUnavailable
	case codes.Unauthenticated:
		return ErrUnauthenticated
	case codes.PermissionDenied:
		return ErrPermissionDenied
	}
	return nil
}

// mapError turns an RPC error into one that wraps the sentinel for its code
// (if any), the original status error, and ctx's error when the call ended
// because ctx did.
func mapError(ctx context.Context, op rpc, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrClosed) {
		return err
	}
	st, ok := status.FromError(err)
	if !ok {
		if ctx.Err() != nil {
			return errorf("client: %s: %w", op, errors.Join(ctx.Err(), err))
		}
		return errorf("client: %s: %w", op, err)
	}
	code := st.Code()
	if (code == codes.Canceled || code == codes.DeadlineExceeded) && ctx.Err() != nil {
		return errorf("client: %s: %w: %w", op, ctx.Err(), err)
	}
	if s := sentinelFor(op, code); s != nil {
		return errorf("client: %s: %w: %w", op, s, err)
	}
	return errorf("client: %s: %w", op, err)
}

// retryable reports whether a write that failed with err may succeed if sent
// again: the daemon was unreachable, the call timed out, or its outcome is
// unknown. Conflicts, refusals and closed handles are final.
func retryable(err error) bool {
	if err == nil {
		return false
	}
	for _, final := range []error{ErrNotFound, ErrAliasInUse, ErrMessageConflict, ErrConflict,
		ErrInvalid, ErrTooLarge, ErrDataLoss, ErrClosed, ErrSpool, ErrMessageState} {
		if errors.Is(err, final) {
			return false
		}
	}
	switch status.Code(err) {
	case codes.Unauthenticated, codes.PermissionDenied, codes.Unimplemented:
		return false
	}
	return true
}

// errorf is fmt.Errorf for the package's errors. When the result wraps an
// RPC's status error, status.FromError and status.Code on it still find the
// daemon's status as it was sent (code, message, details); on a plain wrap
// they would answer a status whose message is the whole error chain.
func errorf(format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	var gs interface{ GRPCStatus() *status.Status }
	if errors.As(err, &gs) && gs.GRPCStatus() != nil {
		return &statusError{err: err, st: gs.GRPCStatus()}
	}
	return err
}

// statusError is an error chain that carries the status of the RPC failure
// it wraps.
type statusError struct {
	err error
	st  *status.Status
}

func (e *statusError) Error() string              { return e.err.Error() }
func (e *statusError) Unwrap() error              { return e.err }
func (e *statusError) GRPCStatus() *status.Status { return e.st }
