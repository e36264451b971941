package postgres_test

import (
	"fmt"
	"strings"
	"testing"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
	"github.com/sessiond/sessiond/storage/postgres"
	"github.com/sessiond/sessiond/storage/postgres/pgtest"
)

// BenchmarkGroupCommitBatch writes batches of 32 appends, each of one
// 1 KiB message to a session of its own: the time per batch, and the WAL
// PostgreSQL wrote per append (the search indexer's included). Commits do
// not wait for the WAL flush (synchronous_commit off), which is one per
// batch however it is written, so that the time is the statements'.
func BenchmarkGroupCommitBatch(b *testing.B) {
	const size = 32
	dsn := pgtest.Schema(b)
	if strings.Contains(dsn, "://") {
		dsn += "&synchronous_commit=off"
	} else {
		dsn += " synchronous_commit=off"
	}
	d, s := openDriver(b, dsn, 4)
	ctx := b.Context()
	refs := make([]storage.Ref, size)
	for i := range refs {
		se, err := s.Create(ctx, storage.CreateRequest{Namespace: "ns", Title: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		refs[i] = storage.Ref{Namespace: "ns", ID: se.ID}
	}
	content := string(make([]byte, 1024))
	errs := make(chan error, size)
	conn := connect(b, dsn)
	var start string
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&start); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for n := range b.N {
		b.StopTimer() // time the batch's write, not the appends queueing
		release := postgres.HoldAppends(b, d)
		for i, ref := range refs {
			msg := &sessiondv1.Message{Id: fmt.Sprint(n, "-", i), Role: sessiondv1.Role_ROLE_USER, Content: content}
			go func() {
				_, err := s.Append(ctx, storage.AppendRequest{Ref: ref, Messages: []*sessiondv1.Message{msg}})
				errs <- err
			}()
		}
		postgres.WaitQueued(b, d, size)
		b.StartTimer()
		release(size)
		for range refs {
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	var wal float64
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn() - $1::pg_lsn`, start).Scan(&wal); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(wal/float64(b.N*size), "WAL-bytes/append")
}
