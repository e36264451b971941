package integration

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// TestKill9DuringFolds grows one session by 256 KiB appends (a fold every
// 16 appends at the default 4 MiB threshold) and kills the daemon with
// SIGKILL at random moments, restarting it each time: every acknowledged
// message is there, in order, with its content, and the append in flight
// at the kill is there at most once. It goes on past the first 6 cycles
// until at least 4 folds' worth of appends were acknowledged, so that a
// slow machine makes it longer, not weaker.
func TestKill9DuringFolds(t *testing.T) {
	const (
		cycles    = 6
		minAcked  = 4 * 16 // appends of 256 KiB in 4 folds
		maxCycles = 30
	)
	dir := t.TempDir()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 3))
	ctx := testContext(t, 240*time.Second)
	d := startDaemon(t, dir)
	ids := createSessions(t, ctx, d.client(t), "big", 1)
	ref := byID("", ids[0])
	content := func(id string) string { return id + strings.Repeat("b", 256<<10) }
	var acked []string
	seq := 0
	for cycle := 0; cycle < cycles || len(acked) < minAcked; cycle++ {
		if cycle == maxCycles {
			t.Fatalf("only %d appends of 256 KiB acknowledged in %d cycles: fewer than 4 folds", len(acked), cycle)
		}
		c := d.client(t)
		done := make(chan string, 1) // the id in flight when the append loop ended
		go func() {
			for {
				id := fmt.Sprintf("m%06d", seq)
				_, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: ref, Messages: []*sessiondv1.Message{textMsg(id, sessiondv1.Role_ROLE_USER, content(id))}})
				if err != nil {
					done <- id
					return
				}
				acked = append(acked, id)
				seq++
			}
		}()
		time.Sleep(time.Duration(300+rng.IntN(1200)) * time.Millisecond)
		d.kill(t)
		inflight := <-done
		seq++ // the id in flight is never reused
		d = restartDaemon(t, d)
		_, msgs := mustLoad(t, ctx, d.client(t), &sessiondv1.LoadSessionRequest{Ref: ref})
		got := make([]string, len(msgs))
		for i, m := range msgs {
			got[i] = m.GetId()
			if m.GetContent() != content(m.GetId()) {
				t.Fatalf("cycle %d: message %s has %d bytes of content, not what was written", cycle, m.GetId(), len(m.GetContent()))
			}
		}
		if len(got) == len(acked)+1 && got[len(got)-1] == inflight {
			acked = append(acked, inflight) // landed though unacknowledged: allowed once
		}
		if strings.Join(got, ",") != strings.Join(acked, ",") {
			t.Fatalf("cycle %d (seed %d): %d messages after the restart, want the %d acknowledged (in flight: %s)", cycle, seed, len(got), len(acked), inflight)
		}
	}
	t.Logf("%d appends of 256 KiB acknowledged (%d MiB)", len(acked), len(acked)/4)
}
