package client

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestMapErrorPerRPC(t *testing.T) {
	tests := []struct {
		op   rpc
		code codes.Code
		want error // nil: no sentinel
	}{
		{rpcGet, codes.NotFound, ErrNotFound},
		{rpcLoad, codes.NotFound, ErrNotFound},
		{rpcCreate, codes.AlreadyExists, ErrAliasInUse},
		{rpcUpdate, codes.AlreadyExists, ErrAliasInUse},
		{rpcFork, codes.AlreadyExists, ErrAliasInUse},
		{rpcSave, codes.AlreadyExists, ErrAliasInUse},
		{rpcAppend, codes.AlreadyExists, ErrMessageConflict},
		{rpcAppend, codes.Aborted, ErrConflict},
		{rpcSave, codes.Aborted, ErrConflict},
		{rpcRewind, codes.Aborted, ErrConflict},
		{rpcCreate, codes.InvalidArgument, ErrInvalid},
		{rpcRewind, codes.OutOfRange, ErrInvalid},
		{rpcWatch, codes.OutOfRange, ErrWatchReset},
		{rpcAppend, codes.ResourceExhausted, ErrTooLarge},
		{rpcLoad, codes.DataLoss, ErrDataLoss},
		{rpcList, codes.Unavailable, ErrUnavailable},
		{rpcGet, codes.Internal, nil},
		{rpcGet, codes.Unauthenticated, nil},
	}
	all := []error{ErrNotFound, ErrAliasInUse, ErrMessageConflict, ErrConflict, ErrInvalid,
		ErrTooLarge, ErrDataLoss, ErrWatchReset, ErrUnavailable, ErrClosed}
	for _, tt := range tests {
		t.Run(string(tt.op)+"/"+tt.code.String(), func(t *testing.T) {
			orig := status.Error(tt.code, "detail from server")
			err := mapError(context.Background(), tt.op, orig)
			for _, s := range all {
				if got := errors.Is(err, s); got != (s == tt.want) {
					t.Errorf("errors.Is(%v, %v) = %v, want %v", err, s, got, s == tt.want)
				}
			}
			st, ok := status.FromError(err)
			if !ok || st.Code() != tt.code {
				t.Errorf("status.FromError(%v) = %v, %v; want code %v", err, st, ok, tt.code)
			}
			if !errors.Is(err, orig) {
				t.Errorf("original status error not reachable from %v", err)
			}
			if st.Message() != "detail from server" || !strings.Contains(err.Error(), "detail from server") {
				t.Errorf("the server's message is lost: status message %q, error %q", st.Message(), err)
			}
			// A Handle's wrap of it keeps the status too.
			wrapped := errorf("save %s: %w", "s1", err)
			if st, _ := status.FromError(wrapped); st.Code() != tt.code || st.Message() != "detail from server" {
				t.Errorf("status of a wrapped error = %v, want code %v and the server's message", st, tt.code)
			}
			if tt.want != nil && !errors.Is(wrapped, tt.want) {
				t.Errorf("errors.Is(%v, %v) = false after a wrap", wrapped, tt.want)
			}
		})
	}
}

func TestMapErrorContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := mapError(ctx, rpcAppend, status.Error(codes.Canceled, "context canceled"))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("errors.Is(%v, context.Canceled) = false", err)
	}
	if mapError(ctx, rpcGet, nil) != nil {
		t.Error("mapError(nil) != nil")
	}
}

func TestRetryable(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{mapError(context.Background(), rpcAppend, status.Error(codes.Unavailable, "down")), true},
		{mapError(context.Background(), rpcAppend, status.Error(codes.DeadlineExceeded, "slow")), true},
		{mapError(context.Background(), rpcAppend, status.Error(codes.Aborted, "rev")), false},
		{mapError(context.Background(), rpcAppend, status.Error(codes.AlreadyExists, "id")), false},
		{mapError(context.Background(), rpcAppend, status.Error(codes.InvalidArgument, "role")), false},
		{mapError(context.Background(), rpcAppend, status.Error(codes.PermissionDenied, "no")), false},
		{ErrClosed, false},
	}
	for _, tt := range tests {
		if got := retryable(tt.err); got != tt.want {
			t.Errorf("retryable(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

func TestParseRef(t *testing.T) {
	tests := []struct {
		in, id, alias string
	}{
		{"0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", ""},
		{"0190A1B2-C3D4-7E5F-8A9B-0C1D2E3F4A5B", "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", ""},
		{"my-project", "", "my-project"},
		{"0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5", "", "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5"},
	}
	for _, tt := range tests {
		r := ParseRef(tt.in)
		if r.ID() != tt.id || r.Alias() != tt.alias || r.String() != tt.id+tt.alias {
			t.Errorf("ParseRef(%q) = id %q alias %q string %q, want %q %q", tt.in, r.ID(), r.Alias(), r.String(), tt.id, tt.alias)
		}
	}
}
