package file

import "time"

// A synced write costs about the same whatever it holds, so the fewer
// flushes cover the same appends, the less CPU each append costs. Under
// steady load the commit pipeline splits its writers into two cohorts: one
// waits for the running flush while the other, just released by the flush
// before, sends its next requests, so each flush covers about half the
// writers. The leader closes that gap by gathering before it takes the
// queue:
//
//   - it expects the writers the last flush released plus those that
//     queued while it ran (walGather's want): the writers that are active;
//   - it waits while the queue is shorter than that and requests keep
//     arriving: it stops at the first step (a walGatherSteps-th of the
//     wait) in which none arrived, and after about one synced write's time
//     (the running mean, at most walGatherMax) in all.
//
// A step is half of that time, not less: on a busy machine a writer's
// next request can be late by a scheduling delay, and a leader that gives
// up on it flushes a short batch that splits the writers again. A lone
// writer, or writers that take turns, expect no one else and never wait;
// a writer that stops costs the others one such step, after which it is
// no longer expected.
const (
	walGatherSteps = 2
	walGatherMax   = 4 * time.Millisecond
)

// walGatherState is the leader's gathering state in wal.
type walGatherState struct {
	// Guarded by wal.mu.
	expect   int           // the writers the leader expects: see walGather
	gatherAt int           // while the leader gathers, the queue length that ends its wait; 0 otherwise
	gathered chan struct{} // signalled once the queue reaches gatherAt

	// Owned by the leader.
	syncMean time.Duration // running mean of a flush's write and fdatasync
	timer    *time.Timer
}

// noteSync adds a flush's write-and-sync time to the running mean. Caller
// is the leader.
func (g *walGatherState) noteSync(took time.Duration) {
	if g.syncMean == 0 {
		g.syncMean = took
		return
	}
	g.syncMean += (took - g.syncMean) / 8
}

// queued tells a gathering leader that a request joined the queue, now n
// long. Caller holds wal.mu.
func (g *walGatherState) queued(n int) {
	if g.gatherAt > 0 && n >= g.gatherAt {
		g.gatherAt = 0
		g.gathered <- struct{}{} // the one send of this wait: never blocks
	}
}

// walGather waits, as the comment at the top of this file says, for the
// writers the leader expects to join the queue. Caller is the leader and
// holds w.mu, which it releases while it waits.
func (w *wal) walGather() {
	g := &w.gather
	if g.syncMean <= 0 {
		return
	}
	w.gatherUntil(g.expect, min(g.syncMean, walGatherMax))
}

// gatherUntil waits until the queue holds want requests, for at most
// wait, and stops at the first walGatherSteps-th of wait in which none
// joined; it returns at once when they are queued already. Caller is the
// leader and holds w.mu, which it releases while it waits.
func (w *wal) gatherUntil(want int, wait time.Duration) {
	if len(w.queue) >= want {
		return
	}
	g := &w.gather
	if g.gathered == nil {
		g.gathered = make(chan struct{}, 1)
		g.timer = time.NewTimer(time.Hour)
		g.timer.Stop()
	}
	step := wait / walGatherSteps
	g.gatherAt = want
	seen := len(w.queue)
	for waited := time.Duration(0); waited < wait; waited += step {
		w.mu.Unlock()
		g.timer.Reset(step)
		reached := false
		select {
		case <-g.gathered:
			reached = true
		case <-g.timer.C:
		}
		g.timer.Stop()
		w.mu.Lock()
		if reached || len(w.queue) == seen {
			break
		}
		seen = len(w.queue)
	}
	g.gatherAt = 0
	select {
	case <-g.gathered: // the queue filled up as the last step ended
	default:
	}
}
