package server

import (
	"context"
	"runtime/debug"
	"sync"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// Interceptors. The logging interceptor is go-grpc-middleware v2's, and
// so is the stream chain's panic recovery; ServerOptions chains them as
//
//	unary:  unaryCalls (ours: call info, recovery) -> logging -> handler
//	stream: callInfo (ours) -> logging -> recovery -> handler
//
// A call's line is logged after its panic is recovered, so the line of a
// call that panicked says INTERNAL, as the client saw. A callInfo in the
// call's context records the session the request names (for a stream,
// from its first request frame, which arrives after the interceptors have
// run) and a recovered panic, and the logging interceptor adds both to its
// "finished call" line. So every call logs one line that names its session
// and namespace, and a panic is logged once, on that line, with its stack.
// A unary call whose line the logger would not write skips the logging
// interceptor, and needs no callInfo (see unaryCalls).

// callInfo is what one call's log line says beyond the middleware's own
// fields. Its mutex guards every field: the handler's goroutine writes it,
// and the logging interceptor reads it after the handler returns.
type callInfo struct {
	mu sync.Mutex
	// The session the request names (named: it names one, or a
	// namespace), kept as strings: the log fields are made only for a line
	// that is written.
	named         bool
	ns, id, alias string
	panic         any
	stack         string
	// start and took are set for a unary call that ran before its line was
	// known to be written (see unaryCalls): the call's own start time and
	// duration, which the line then shows instead of the middleware's.
	start time.Time
	took  time.Duration
}

type callInfoKey struct{}

func callInfoFrom(ctx context.Context) *callInfo {
	ci, _ := ctx.Value(callInfoKey{}).(*callInfo)
	return ci
}

// noteRequest records the session req names, unless one is recorded
// already (a SaveSession names it in its first frame only).
func (ci *callInfo) noteRequest(req any) {
	ci.mu.Lock()
	defer ci.mu.Unlock()
	if !ci.named {
		ci.ns, ci.id, ci.alias, ci.named = requestSession(req)
	}
}

// requestSession returns the namespace, id and alias a request message
// names, and false for a message that names no namespace (a SaveSession
// frame after the header). The call log and the Authorizer both read it.
func requestSession(m any) (ns, id, alias string, ok bool) {
	var ref *sessiondv1.SessionRef
	switch r := m.(type) {
	case *sessiondv1.SaveSessionRequest:
		h := r.GetHeader()
		if h == nil {
			return "", "", "", false
		}
		ref = h.GetRef()
	case *sessiondv1.AppendStreamRequest:
		ref = r.GetAppend().GetRef()
	case *sessiondv1.CreateSessionRequest:
		return r.GetNamespace(), r.GetId(), r.GetAlias(), true
	case interface{ GetRef() *sessiondv1.SessionRef }:
		ref = r.GetRef()
	case interface{ GetNamespace() string }: // ListSessions, SearchSessions
		return r.GetNamespace(), "", "", true
	default:
		return "", "", "", false
	}
	return ref.GetNamespace(), ref.GetId(), ref.GetAlias(), true
}

func sessionFields(namespace, id, alias string) []any {
	f := []any{"namespace", namespace}
	if id != "" {
		f = append(f, "session_id", id)
	}
	if alias != "" {
		f = append(f, "session_alias", alias)
	}
	return f
}

// storageRefFields are the session fields of a ref already converted to storage's
// type, as zap fields, for the lines the error mapping logs.
func storageRefFields(ref *storage.Ref) []zap.Field {
	if ref == nil {
		return nil
	}
	return zapFields(sessionFields(ref.Namespace, ref.ID, ref.Alias))
}

// zapFields turns alternating keys and values into zap fields.
func zapFields(kv []any) []zap.Field {
	f := make([]zap.Field, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		key, _ := kv[i].(string)
		f = append(f, zap.Any(key, kv[i+1]))
	}
	return f
}

// logFields is the logging interceptor's hook for fields of our own.
func logFields(ctx context.Context, _ interceptors.CallMeta) logging.Fields {
	ci := callInfoFrom(ctx)
	if ci == nil {
		return nil
	}
	ci.mu.Lock()
	defer ci.mu.Unlock()
	var f logging.Fields
	if ci.named {
		f = sessionFields(ci.ns, ci.id, ci.alias)
	}
	if ci.panic != nil {
		f = append(f, "panic", ci.panic, "stack", ci.stack)
	}
	if !ci.start.IsZero() {
		// Fields given here win over the middleware's of the same name.
		f = append(f, "grpc.start_time", ci.start.Format(time.RFC3339Nano))
		f = append(f, readableDuration(ci.took)...)
	}
	return f
}

// unaryCalls is the unary chain's interceptor of ours: it recovers a
// panic in the handler and has logged, the logging interceptor, write the
// call's line. The middleware builds a line's fields (peer address, start
// time, service, method, ...) before the call and after it, whether or
// not the line is written, a real part of an append's cost; at the
// default level (info) a successful call's line (debug) is never written.
// So when the logger does not write debug lines, the call runs first, and
// only a call whose code is logged at a level the logger writes goes
// through logged afterwards, with a handler that answers what the call
// answered: the line is the middleware's, with the call's own start time
// and duration (callInfo). A quiet call makes no callInfo and adds no
// interceptor of its own to the chain.
func (s *Server) unaryCalls(logged grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if s.log.Core().Enabled(zapcore.DebugLevel) {
			ci := &callInfo{}
			ci.ns, ci.id, ci.alias, ci.named = requestSession(req)
			return logged(context.WithValue(ctx, callInfoKey{}, ci), req, info, func(ctx context.Context, req any) (any, error) {
				resp, p, err := callRecovering(ctx, req, handler)
				if p != nil {
					ci.mu.Lock()
					ci.panic, ci.stack = p.panic, p.stack
					ci.mu.Unlock()
				}
				return resp, err
			})
		}
		start := time.Now()
		resp, ci, err := callRecovering(ctx, req, handler)
		if !s.log.Core().Enabled(zapLevel(callLevel(status.Code(err)))) {
			return resp, err
		}
		if ci == nil {
			ci = &callInfo{}
		}
		ci.ns, ci.id, ci.alias, ci.named = requestSession(req)
		ci.start, ci.took = start, time.Since(start)
		return logged(context.WithValue(ctx, callInfoKey{}, ci), req, info, func(context.Context, any) (any, error) { return resp, err })
	}
}

// callRecovering runs a unary handler. A panic (or runtime.Goexit) in it
// answers INTERNAL, and comes back as a callInfo holding the panic and
// its stack; the panic's value is not sent, like any internal detail.
func callRecovering(ctx context.Context, req any, handler grpc.UnaryHandler) (resp any, panicked *callInfo, err error) {
	returned := false
	defer func() {
		if p := recover(); p != nil || !returned {
			resp, err = nil, status.Error(codes.Internal, "internal error")
			panicked = &callInfo{panic: p, stack: string(debug.Stack())}
		}
	}()
	resp, err = handler(ctx, req)
	returned = true
	return resp, nil, err
}

func wrapStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ci := &callInfo{}
	return handler(srv, &infoStream{ServerStream: ss, ctx: context.WithValue(ss.Context(), callInfoKey{}, ci), info: ci})
}

// infoStream gives a stream's handler the context holding its callInfo,
// and notes the session its request frames name.
type infoStream struct {
	grpc.ServerStream
	ctx  context.Context
	info *callInfo
}

func (s *infoStream) Context() context.Context { return s.ctx }

func (s *infoStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil {
		s.info.noteRequest(m)
	}
	return err
}

// recovered is the stream recovery interceptor's handler: it keeps the
// panic and its stack for the call's log line and answers INTERNAL; the
// panic's value is not sent, like any internal detail.
func recovered(ctx context.Context, p any) error {
	if ci := callInfoFrom(ctx); ci != nil {
		ci.mu.Lock()
		ci.panic, ci.stack = p, string(debug.Stack())
		ci.mu.Unlock()
	}
	return status.Error(codes.Internal, "internal error")
}

// callLevel says how loudly a finished call is logged. Successful calls and
// the client's own mistakes are debug: a REPL appends every turn, and an info
// line per call would drown what an operator needs. Codes that point at the
// server or its disk are warnings or errors.
func callLevel(c codes.Code) logging.Level {
	switch c {
	case codes.Internal, codes.Unknown, codes.DataLoss, codes.Unimplemented:
		return logging.LevelError
	case codes.ResourceExhausted, codes.Unavailable, codes.DeadlineExceeded:
		return logging.LevelWarn
	default:
		return logging.LevelDebug
	}
}

// readableDuration is the "duration" field: a duration as a person reads it,
// to three significant digits ("2.13ms", "153µs", "1.2s").
func readableDuration(d time.Duration) logging.Fields {
	return logging.Fields{"duration", roundDuration(d).String()}
}

// roundDuration rounds d to three significant digits.
func roundDuration(d time.Duration) time.Duration {
	unit := time.Duration(1)
	for v := d; v >= 1000 || v <= -1000; v /= 10 {
		unit *= 10
	}
	return d.Round(unit)
}

// zapLogger adapts a zap logger to the middleware's logging interface.
func zapLogger(l *zap.Logger) logging.Logger {
	return logging.LoggerFunc(func(_ context.Context, lvl logging.Level, msg string, fields ...any) {
		ce := l.Check(zapLevel(lvl), msg)
		if ce == nil {
			return
		}
		ce.Write(zapFields(fields)...)
	})
}

func zapLevel(l logging.Level) zapcore.Level {
	switch {
	case l >= logging.LevelError:
		return zapcore.ErrorLevel
	case l >= logging.LevelWarn:
		return zapcore.WarnLevel
	case l >= logging.LevelInfo:
		return zapcore.InfoLevel
	default:
		return zapcore.DebugLevel
	}
}

// interceptors returns the unary and stream interceptor chains.
func (s *Server) interceptors() (grpc.ServerOption, grpc.ServerOption) {
	logOpts := []logging.Option{
		logging.WithLogOnEvents(logging.FinishCall),
		logging.WithLevels(callLevel),
		logging.WithDurationField(readableDuration),
		logging.WithTimestampFormat(time.RFC3339Nano),
		logging.WithFieldsFromContextAndCallMeta(logFields),
		// Constant on every line of a gRPC-only daemon.
		logging.WithDisableLoggingFields(logging.SystemTag[0], logging.ComponentFieldKey),
	}
	recOpts := []recovery.Option{recovery.WithRecoveryHandlerContext(recovered)}
	logger := zapLogger(s.log)
	return grpc.ChainUnaryInterceptor(
			s.unaryCalls(logging.UnaryServerInterceptor(logger, logOpts...)),
		), grpc.ChainStreamInterceptor(
			wrapStream,
			logging.StreamServerInterceptor(logger, logOpts...),
			recovery.StreamServerInterceptor(recOpts...),
		)
}
