package postgres

import (
	"context"
	"fmt"

	"github.com/sessiond/sessiond/storage"
)

var _ storage.StatsReporter = (*Store)(nil)

// statsQuery counts the sessions and sizes the tables (indexes and TOAST
// included) of the schema the connection's search_path names.
const statsQuery = `SELECT (SELECT count(*) FROM sessions),
	pg_total_relation_size('sessions'::regclass) + pg_total_relation_size('messages'::regclass) + pg_total_relation_size('events'::regclass)
	+ pg_total_relation_size('message_search'::regclass) + pg_total_relation_size('compactions'::regclass)
	+ pg_total_relation_size('session_filters'::regclass)`

// Stats reports the sessions and the tables' size (one query, which
// counts the sessions table: its cost grows with the sessions stored) and
// the connection pool's statistics. When the query fails, the pool's
// statistics are still returned, with the error. Safe for concurrent use.
func (s *Store) Stats(ctx context.Context) (storage.Stats, error) {
	ps := s.pool.Stat()
	st := storage.Stats{Pool: &storage.PoolStats{
		MaxConns:                int64(ps.MaxConns()),
		TotalConns:              int64(ps.TotalConns()),
		AcquiredConns:           int64(ps.AcquiredConns()),
		IdleConns:               int64(ps.IdleConns()),
		ConstructingConns:       int64(ps.ConstructingConns()),
		AcquireCount:            uint64(ps.AcquireCount()),
		AcquireDuration:         ps.AcquireDuration(),
		EmptyAcquireCount:       uint64(ps.EmptyAcquireCount()),
		EmptyAcquireWait:        ps.EmptyAcquireWaitTime(),
		CanceledAcquireCount:    uint64(ps.CanceledAcquireCount()),
		NewConnsCount:           uint64(ps.NewConnsCount()),
		MaxLifetimeDestroyCount: uint64(ps.MaxLifetimeDestroyCount()),
		MaxIdleDestroyCount:     uint64(ps.MaxIdleDestroyCount()),
	}}
	if err := s.pool.QueryRow(ctx, statsQuery).Scan(&st.Sessions, &st.DiskBytes); err != nil {
		return st, fmt.Errorf("postgres: stats: %w", mapErr(err))
	}
	return st, nil
}
