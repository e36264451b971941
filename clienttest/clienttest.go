// Package clienttest runs sessiond for tests of code that uses the client
// SDK: in process (the real server over a file store, reached through
// bufconn or a loopback listener), or as the real daemon binary, which tests
// can kill and restart.
//
// It is part of the root module, not the SDK's (it needs the server), and its
// folder also holds the SDK's own tests against a real daemon.
package clienttest

import (
	"context"
	"fmt"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/test/bufconn"

	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/server"
	"github.com/sessiond/sessiond/storage"
	"github.com/sessiond/sessiond/storage/file"
)

// BufAddr is the address of an in-process server reached through bufconn.
const BufAddr = "passthrough:///bufnet"

// Server is sessiond in process: server.New over a file store in a
// directory, on a bufconn listener unless WithListener gives another.
type Server struct {
	dir      string
	grpcOpts []grpc.ServerOption
	tcpAddr  string // set when serving on a TCP listener

	mu    sync.Mutex // guards the fields below
	gs    *grpc.Server
	store *storage.Store
	buf   *bufconn.Listener // nil when stopped, or on TCP
}

// Option configures Start.
type Option func(*startOptions)

type startOptions struct {
	lis      net.Listener
	grpcOpts []grpc.ServerOption
}

// WithListener serves on lis (e.g. a loopback TCP listener) instead of
// bufconn. Restart listens again on the same TCP address.
func WithListener(lis net.Listener) Option {
	return func(o *startOptions) { o.lis = lis }
}

// WithGRPCServerOptions adds options (interceptors, credentials) to the gRPC
// server, after the server package's own.
func WithGRPCServerOptions(opts ...grpc.ServerOption) Option {
	return func(o *startOptions) { o.grpcOpts = append(o.grpcOpts, opts...) }
}

// Start serves sessiond with its data in dir.
func Start(dir string, opts ...Option) (*Server, error) {
	var o startOptions
	for _, opt := range opts {
		opt(&o)
	}
	s := &Server{dir: dir, grpcOpts: o.grpcOpts}
	if o.lis != nil {
		s.tcpAddr = o.lis.Addr().String()
	}
	if err := s.start(o.lis); err != nil {
		return nil, err
	}
	return s, nil
}

// NewServer starts an in-process server over bufconn with its data in a
// temporary directory, and stops it when the test ends.
func NewServer(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s, err := Start(t.TempDir(), opts...)
	if err != nil {
		t.Fatalf("clienttest: start: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

func (s *Server) start(lis net.Listener) error {
	store, err := file.Open(context.Background(), s.dir)
	if err != nil {
		return fmt.Errorf("clienttest: open store %s: %w", s.dir, err)
	}
	srv := server.New(store, server.WithBackend("file"))
	gs := grpc.NewServer(append(srv.ServerOptions(), s.grpcOpts...)...)
	srv.Register(gs)
	var buf *bufconn.Listener
	if lis == nil {
		buf = bufconn.Listen(1 << 20)
		lis = buf
	}
	s.mu.Lock()
	s.gs, s.store, s.buf = gs, store, buf
	s.mu.Unlock()
	go func() { _ = gs.Serve(lis) }()
	return nil
}

// Dir returns the data directory.
func (s *Server) Dir() string { return s.dir }

// Addr returns the address to Dial: BufAddr, or the TCP address.
func (s *Server) Addr() string {
	if s.tcpAddr != "" {
		return s.tcpAddr
	}
	return BufAddr
}

// DialOptions returns the options Dial needs to reach s (a bufconn dialer),
// followed by opts. While s is stopped, dialling fails as with a daemon that
// is down.
func (s *Server) DialOptions(opts ...client.DialOption) []client.DialOption {
	if s.tcpAddr != "" {
		return opts
	}
	dialer := func(ctx context.Context, _ string) (net.Conn, error) {
		s.mu.Lock()
		buf := s.buf
		s.mu.Unlock()
		if buf == nil {
			return nil, fmt.Errorf("clienttest: server stopped: %w", syscall.ECONNREFUSED)
		}
		return buf.DialContext(ctx)
	}
	return append([]client.DialOption{client.WithContextDialer(dialer)}, opts...)
}

// Dial connects a client to s and closes it when the test ends.
func (s *Server) Dial(t testing.TB, opts ...client.DialOption) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, s.Addr(), s.DialOptions(opts...)...)
	if err != nil {
		t.Fatalf("clienttest: dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Stop stops serving at once (open connections break, as when a daemon
// dies) and closes the store. Calling it again does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	gs, store := s.gs, s.store
	s.gs, s.store, s.buf = nil, nil, nil
	s.mu.Unlock()
	if gs == nil {
		return
	}
	gs.Stop()
	_ = store.Close()
}

// Restart stops s if it is running and serves again on the same data (and
// the same TCP address, if any).
func (s *Server) Restart() error {
	s.Stop()
	var lis net.Listener
	if s.tcpAddr != "" {
		var err error
		if lis, err = net.Listen("tcp", s.tcpAddr); err != nil {
			return fmt.Errorf("clienttest: listen again on %s: %w", s.tcpAddr, err)
		}
	}
	return s.start(lis)
}
