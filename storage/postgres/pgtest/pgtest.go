// Package pgtest gives tests a private PostgreSQL schema on the server that
// SESSIOND_TEST_POSTGRES_DSN names (scripts/test.sh starts one with
// scripts/postgres.sh). Without that variable a test is skipped with a
// message, except under CI=true, where it fails: CI must never pass by
// skipping the PostgreSQL tests.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// EnvDSN names the environment variable holding the test server's DSN.
const EnvDSN = "SESSIOND_TEST_POSTGRES_DSN"

// ServerDSN returns the test server's DSN, or skips (fails under CI=true)
// when there is none.
func ServerDSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(EnvDSN)
	if dsn == "" {
		msg := EnvDSN + " is not set: these tests need a PostgreSQL server; scripts/test.sh starts one (scripts/postgres.sh start DIR prints a DSN)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return dsn
}

// Schema creates a fresh schema on the test server, drops it when the test
// ends, and returns a DSN whose search_path is that schema (then public,
// where pg_trgm lives), so that every store a test opens starts empty and
// tests run in parallel.
func Schema(t testing.TB) string {
	t.Helper()
	dsn := ServerDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect to the test PostgreSQL (%s): %v", EnvDSN, err)
	}
	defer conn.Close(ctx)
	name := "t_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	// Tests of several packages race to create the extension; the losers
	// see a unique violation, and then it exists.
	if _, err := conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_trgm SCHEMA public"); err != nil {
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "23505" {
			t.Fatalf("create pg_trgm: %v", err)
		}
	}
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Errorf("drop schema %s: %v", name, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP SCHEMA "+name+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", name, err)
		}
	})
	return WithParam(dsn, "search_path", name+",public")
}

// WithParam returns dsn with its run-time parameter key set to value.
func WithParam(dsn, key, value string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" {
		return fmt.Sprintf("%s %s=%s", dsn, key, value)
	}
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String()
}
