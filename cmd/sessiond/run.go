package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/internal/buildinfo"
	"github.com/sessiond/sessiond/server"
	"github.com/sessiond/sessiond/storage"
	"github.com/sessiond/sessiond/storage/file"
	"github.com/sessiond/sessiond/storage/postgres"
)

// backends are the storage backends of this build, by --storage name. Each
// opens its store, which checks every request and enforces the limits.
var backends = map[string]func(ctx context.Context, cfg *config, log *zap.Logger) (*storage.Store, error){
	"file": func(ctx context.Context, cfg *config, log *zap.Logger) (*storage.Store, error) {
		// The data dir holds every conversation: private to its user.
		if err := os.MkdirAll(cfg.dataDir, 0o700); err != nil {
			return nil, fmt.Errorf("create data dir: %w", err)
		}
		cfg.maxOpenJournals = clampOpenJournals(cfg.maxOpenJournals, log)
		return file.Open(ctx, cfg.dataDir, file.WithLimits(cfg.limits), file.WithLogger(log.Named("storage")), file.WithMaxOpenJournals(cfg.maxOpenJournals),
			file.WithCacheBytes(cfg.cacheBytes), file.WithWatchHistoryBytes(cfg.watchHistory), file.WithFlushObserver(cfg.metrics.onFlush))
	},
	"postgres": func(ctx context.Context, cfg *config, log *zap.Logger) (*storage.Store, error) {
		st, err := openPostgres(ctx, cfg, log)
		if err != nil {
			return nil, err
		}
		cfg.ping = st
		return st, nil
	},
}

// storeWhere names where the store lives, for messages: never the DSN's
// password.
func storeWhere(cfg *config) string {
	if cfg.storage == "postgres" {
		return "database " + postgres.Redact(cfg.postgresDSN)
	}
	return cfg.dataDir
}

// run is the whole daemon; main only maps its error to an exit code. It
// serves until ctx ends (SIGINT/SIGTERM), then shuts down cleanly and
// returns nil.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseConfig(args, os.LookupEnv, stdout)
	if err != nil {
		return err
	}
	if cfg.showVersion {
		_, err := fmt.Fprintln(stdout, "sessiond", buildinfo.Version(version))
		return err
	}
	log, err := newLogger(cfg, stderr)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	return serve(ctx, cfg, log)
}

func serve(ctx context.Context, cfg *config, log *zap.Logger) (err error) {
	// Listen before opening the store: a busy port is the commonest start-up
	// failure and costs nothing to find, while opening a store may scan it.
	lis, exposureWarning, err := listenChecked(ctx, cfg.listen, cfg.security.checkExposure)
	if err != nil {
		return err
	}
	defer func() {
		// Serve closes the listener; closing again is harmless and covers
		// the early returns, removing a socket file we made.
		_ = lis.Close()
	}()
	sec, err := loadSecurity(&cfg.security)
	if err != nil {
		return err
	}
	web, err := listenHTTP(ctx, cfg)
	if err != nil {
		return err
	}
	defer web.close()
	mx, err := openMetrics(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer mx.close()

	store, err := backends[cfg.storage](ctx, cfg, log)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while starting: a clean exit
		}
		if errors.Is(err, storage.ErrLocked) {
			return &dataDirInUseError{dir: cfg.dataDir, err: err}
		}
		return fmt.Errorf("open %s store in %s: %w", cfg.storage, storeWhere(cfg), err)
	}
	defer func() {
		if cerr := store.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close store: %w", cerr)
		}
	}()

	ver := buildinfo.Version(version)
	srv := server.New(store,
		server.WithLogger(log.Named("server")),
		server.WithVersion(ver),
		server.WithBackend(cfg.storage),
		server.WithMaxLoads(cfg.maxLoads),
	)
	conns := newConnTracker()
	gs := grpc.NewServer(slices.Concat(conns.serverOptions(), mx.serverOptions(), srv.ServerOptions(), sec.serverOptions(log), connOptions(cfg))...)
	srv.Register(gs)
	hs := health.NewServer()
	drained := make(chan struct{})
	healthpb.RegisterHealthServer(gs, drainingHealth{Server: hs, drained: drained})
	// The server as a whole ("") and the session service.
	services := []string{"", sessiondv1.SessionStoreService_ServiceDesc.ServiceName}
	for _, name := range services {
		hs.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
	}
	reflection.Register(gs)
	if cfg.ping != nil {
		hctx, stopHealth := context.WithCancel(ctx)
		defer stopHealth()
		go watchHealth(hctx, cfg.ping, hs, services, time.Second, log.Named("health"))
	}

	mx.start(gs, store, sec)
	sweepCtx, stopSweep := context.WithCancel(ctx)
	var sweepers sync.WaitGroup
	sweepers.Go(func() {
		(&storage.Sweeper{Store: store, Defaults: cfg.retention, Interval: cfg.retentionInterval, Log: log.Named("retention")}).Run(sweepCtx)
	})
	sweepers.Go(func() {
		(&storage.StreamSweeper{Store: store, IdleTimeout: cfg.streamIdleTimeout, Log: log.Named("streams")}).Run(sweepCtx)
	})
	// The sweepers end before the store closes (defers run last first).
	defer func() {
		stopSweep()
		sweepers.Wait()
	}()

	maxConns := cfg.maxConns
	if maxConns == 0 {
		maxConns = autoMaxConnections(cfg.maxOpenJournals)
	}
	serveErr := make(chan error, 1)
	limited := newLimitListener(lis, maxConns, log)
	limited.refuse = refusal(sec, maxConns, http2.NextProtoTLS, refuseGRPC)
	go func() { serveErr <- gs.Serve(conns.listener(limited)) }()

	if err := web.start(ctx, cfg, sec, srv, maxConns, log, mx.serverOptions()...); err != nil {
		gs.Stop()
		return err
	}
	defer sec.startWatch(log.Named("security"))()

	log.Info("sessiond started", append([]zap.Field{
		zap.String("addr", lis.display),
		dataDirField(cfg),
		zap.String("store", storeWhere(cfg)),
		zap.String("storage", cfg.storage),
		zap.String("version", ver),
		zap.Int("max_connections", maxConns),
		zap.Stringer("retention", &cfg.retention),
		zap.Duration("retention_interval", cfg.retentionInterval),
		zap.Duration("stream_idle_timeout", cfg.streamIdleTimeout),
	}, sec.logFields()...)...)
	if exposureWarning != "" {
		log.Warn(exposureWarning, zap.String("addr", lis.display))
	}
	for _, w := range sec.warnings() {
		log.Warn(w)
	}

	select {
	case err := <-serveErr:
		hs.Shutdown()
		close(drained)
		srv.Drain()
		return fmt.Errorf("serve on %s: %w", lis.display, err)
	case err = <-web.failed():
		log.Error("the HTTP listener failed; shutting down", zap.Error(err))
	case <-ctx.Done():
	}

	log.Info("shutting down", zap.Duration("timeout", cfg.shutdownTimeout))
	shutdownStart := time.Now()
	// NOT_SERVING first, so that health-checking balancers move away; then
	// end watches (health's and the sessions'), which never finish on their
	// own; then drain the rest.
	hs.Shutdown()
	close(drained)
	srv.Drain()
	stopped := make(chan struct{})
	go func() {
		stopTogether(gs, web, cfg.shutdownTimeout, log.Named("http"))
		close(stopped)
	}()
	go conns.closeStalled(stopped, log)
	timer := time.NewTimer(cfg.shutdownTimeout)
	defer timer.Stop()
	select {
	case <-stopped:
	case <-timer.C:
		log.Warn("shutdown timeout: cutting off calls still in flight")
		gs.Stop()
		<-stopped
	}
	<-serveErr // nil after a stop
	log.Info("shutdown: calls ended", zap.Duration("took", time.Since(shutdownStart)))
	mx.close()
	log.Info("sessiond stopped")
	return err // nil, or why the HTTP listener failed
}

// connOptions bound what connections may hold: calls in progress on each,
// how long an idle one stays open, and how long a new one may take to send
// its HTTP/2 preface (10 s, so that silent sockets cannot hold
// --max-connections' places for long). The server also pings a silent
// client every minute and drops it if the ping is not answered in 20 s, and
// closes the connection of a client that pings more often than every 10 s.
func connOptions(cfg *config) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ConnectionTimeout(10 * time.Second),
		grpc.MaxConcurrentStreams(uint32(min(cfg.maxStreams, math.MaxUint32))),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle: cfg.maxConnIdle,
			Time:              time.Minute,
			Timeout:           20 * time.Second,
		}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             10 * time.Second,
			PermitWithoutStream: true,
		}),
	}
}

// newLogger builds the daemon's logger on stderr; stdout stays empty.
func newLogger(cfg *config, stderr io.Writer) (*zap.Logger, error) {
	level, err := zapcore.ParseLevel(cfg.logLevel)
	if err != nil {
		return nil, usagef("--log-level: %v", err)
	}
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	enc.EncodeDuration = zapcore.StringDurationEncoder // "2.1ms", not 0.0021
	var encoder zapcore.Encoder
	if cfg.logFormat == "console" {
		enc.EncodeLevel = zapcore.CapitalLevelEncoder
		encoder = zapcore.NewConsoleEncoder(enc)
	} else {
		encoder = zapcore.NewJSONEncoder(enc)
	}
	core := zapcore.NewCore(encoder, zapcore.Lock(zapcore.AddSync(stderr)), level)
	return zap.New(core, zap.ErrorOutput(zapcore.Lock(zapcore.AddSync(stderr)))), nil
}
