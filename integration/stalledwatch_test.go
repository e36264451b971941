package integration

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// TestStalledWatchersEnded: 50 gRPC watchers that never read, on
// connections with the smallest flow-control windows, while 1,200 messages
// of 64 KiB are appended to the session they watch. What the daemon's heap
// holds besides its message cache stays under 64 MiB throughout (sampled
// every 100 ms from its metrics): the cache keeps the session's 75 MiB of
// messages, by design, and the daemon runs with GOGC=25 so that garbage
// not yet collected, which grows with that cache, does not hide what the
// watchers cost. Every watch ends OUT_OF_RANGE within 30 s (counted by the
// daemon's grpc_server_handled_total), and the daemon stops on SIGTERM
// within 3 s, well within its --shutdown-timeout (10 s): it closes the
// connections whose clients stopped reading instead of waiting for them.
func TestStalledWatchersEnded(t *testing.T) {
	const (
		watchers, conns, sessions = 50, 10, 1
		appends, msgBytes         = 1200, 64 << 10
		minWindow                 = 64 << 10 // grpc-go ignores smaller windows
		maxHeap                   = 64 << 20
	)
	ctx := testContext(t, 3*time.Minute)
	d := startDaemonEnv(t, t.TempDir(), []string{"GOGC=25"}, "--metrics-listen", "127.0.0.1:0")
	base := metricsURL(t, d)
	c := d.client(t)
	var ids []string
	for i := range sessions {
		r, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Alias: fmt.Sprint("stalled-", i)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.GetSession().GetId())
	}
	heapBefore := scrapeMetrics(t, base)["go_memstats_heap_inuse_bytes"]

	// Raw connections whose streams are never read: the daemon's sends
	// stop once the 64 KiB windows are full.
	var streams []grpc.ServerStreamingClient[sessiondv1.WatchSessionResponse]
	for i := range conns {
		cc, err := grpc.NewClient(d.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithInitialWindowSize(minWindow), grpc.WithInitialConnWindowSize(minWindow))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cc.Close() })
		wc := sessiondv1.NewSessionStoreServiceClient(cc)
		for j := range watchers / conns {
			s, err := wc.WatchSession(ctx, &sessiondv1.WatchSessionRequest{Ref: byID("", ids[(i*watchers/conns+j)%sessions])})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Header(); err != nil { // the watch is live
				t.Fatal(err)
			}
			streams = append(streams, s)
		}
	}

	var heapMax atomic.Int64
	sampleHeap := func() {
		m := scrapeMetrics(t, base)
		h := int64(m["go_memstats_heap_inuse_bytes"] - m["sessiond_store_cache_bytes"])
		for m := heapMax.Load(); h > m && !heapMax.CompareAndSwap(m, h); m = heapMax.Load() {
		}
	}
	sampling := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		for {
			select {
			case <-sampling:
				return
			case <-time.After(100 * time.Millisecond):
				sampleHeap()
			}
		}
	})

	body := strings.Repeat("x", msgBytes)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < appends; i += 4 {
				if _, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{
					Ref:      byID("", ids[i%sessions]),
					Messages: []*sessiondv1.Message{textMsg(fmt.Sprint("m", i), sessiondv1.Role_ROLE_USER, body)},
				}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	appended := time.Now()

	ended := handled("WatchSession", "server_stream", codes.OutOfRange)
	for {
		m := scrapeMetrics(t, base)
		if m[ended] >= watchers {
			t.Logf("%d stalled watches ended OUT_OF_RANGE %v after the last append", watchers, time.Since(appended).Round(time.Millisecond))
			break
		}
		if time.Since(appended) > 30*time.Second {
			t.Errorf("30 s after the last append, %v of %d stalled watches ended OUT_OF_RANGE", m[ended], watchers)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	close(sampling)
	sampler.Wait()
	sampleHeap()
	t.Logf("heap in use besides the message cache: %.0f MiB before the watches, at most %.0f MiB during and after the appends", heapBefore/(1<<20), float64(heapMax.Load())/(1<<20))
	if heapMax.Load() >= maxHeap {
		t.Errorf("heap in use besides the message cache reached %.0f MiB with %d stalled watchers; want under %d MiB", float64(heapMax.Load())/(1<<20), watchers, maxHeap>>20)
	}

	start := time.Now()
	if err := d.SignalWait(syscall.SIGTERM, 3*time.Second); err != nil {
		t.Fatalf("sessiond did not stop within 3 s of SIGTERM with stalled watchers: %v", err)
	}
	t.Logf("SIGTERM to exit: %v", time.Since(start).Round(time.Millisecond))
	_ = streams
}
