package main

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// TestSearchLag: against the file store, whose search reads what the append
// wrote, every sampled message is found by the first search for it, in the
// session and at the index its append reported (searchlag fails
// otherwise), with either kind of append.
func TestSearchLag(t *testing.T) {
	d := startDaemon(t)
	for _, rpc := range []string{rpcUnary, rpcStream} {
		t.Run(rpc, func(t *testing.T) {
			ns := "sl-" + rpc
			var rep searchLagReport
			runJSON(t, &rep, "--addr", d.addr, "--namespace", ns, "searchlag", "--rpc", rpc, "--clients", "4", "--sessions", "2",
				"--duration", "1s", "--count", "3000", "--size", "256", "--sample-every", "20ms", "--wait", "5s")
			if rep.Appends == 0 || rep.AppendsPerSec <= 0 || rep.Sampled < 5 || rep.Found != rep.Sampled || rep.NotFound != 0 {
				t.Fatalf("report %+v; want appends, at least 5 samples, each found", rep)
			}
			if rep.ShareWithin != 1 || rep.WithinMS != 2000 || rep.Searches != int64(rep.Found) || rep.Missed != 0 {
				t.Errorf("report %+v; want every sample found within 2 s by its first search", rep)
			}
			checkLatency(t, rep.Lag)
			checkLatency(t, rep.Search)
			if sessions, msgs := d.storedMessages(t, ns); sessions != 2 || msgs != rep.Appends {
				t.Errorf("store holds %d sessions, %d messages; want 2 and the %d acknowledged", sessions, msgs, rep.Appends)
			}
		})
	}
}

// TestSearchLagMeasuresLag runs searchlag against a daemon whose searches
// do not find a message until hide after its append: the lag reported is
// about that delay, hardly any is found within a shorter --within, and with a
// --wait shorter than the delay every sample is given up as not found.
func TestSearchLagMeasuresLag(t *testing.T) {
	const hide = 400 * time.Millisecond
	h := &hidingSearch{appended: map[string]time.Time{}, hide: hide}
	d := startDaemonMetrics(t, nil, grpc.ChainUnaryInterceptor(h.recordAppend), grpc.ChainStreamInterceptor(h.hideRecent))

	var rep searchLagReport
	runJSON(t, &rep, "--addr", d.addr, "--namespace", "hidden", "searchlag", "--clients", "2",
		"--duration", "1s", "--count", "2000", "--size", "128", "--sample-every", "50ms", "--wait", "5s", "--within", "100ms")
	if rep.Sampled < 5 || rep.Found != rep.Sampled || rep.Missed == 0 {
		t.Fatalf("report %+v; want every sample found after searches that missed", rep)
	}
	// Bounds loose enough for a busy machine, whose scheduling delays
	// shorten the lag measured: each search's own time counts in it.
	if rep.Lag.P50 < ms(hide)/2 || rep.Lag.Max > 5000 || rep.ShareWithin > 0.5 {
		t.Errorf("lag %+v, share within 100 ms %v; want about %v each, hardly any within 100 ms", rep.Lag, rep.ShareWithin, hide)
	}

	rep = searchLagReport{}
	runJSON(t, &rep, "--addr", d.addr, "--namespace", "gone", "searchlag", "--clients", "2",
		"--duration", "500ms", "--count", "2000", "--size", "128", "--sample-every", "50ms", "--wait", "150ms")
	if rep.Sampled < 3 || rep.NotFound != rep.Sampled || rep.Found != 0 || rep.ShareWithin != 0 {
		t.Errorf("report %+v; want every sample given up as not found", rep)
	}
}

// hidingSearch is a daemon's search that finds a message only hide after
// its AppendMessages returned, as a search index filled behind the appends
// would.
type hidingSearch struct {
	hide     time.Duration
	mu       sync.Mutex
	appended map[string]time.Time // searchlag's token -> when its append returned
}

func (h *hidingSearch) recordAppend(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	if ar, ok := req.(*sessiondv1.AppendMessagesRequest); ok && err == nil {
		h.mu.Lock()
		for _, m := range ar.GetMessages() {
			token, _, _ := strings.Cut(m.GetContent(), " ")
			h.appended[token] = time.Now()
		}
		h.mu.Unlock()
	}
	return resp, err
}

func (h *hidingSearch) hideRecent(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if info.FullMethod != sessiondv1.SessionStoreService_SearchSessions_FullMethodName {
		return handler(srv, ss)
	}
	return handler(srv, &hidingStream{ServerStream: ss, h: h})
}

// hidingStream drops the hits of a search whose query is the token of a
// message appended less than hide ago.
type hidingStream struct {
	grpc.ServerStream
	h     *hidingSearch
	query string
}

func (s *hidingStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if req, ok := m.(*sessiondv1.SearchSessionsRequest); ok {
		s.query = req.GetQuery()
	}
	return err
}

func (s *hidingStream) SendMsg(m any) error {
	s.h.mu.Lock()
	at, ok := s.h.appended[s.query]
	s.h.mu.Unlock()
	if !ok || time.Since(at) < s.h.hide {
		return nil
	}
	return s.ServerStream.SendMsg(m)
}
