package server

import (
	"context"
	"runtime/debug"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Interceptors. ServerOptions chains logging outside recovery, so that the
// log line of a call that panicked says INTERNAL like the client saw.

func (s *Server) logUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	s.logCall(ctx, info.FullMethod, start, err)
	return resp, err
}

func (s *Server) logStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	start := time.Now()
	err := handler(srv, ss)
	s.logCall(ss.Context(), info.FullMethod, start, err)
	return err
}

// callLevel says how loudly a finished call is logged. Successful calls and
// the client's own mistakes are debug: a REPL appends every turn, and an info
// line per call would drown what an operator needs. Codes that point at the
// server or its disk are warnings or errors.
func callLevel(c codes.Code) zapcore.Level {
	switch c {
	case codes.Internal, codes.Unknown, codes.DataLoss, codes.Unimplemented:
		return zapcore.ErrorLevel
	case codes.ResourceExhausted, codes.Unavailable, codes.DeadlineExceeded:
		return zapcore.WarnLevel
	default:
		return zapcore.DebugLevel
	}
}

func (s *Server) logCall(ctx context.Context, method string, start time.Time, err error) {
	code := status.Code(err)
	ce := s.log.Check(callLevel(code), "call")
	if ce == nil {
		return
	}
	fields := []zap.Field{
		zap.String("method", method),
		zap.String("code", code.String()),
		zap.Duration("duration", time.Since(start)),
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		fields = append(fields, zap.String("peer", p.Addr.String()))
	}
	if err != nil {
		fields = append(fields, zap.String("error", status.Convert(err).Message()))
	}
	ce.Write(fields...)
}

func (s *Server) recoverUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if r := recover(); r != nil {
			resp, err = nil, s.panicked(info.FullMethod, r)
		}
	}()
	return handler(ctx, req)
}

func (s *Server) recoverStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = s.panicked(info.FullMethod, r)
		}
	}()
	return handler(srv, ss)
}

// panicked logs a recovered panic with its stack and returns the INTERNAL
// status the client gets; the panic's value is not sent, like any internal
// detail.
func (s *Server) panicked(method string, r any) error {
	s.log.Error("panic in handler",
		zap.String("method", method),
		zap.Any("panic", r),
		zap.ByteString("stack", debug.Stack()),
	)
	return status.Error(codes.Internal, "internal error")
}
