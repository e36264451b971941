package main

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sessiond/sessiond/storage"
	"github.com/sessiond/sessiond/storage/postgres"
)

// openPostgres opens the PostgreSQL driver on --postgres-dsn. The DSN is
// logged only with its password blanked. Until the database answers
// (the first start of a stack, a database restarting) it retries for
// --postgres-connect-timeout; a schema newer than this binary is fatal at
// once.
func openPostgres(ctx context.Context, cfg *config, log *zap.Logger) (*storage.Store, error) {
	log = log.Named("storage")
	log.Info("opening PostgreSQL store", zap.String("dsn", postgres.Redact(cfg.postgresDSN)),
		zap.Int32("max_conns", cfg.postgresMaxConns), zap.Int32("min_conns", cfg.postgresMinConns))
	deadline := time.Now().Add(cfg.postgresConnectTimeout)
	for {
		d, err := postgres.Open(ctx, cfg.postgresDSN, postgres.Options{
			MaxConns: cfg.postgresMaxConns, MinConns: cfg.postgresMinConns, Logger: log, Limits: cfg.limits,
			OnFlush: cfg.metrics.onFlush,
		})
		if err == nil || !errors.Is(err, storage.ErrUnavailable) || time.Now().After(deadline) || ctx.Err() != nil {
			return d, err
		}
		log.Warn("database unreachable; retrying", zap.Error(err))
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// watchHealth sets the health status from p every interval until ctx
// ends: NOT_SERVING while the database is unreachable, so that balancers
// send calls to replicas that can answer them, and SERVING again when it
// is back. Transitions are logged.
func watchHealth(ctx context.Context, p storage.Pinger, hs *health.Server, services []string, interval time.Duration, log *zap.Logger) {
	serving := true
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, interval)
		err := p.Ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if ok := err == nil; ok != serving {
			serving = ok
			st := healthpb.HealthCheckResponse_SERVING
			if ok {
				log.Info("database reachable again: serving")
			} else {
				st = healthpb.HealthCheckResponse_NOT_SERVING
				log.Warn("database unreachable: health NOT_SERVING until it is back", zap.Error(err))
			}
			for _, svc := range services {
				hs.SetServingStatus(svc, st)
			}
		}
	}
}
