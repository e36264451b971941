package integration

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// TestLiveTurnSurvivesKill streams deltas into open messages of several
// sessions and kills the daemon (SIGKILL) mid-stream: after a restart each
// message holds every acknowledged delta, in order, none twice, and is
// still open, so its writer carries on at the length it finds.
func TestLiveTurnSurvivesKill(t *testing.T) {
	dir := t.TempDir()
	d := startDaemon(t, dir)
	ctx := testContext(t, 60*time.Second)
	c := d.client(t)

	const writers = 8
	// Each delta is 16 bytes naming its writer and number, so a gap, a
	// reordering or a repeat shows in the text.
	piece := func(w, i int) string { return fmt.Sprintf("w%02d-d%010d|", w, i) }
	refs := make([]*sessiondv1.SessionRef, writers)
	for w := range refs {
		s, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Messages: []*sessiondv1.Message{
			{Id: "open", Role: sessiondv1.Role_ROLE_ASSISTANT, State: sessiondv1.MessageState_MESSAGE_STATE_STREAMING}}})
		if err != nil {
			t.Fatalf("CreateSession: %v", err)
		}
		refs[w] = byID("", s.GetSession().GetId())
	}
	acked := make([]int, writers) // deltas acknowledged per writer
	var wg sync.WaitGroup
	started := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				_, err := c.AppendDelta(ctx, &sessiondv1.AppendDeltaRequest{Ref: refs[w], MessageId: "open", Offset: int64(16 * i), Content: piece(w, i)})
				if err != nil {
					if i <= 20 {
						started <- fmt.Errorf("writer %d, delta %d: %w", w, i, err)
					}
					return // after the kill: the daemon is gone
				}
				acked[w] = i + 1
				if i == 20 {
					started <- nil
				}
			}
		}()
	}
	for range writers {
		if err := <-started; err != nil {
			t.Fatalf("AppendDelta before the kill: %v", err)
		}
	}
	time.Sleep(300 * time.Millisecond)
	d.kill(t)
	wg.Wait()

	d = restartDaemon(t, d)
	c = d.client(t)
	total := 0
	for w, ref := range refs {
		_, msgs := mustLoad(t, ctx, c, &sessiondv1.LoadSessionRequest{Ref: ref})
		m := msgs[0]
		got := m.GetContent()
		if m.GetState() != sessiondv1.MessageState_MESSAGE_STATE_STREAMING {
			t.Errorf("writer %d: message state %v after restart, want still open", w, m.GetState())
		}
		if len(got)%16 != 0 || len(got)/16 < acked[w] {
			t.Fatalf("writer %d: %d bytes after restart, want at least the %d acknowledged deltas (%d bytes)", w, len(got), acked[w], 16*acked[w])
		}
		var want strings.Builder
		for i := range len(got) / 16 {
			want.WriteString(piece(w, i))
		}
		if got != want.String() {
			t.Fatalf("writer %d: deltas out of order, missing or repeated after restart:\n%.200q", w, got)
		}
		total += acked[w]
		// The writer carries on at the length it finds.
		n := len(got) / 16
		if _, err := c.AppendDelta(ctx, &sessiondv1.AppendDeltaRequest{Ref: ref, MessageId: "open", Offset: int64(len(got)), Content: piece(w, n)}); err != nil {
			t.Fatalf("writer %d: AppendDelta after restart: %v", w, err)
		}
		if _, err := c.FinishMessage(ctx, &sessiondv1.FinishMessageRequest{Ref: ref, MessageId: "open"}); err != nil {
			t.Fatalf("writer %d: FinishMessage after restart: %v", w, err)
		}
	}
	t.Logf("SIGKILL while %d writers streamed: %d acknowledged deltas, all present after restart, in order, none twice", writers, total)
}
