package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage/postgres/pgtest"
)

// privatePostgres starts a PostgreSQL server of the test's own with
// scripts/postgres.sh, for a test that restarts it (the shared test server
// serves other packages' tests meanwhile), and returns its folder and DSN.
// It runs where the other PostgreSQL tests run.
func privatePostgres(t *testing.T) (dir, dsn string) {
	t.Helper()
	pgtest.ServerDSN(t)
	// Not t.TempDir: the postgres user must reach the folder, and a test's
	// temp folder sits in one only root may enter.
	dir, err := os.MkdirTemp("", "sessiond-pgrestart-")
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(moduleRoot, "scripts", "postgres.sh")
	t.Cleanup(func() {
		if out, err := exec.Command("bash", script, "stop", dir).CombinedOutput(); err != nil {
			t.Errorf("postgres.sh stop: %v: %s", err, out)
		}
	})
	cmd := exec.Command("bash", script, "start", dir)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("postgres.sh start: %v: %s", err, stderr.String())
	}
	return dir, strings.TrimSpace(string(out))
}

// TestPostgresRestart has 8 writers append to their own sessions through two
// replicas while their PostgreSQL server is restarted, first with pg_ctl -m
// fast, then -m immediate (a crash and WAL recovery). While it is down an
// append fails UNAVAILABLE, never with another code; afterwards every writer
// gets through again with no restart of the replicas; and every
// acknowledged append is stored once, through either replica.
func TestPostgresRestart(t *testing.T) {
	dir, dsn := privatePostgres(t)
	replicas := []*daemon{startPostgresDaemon(t, dsn), startPostgresDaemon(t, dsn)}
	clients := []sessiondv1.SessionStoreServiceClient{replicas[0].client(t), replicas[1].client(t)}
	ctx := testContext(t, 3*time.Minute)

	const writers = 8
	ids := make([]string, writers)
	for w := range ids {
		r, err := clients[w%2].CreateSession(ctx, &sessiondv1.CreateSessionRequest{})
		if err != nil {
			t.Fatal(err)
		}
		ids[w] = r.GetSession().GetId()
	}

	var mu sync.Mutex // guards the maps below and phase
	acked := make([]map[string]bool, writers)
	failed := map[codes.Code]int{}
	ackedIn := make([]map[int]int, writers) // phase -> acks
	phase := 0
	stop := make(chan struct{})
	var wg sync.WaitGroup
	// stopWriters ends the writers: before the test fails, as they log
	// through t.
	var stopOnce sync.Once
	stopWriters := func() {
		stopOnce.Do(func() { close(stop) })
		wg.Wait()
	}
	for w := range writers {
		acked[w], ackedIn[w] = map[string]bool{}, map[int]int{}
		wg.Go(func() {
			c := clients[w%2]
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("w%d-%d", w, i)
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				_, err := c.AppendMessages(cctx, &sessiondv1.AppendMessagesRequest{Ref: byID("", ids[w]),
					Messages: []*sessiondv1.Message{textMsg(id, sessiondv1.Role_ROLE_USER, "while PostgreSQL restarts")}})
				cancel()
				mu.Lock()
				if err == nil {
					acked[w][id] = true
					ackedIn[w][phase]++
				} else {
					failed[status.Code(err)]++
					if status.Code(err) != codes.Unavailable {
						t.Errorf("append %s: %v; want UNAVAILABLE while the database is down", id, err)
					}
				}
				mu.Unlock()
				if err != nil {
					time.Sleep(50 * time.Millisecond)
				}
			}
		})
	}

	// waitAcks waits until every writer had an append acknowledged in the
	// current phase: the replicas are writing again.
	waitAcks := func(what string) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			mu.Lock()
			behind := 0
			for w := range writers {
				if ackedIn[w][phase] == 0 {
					behind++
				}
			}
			mu.Unlock()
			if behind == 0 {
				return
			}
			if time.Now().After(deadline) {
				stopWriters()
				t.Fatalf("%s: %d of %d writers had no append acknowledged within 60 s", what, behind, writers)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// unavailable counts the appends that failed so far.
	unavailable := func() int {
		mu.Lock()
		defer mu.Unlock()
		return failed[codes.Unavailable]
	}
	waitAcks("before the restarts")
	for _, mode := range []string{"fast", "immediate"} {
		before, start := unavailable(), time.Now()
		out, err := exec.Command("bash", filepath.Join(moduleRoot, "scripts", "postgres.sh"), "restart", dir, mode).CombinedOutput()
		if err != nil {
			stopWriters()
			t.Fatalf("restart -m %s: %v: %s", mode, err, out)
		}
		restarted := time.Since(start)
		mu.Lock()
		phase++
		mu.Unlock()
		waitAcks("after pg_ctl restart -m " + mode)
		t.Logf("pg_ctl restart -m %s took %v; every writer got through again %v after it began; %d appends failed UNAVAILABLE meanwhile",
			mode, restarted.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), unavailable()-before)
		if unavailable() == before {
			t.Errorf("restart -m %s: no append failed: the restart was not seen", mode)
		}
	}
	stopWriters()

	total := 0
	for w := range writers {
		total += len(acked[w])
	}
	t.Logf("%d appends acknowledged; failed appends by code: %v", total, failed)
	for r, c := range clients {
		for w, id := range ids {
			_, ms, _, err := loadSession(ctx, c, &sessiondv1.LoadSessionRequest{Ref: byID("", id)})
			if err != nil {
				t.Fatalf("replica %d: load writer %d's session: %v", r, w, err)
			}
			seen := map[string]bool{}
			for _, m := range ms {
				if seen[m.GetId()] {
					t.Errorf("replica %d: writer %d's session holds %s twice", r, w, m.GetId())
				}
				seen[m.GetId()] = true
			}
			for id := range acked[w] {
				if !seen[id] {
					t.Errorf("replica %d: writer %d's acknowledged append %s is missing", r, w, id)
				}
			}
		}
	}
}
