package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/sessiond/sessiond/internal/auth"
	"github.com/sessiond/sessiond/internal/buildinfo"
	"github.com/sessiond/sessiond/internal/metrics"
	"github.com/sessiond/sessiond/storage"
)

// metricsConfig is what --metrics-listen and --pprof set.
type metricsConfig struct {
	listen string
	pprof  bool
	// onFlush is the store's flush observer: the metrics' when
	// --metrics-listen is on, else nil. Set by openMetrics before the store
	// opens.
	onFlush func(storage.FlushRecord)
}

func (c *metricsConfig) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.listen, "metrics-listen", "", "serve Prometheus metrics at http://`host:port`/metrics (off when empty); a non-loopback address needs TLS (the --tls-* files) and --auth-tokens, or --insecure")
	fs.BoolVar(&c.pprof, "pprof", false, "with --metrics-listen: serve net/http/pprof under /debug/pprof/ on the same listener")
}

func (c *metricsConfig) check() error {
	if c.listen == "" {
		if c.pprof {
			return usagef("--pprof needs --metrics-listen: the profiles are served on the metrics listener")
		}
		return nil
	}
	if strings.HasPrefix(c.listen, "unix:") {
		return usagef("--metrics-listen %q: want host:port, not a unix socket", c.listen)
	}
	if _, _, err := net.SplitHostPort(c.listen); err != nil {
		return usagef("--metrics-listen %q: want host:port: %v", c.listen, err)
	}
	return nil
}

// checkMetricsExposure applies --listen's rule to --metrics-listen: a
// non-loopback address needs TLS and tokens, or --insecure (then it returns
// a warning for the log).
func (c *securityConfig) checkMetricsExposure(addr string, loopback bool) (warning string, err error) {
	if _, err := c.checkExposure(addr, loopback); err == nil {
		if loopback || c.tlsCert != "" && c.authTokens != "" {
			return "", nil
		}
		return fmt.Sprintf("--insecure: serving metrics on a non-loopback address without TLS or tokens: anyone who can reach %s may read them (and the profiles, with --pprof)", addr), nil
	}
	return "", usagef("refusing to serve metrics on %s without TLS and --auth-tokens: it is not a loopback address, so anyone who can reach it could read the daemon's metrics (and profiles, with --pprof). "+
		"Fix: give --tls-cert FILE --tls-key FILE and --auth-tokens FILE (Prometheus then scrapes over https with a bearer token); "+
		"or use --metrics-listen 127.0.0.1:PORT; or, behind your own protection, add --insecure", addr)
}

// metricsServer is the --metrics-listen listener and what it serves. A nil
// *metricsServer (no --metrics-listen) does nothing.
type metricsServer struct {
	m       *metrics.Metrics
	lis     net.Listener
	display string
	pprof   bool
	log     *zap.Logger

	srv       *http.Server
	quiet     quietConns
	served    chan error
	closeOnce sync.Once
}

// openMetrics binds --metrics-listen, after checking its exposure as serve
// checks --listen's, and sets cfg's flush observer. It returns nil without
// --metrics-listen. Serving starts with start.
func openMetrics(ctx context.Context, cfg *config, log *zap.Logger) (*metricsServer, error) {
	addr := cfg.metrics.listen
	if addr == "" {
		return nil, nil
	}
	lis, warning, err := listenChecked(ctx, addr, cfg.security.checkMetricsExposure)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen: %w", err)
	}
	log = log.Named("metrics")
	if warning != "" {
		log.Warn(warning, zap.String("addr", lis.display))
	}
	m := metrics.New(buildinfo.Version(version), cfg.storage)
	cfg.metrics.onFlush = m.ObserveFlush
	return &metricsServer{m: m, lis: lis, display: lis.display, pprof: cfg.metrics.pprof, log: log}, nil
}

// serverOptions are the gRPC interceptors that count and time calls: to
// come first among the server's options.
func (s *metricsServer) serverOptions() []grpc.ServerOption {
	if s == nil {
		return nil
	}
	return s.m.ServerOptions()
}

// start initialises the gRPC series of gs's services, watches the store's
// statistics, and serves: over TLS when the daemon has certificates, and
// with bearer tokens when it has a token file.
func (s *metricsServer) start(gs *grpc.Server, store *storage.Store, sec *security) {
	if s == nil {
		return
	}
	s.m.InitializeGRPC(gs)
	s.m.WatchStore(store, s.log)
	s.srv = &http.Server{
		Handler:           requireToken(s.m.Handler(s.pprof, s.log), sec.tokens),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          zap.NewStdLog(s.log),
		ConnState:         s.quiet.track,
	}
	s.served = make(chan error, 1)
	tls := sec.certs != nil
	go func() {
		if tls {
			s.srv.TLSConfig = sec.certs.serverConfig()
			s.served <- s.srv.ServeTLS(s.lis, "", "")
		} else {
			s.served <- s.srv.Serve(s.lis)
		}
	}()
	scheme := "http"
	if tls {
		scheme = "https"
	}
	s.log.Info("serving metrics", zap.String("url", scheme+"://"+s.display+"/metrics"),
		zap.Bool("pprof", s.pprof), zap.Bool("auth", sec.tokens != nil))
}

// close stops serving, letting scrapes in progress finish for up to 5 s.
// Safe to call more than once, and before start.
func (s *metricsServer) close() {
	if s == nil {
		return
	}
	s.closeOnce.Do(func() {
		if s.srv == nil {
			_ = s.lis.Close()
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.quiet.shutdown(ctx, s.srv); err != nil {
			_ = s.srv.Close()
		}
		if err := <-s.served; err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("metrics listener failed", zap.Error(err))
		}
	})
}

// requireToken guards the metrics listener with the daemon's bearer tokens
// (nil: no --auth-tokens, nothing to check). Any token may read /metrics,
// which holds counts, never sessions; /debug/pprof/ needs an admin token
// for all namespaces ("*"), since profiles show the process's internals.
func requireToken(next http.Handler, tokens *auth.Keeper) http.Handler {
	if tokens == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := auth.Token{}, false
		if secret, valid := auth.ParseBearer(r.Header.Get("Authorization")); valid {
			tok, ok = tokens.Lookup(secret)
		}
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sessiond"`)
			http.Error(w, `unauthenticated: send "Authorization: Bearer <token>" with a token of the daemon's --auth-tokens file`, http.StatusUnauthorized)
			return
		}
		if strings.HasPrefix(r.URL.Path, "/debug/pprof") && !(tok.Can(auth.RoleAdmin) && slices.Contains(tok.Namespaces, auth.AllNamespaces)) {
			http.Error(w, fmt.Sprintf("permission denied: token %q may not read profiles; /debug/pprof/ needs an admin token for all namespaces (\"*\")", tok.Name), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}
