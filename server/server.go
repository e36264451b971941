// Package server is sessiond's gRPC face: it converts every request to a
// plain storage call, maps storage's errors to gRPC codes, and streams
// answers in bounded frames. It holds no session state of its own and knows
// nothing of files or SQL (see storage.Store).
//
// The request rules (names, ids, roles, messages, counts, and the store's
// Limits) are storage's, checked once by storage.Store; the
// server checks only what storage cannot see: absent fields, timestamps,
// page tokens, update-mask paths and the shape of a SaveSession stream.
// grpc-go refuses a frame over max_frame_bytes (ServerOptions sets its
// receive limit) before a handler runs. An invalid field is INVALID_ARGUMENT and a request
// over a limit RESOURCE_EXHAUSTED, both naming the field (and the limit) in
// their text and in google.rpc.BadRequest and ErrorInfo details (details.go).
// Errors follow one table in one function, toStatus; unexpected errors are
// logged and answered INTERNAL without detail.
//
// The interceptors from ServerOptions (go-grpc-middleware v2's logging and
// recovery) log every call in one line, naming the session and namespace
// the request names, with its code and a readable duration ("2.13ms"), and
// turn a panicking handler into INTERNAL, logged once with its stack, so
// that one bad request never takes the daemon down.
// An Authorizer (auth.go) adds bearer-token authentication and
// authorisation by role and namespace in front of every handler.
package server

import (
	"math"
	"sync"

	"go.uber.org/zap"
	"google.golang.org/grpc"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/internal/ratelog"
	"github.com/sessiond/sessiond/storage"
)

// Server implements sessiond.v1.SessionStoreService over a storage.Store.
// It is safe for concurrent use.
type Server struct {
	sessiondv1.UnimplementedSessionStoreServiceServer

	store   *storage.Store
	log     *zap.Logger
	version string
	backend string

	// cond logs persisting storage conditions (full, read-only, no
	// descriptor left) once, then at a bounded rate.
	cond *ratelog.Limiter
	// loads holds a token per LoadSession call in progress; its capacity is
	// the bound (WithMaxLoads).
	loads chan struct{}

	drainOnce sync.Once
	drained   chan struct{} // closed by Drain: watches end with UNAVAILABLE
}

// Option configures a Server.
type Option func(*Server)

// WithLogger sets the logger for call logs and internal errors (default nop).
func WithLogger(l *zap.Logger) Option {
	return func(s *Server) {
		if l != nil {
			s.log = l
		}
	}
}

// WithVersion sets the version GetServerInfo reports.
func WithVersion(v string) Option { return func(s *Server) { s.version = v } }

// WithBackend sets the backend name GetServerInfo reports (e.g. "file").
func WithBackend(b string) Option { return func(s *Server) { s.backend = b } }

// DefaultMaxLoads is how many LoadSession calls a Server serves at once
// unless WithMaxLoads says otherwise.
const DefaultMaxLoads = 64

// WithMaxLoads bounds the LoadSession calls in progress (default
// DefaultMaxLoads; values below 1 count as 1). Each holds at most one
// frame (about 1 MiB) besides the session's stored bytes, which the store
// shares among readers; one more is answered RESOURCE_EXHAUSTED.
func WithMaxLoads(n int) Option { return func(s *Server) { s.loads = make(chan struct{}, max(n, 1)) } }

// New returns a Server over store (made by storage.New), enforcing its
// limits.
func New(store *storage.Store, opts ...Option) *Server {
	s := &Server{
		store:   store,
		log:     zap.NewNop(),
		version: "devel",
		drained: make(chan struct{}),
		cond:    ratelog.New(0),
		loads:   make(chan struct{}, DefaultMaxLoads),
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Register adds the SessionStoreService to a gRPC server.
func (s *Server) Register(r grpc.ServiceRegistrar) {
	sessiondv1.RegisterSessionStoreServiceServer(r, s)
}

// ServerOptions returns the options a grpc.Server needs to serve s: the
// receive limit set to max_frame_bytes (grpc-go's default of 4 MiB would
// refuse requests the limits allow; a larger frame is RESOURCE_EXHAUSTED
// from grpc-go itself), the logging and panic-recovery interceptors, a
// pool of StreamWorkers goroutines that serve calls, fixed flow-control
// windows (StreamWindow, ConnWindow), and the codec that sends watch
// events encoded once for all watchers (without it, no watch event can be
// sent). grpc-go's own codec decodes requests: bytes no generated client
// sends (a string field holding invalid UTF-8, say) are its INTERNAL
// "error unmarshalling request", which the daemon logs (requestCodec).
func (s *Server) ServerOptions() []grpc.ServerOption {
	maxRecv := s.store.Limits().MaxFrameBytes
	if maxRecv > math.MaxInt32 {
		maxRecv = math.MaxInt32
	}
	unary, stream := s.interceptors()
	return []grpc.ServerOption{grpc.MaxRecvMsgSize(int(maxRecv)), unary, stream, s.codecOption(),
		grpc.NumStreamWorkers(StreamWorkers),
		grpc.InitialWindowSize(StreamWindow), grpc.InitialConnWindowSize(ConnWindow)}
}

// StreamWindow and ConnWindow are the flow-control windows ServerOptions
// grants each call's stream and each connection: how much a client may
// send before the server has read it. Setting them turns off grpc-go's
// window estimation, which, to find the bandwidth-delay product, answers
// data received with a PING (and a WINDOW_UPDATE) whenever none is
// outstanding: for unary calls of a few KiB, one more frame written by the
// daemon, and one more answered by the client, per call. These fixed
// windows keep a 64 MiB append streaming over a 10 ms round trip, and bound
// what one connection may have in flight to ConnWindow.
const (
	StreamWindow = 4 << 20
	ConnWindow   = 16 << 20
)

// StreamWorkers is how many goroutines ServerOptions keeps to serve calls.
// Without them grpc-go starts a goroutine per call, whose stack then grows
// (and is copied) through the interceptors, the handler and the store on
// every call. A call that finds every worker busy (most wait for a disk
// flush) gets its own goroutine, so the number bounds only the idle stacks
// kept (a few MiB), not the calls served at once.
const StreamWorkers = 64

// Drain ends every WatchSession stream with UNAVAILABLE and makes new ones
// fail the same way. Call it before grpc.Server.GracefulStop: watches never
// end on their own, so they would otherwise hold the drain until its
// deadline. Safe to call more than once.
func (s *Server) Drain() {
	s.drainOnce.Do(func() { close(s.drained) })
}
