package postgres_test

import (
	"testing"

	"github.com/sessiond/sessiond/storage"
	"github.com/sessiond/sessiond/storage/postgres"
	"github.com/sessiond/sessiond/storage/postgres/pgtest"
	"github.com/sessiond/sessiond/storage/storetest"
)

func TestConformance(t *testing.T) {
	pgtest.ServerDSN(t)
	storetest.RunConformance(t, func(t *testing.T) storage.Store {
		return open(t, pgtest.Schema(t))
	})
}

// open opens a store on dsn, closed when the test ends.
func open(t testing.TB, dsn string) storage.Store {
	t.Helper()
	d, err := postgres.Open(t.Context(), dsn, postgres.Options{MaxConns: 4, MinConns: 1})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	s := storage.New(d, storage.Limits{})
	t.Cleanup(func() { _ = s.Close() })
	return s
}
