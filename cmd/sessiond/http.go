package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/sessiond/sessiond/httpapi"
	"github.com/sessiond/sessiond/server"
)

// The HTTP side (--http-listen): package httpapi's JSON routes, event
// streams and OpenAPI document, plus the handlers other files mount with
// mountHTTP (the conversation viewer under /ui/).
//
// Every HTTP call becomes a gRPC call to a second grpc.Server in this
// process, reached over an in-memory connection: it serves the same
// server.Server with the same interceptors (call logs, panic recovery,
// limits, tokens), so that the HTTP side validates, limits, logs and
// authorises exactly as the gRPC side does. It has no transport
// credentials of its own (the HTTP listener holds the TLS), and the
// HTTP client's address is the call's peer (httpapi.PeerServerOptions).
// The HTTP listener follows --listen's rules: loopback unless TLS and
// tokens are on (or --insecure), the same certificates (reloaded the same
// way; mutual TLS too), and its own --max-connections cap.

// httpConfig is what --http-listen sets.
type httpConfig struct {
	listen string
}

func (c *httpConfig) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.listen, "http-listen", "", "serve the API as JSON over HTTP (and the /ui/ viewer) on this `host:port` or unix:/path; off when empty. Same loopback, TLS and token rules as --listen")
}

// check validates --http-listen's shape, so that its errors name it.
func (c *httpConfig) check(grpcListen string) error {
	if c.listen == "" {
		return nil
	}
	if rest, ok := strings.CutPrefix(c.listen, "unix:"); ok {
		if strings.TrimPrefix(rest, "//") == "" {
			return usagef("--http-listen %q names no socket path", c.listen)
		}
	} else if _, _, err := net.SplitHostPort(c.listen); err != nil {
		return usagef("--http-listen %q: want host:port or unix:/path: %v", c.listen, err)
	}
	if c.listen == grpcListen && !strings.HasSuffix(c.listen, ":0") {
		return usagef("--http-listen %q is also --listen: give them different addresses", c.listen)
	}
	return nil
}

// httpMount is a handler served on the HTTP listener beside the API.
type httpMount struct {
	pattern string
	h       http.Handler
}

// httpMounts are the handlers mountHTTP added.
var httpMounts []httpMount

// mountHTTP serves h for pattern (an http.ServeMux pattern such as "/ui/")
// on the --http-listen listener; call it from an init function. Patterns
// under /v1/ belong to the API.
func mountHTTP(pattern string, h http.Handler) {
	httpMounts = append(httpMounts, httpMount{pattern, h})
}

// httpSide is the bound --http-listen listener and, once started, what
// serves it. A nil *httpSide (--http-listen off) does nothing.
type httpSide struct {
	lis             *listener
	exposureWarning string

	internal *grpc.Server
	pipe     *bufconn.Listener
	conn     *grpc.ClientConn
	srv      *http.Server
	quiet    quietConns
	serveErr chan error
}

// listenHTTP binds --http-listen (nil when it is off), refusing an exposed
// address as --listen does. Like --listen, it is bound before the store
// opens.
func listenHTTP(ctx context.Context, cfg *config) (*httpSide, error) {
	if cfg.http.listen == "" {
		return nil, nil
	}
	lis, warning, err := listenChecked(ctx, cfg.http.listen, cfg.security.checkExposure)
	if err != nil {
		return nil, fmt.Errorf("--http-listen: %w", err)
	}
	return &httpSide{lis: lis, exposureWarning: warning}, nil
}

// close releases the listener when start was never reached.
func (hs *httpSide) close() {
	if hs != nil && hs.srv == nil {
		_ = hs.lis.Close()
	}
}

// start serves the HTTP side: srv behind its own in-process gRPC server,
// whose first options are first (the metrics interceptors, so that calls
// made over HTTP are counted with the others).
func (hs *httpSide) start(ctx context.Context, cfg *config, sec *security, srv *server.Server, maxConns int, log *zap.Logger, first ...grpc.ServerOption) error {
	if hs == nil {
		return nil
	}
	log = log.Named("http")
	opts := slices.Concat(first, httpapi.PeerServerOptions(), srv.ServerOptions())
	opts = append(opts, sec.authOptions(log)...)
	hs.internal = grpc.NewServer(opts...)
	srv.Register(hs.internal)
	hs.pipe = bufconn.Listen(1 << 20)
	go func() { _ = hs.internal.Serve(hs.pipe) }()
	conn, err := grpc.NewClient("passthrough:///sessiond-http",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return hs.pipe.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32), grpc.MaxCallSendMsgSize(math.MaxInt32)),
	)
	if err != nil {
		hs.internal.Stop()
		return fmt.Errorf("--http-listen: connect to the service: %w", err)
	}
	hs.conn = conn
	// A JSON body is larger than the protobuf frame it becomes (base64
	// for bytes, escapes in strings): allow twice --max-frame-bytes; the
	// service then enforces the frame limit itself.
	maxBody := min(2*cfg.limits.MaxFrameBytes+1<<20, math.MaxInt64/2)
	hopts := []httpapi.Option{httpapi.WithLogger(log), httpapi.WithMaxBodyBytes(maxBody)}
	if sec.tokens != nil {
		// Checked before a body is read, so that a caller without a token
		// costs no memory; the service authorises the call itself after.
		hopts = append(hopts, httpapi.WithBearerTokens(func(secret string) bool {
			_, ok := sec.tokens.Lookup(secret)
			return ok
		}))
	}
	if hs.lis.loopback && !strings.HasPrefix(hs.lis.display, "unix:") {
		// Browsers on this machine can reach a loopback port: refuse
		// names that are not loopback ones (DNS rebinding).
		hopts = append(hopts, httpapi.WithLoopbackHostsOnly())
	}
	for _, m := range httpMounts {
		hopts = append(hopts, httpapi.WithHandler(m.pattern, m.h))
	}
	handler, err := httpapi.New(ctx, conn, hopts...)
	if err != nil {
		_ = conn.Close()
		hs.internal.Stop()
		return fmt.Errorf("--http-listen: %w", err)
	}
	idle := cfg.maxConnIdle
	if idle == 0 {
		idle = 5 * time.Minute
	}
	hs.srv = &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       idle,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          zap.NewStdLog(log.WithOptions(zap.IncreaseLevel(zap.WarnLevel))),
		ConnState:         hs.quiet.track,
	}
	limited := newLimitListener(hs.lis, maxConns, log)
	limited.refuse = refusal(sec, maxConns, "http/1.1", refuseHTTP)
	var ln net.Listener = limited
	if sec.certs != nil {
		ln = tls.NewListener(ln, httpTLSConfig(sec.certs))
	}
	hs.serveErr = make(chan error, 1)
	go func() {
		if err := hs.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			hs.serveErr <- fmt.Errorf("serve HTTP on %s: %w", hs.lis.display, err)
		}
	}()
	fields := []zap.Field{zap.String("http_addr", hs.lis.display), zap.Bool("tls", sec.certs != nil)}
	if u := viewerURL(hs.lis.display, sec.certs != nil); u != "" {
		fields = append(fields, zap.String("viewer_url", u))
	}
	log.Info("serving JSON over HTTP", fields...)
	if hs.exposureWarning != "" {
		log.Warn(hs.exposureWarning, zap.String("http_addr", hs.lis.display))
	}
	return nil
}

// httpTLSConfig is the gRPC listener's TLS configuration (the same
// certificates, reloaded alike, and mutual TLS when on), offering HTTP/2
// and HTTP/1.1.
func httpTLSConfig(c *certs) *tls.Config {
	base := c.serverConfig()
	get := base.GetConfigForClient
	base.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		cfg, err := get(hello)
		if err != nil || cfg == nil {
			return cfg, err
		}
		cfg = cfg.Clone()
		cfg.NextProtos = []string{"h2", "http/1.1"}
		return cfg, nil
	}
	return base
}

// failed reports a listener that stopped serving (never, when off).
func (hs *httpSide) failed() <-chan error {
	if hs == nil || hs.serveErr == nil {
		return nil
	}
	return hs.serveErr
}

// shutdown stops accepting, lets requests in flight finish within timeout
// (event streams end when the service drains its watches), then cuts off
// the rest and stops the in-process gRPC server.
func (hs *httpSide) shutdown(timeout time.Duration, log *zap.Logger) {
	if hs == nil || hs.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := hs.quiet.shutdown(ctx, hs.srv); err != nil {
		log.Warn("shutdown timeout: cutting off HTTP requests still in flight")
		_ = hs.srv.Close()
	}
	_ = hs.conn.Close()
	hs.internal.Stop()
}

// stopTogether runs the gRPC server's graceful stop and the HTTP side's
// shutdown side by side, and returns when both are done.
func stopTogether(gs *grpc.Server, hs *httpSide, timeout time.Duration, log *zap.Logger) {
	var wg sync.WaitGroup
	wg.Go(func() { hs.shutdown(timeout, log) })
	gs.GracefulStop()
	wg.Wait()
}
