package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// --- searchlag ---

type searchLagReport struct {
	Mode          string  `json:"mode"`
	RPC           string  `json:"rpc"`
	Clients       int     `json:"clients"`
	Sessions      int     `json:"sessions"`
	Size          int     `json:"size"`
	Appends       int64   `json:"appends"`
	Seconds       float64 `json:"seconds"`
	AppendsPerSec float64 `json:"appends_per_sec"`
	// Sampled messages were each searched for until found or --wait after
	// their acknowledgement; NotFound were not found by then.
	Sampled  int `json:"sampled"`
	Found    int `json:"found"`
	NotFound int `json:"not_found"`
	// Lag is, per message found, the time from its append's acknowledgement
	// to the start of the first search that found it.
	Lag latencyMS `json:"lag_ms"`
	// ShareWithin is the share of the sampled messages found within
	// WithinMS (a message not found counts as beyond it).
	WithinMS    float64 `json:"within_ms"`
	ShareWithin float64 `json:"share_within"`
	// Searches is every SearchSessions call; Missed those that did not
	// find their message yet.
	Searches int64     `json:"searches"`
	Missed   int64     `json:"searches_missed"`
	Search   latencyMS `json:"search_ms"`
}

func (r *searchLagReport) rows() [][2]string {
	rows := [][2]string{
		{"mode", r.Mode + " (" + r.RPC + " appends)"},
		{"clients / sessions", fmt.Sprintf("%d / %d", r.Clients, r.Sessions)},
		{"message size", fmt.Sprintf("%d B", r.Size)},
		{"appends acknowledged", strconv.FormatInt(r.Appends, 10)},
		{"elapsed", fmt.Sprintf("%.2f s", r.Seconds)},
		{"throughput", fmtRate(r.AppendsPerSec)},
		{"messages sampled / found / not found", fmt.Sprintf("%d / %d / %d", r.Sampled, r.Found, r.NotFound)},
	}
	rows = append(rows, r.Lag.rows("search lag")...)
	rows = append(rows,
		[2]string{fmt.Sprintf("found within %s", fmtMS(r.WithinMS)), fmt.Sprintf("%.2f%%", 100*r.ShareWithin)},
		[2]string{"searches (missed)", fmt.Sprintf("%d (%d)", r.Searches, r.Missed)},
	)
	return append(rows, r.Search.rows("search call")...)
}

// lagSample is an acknowledged message the prober looks for.
type lagSample struct {
	token   string
	session string
	index   int64
	acked   time.Time
}

// searchToken is the text that only message seq of client holds: the
// dashes never occur in the payload, and fixed widths keep one token from
// being part of another.
func searchToken(client, seq int) string {
	return fmt.Sprintf("lag-c%04d-s%09d-", client, seq)
}

// runSearchLag has --clients append at full rate, as the append mode's
// lean client does, messages that each start with a token of their own,
// for --duration or --count appends. Meanwhile one prober takes, every
// --sample-every, the latest acknowledged message and searches for its
// token, again and again, until a search finds it or --wait has passed
// since its acknowledgement. The lag of a message is an upper bound of
// when it became searchable: from the acknowledgement to the start of the
// first search that found it.
func runSearchLag(ctx context.Context, c *config, stderr io.Writer) (report, error) {
	conn, err := dial(c)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	cl := sessiondv1.NewSessionStoreServiceClient(conn)
	ids := make([]string, c.sessions)
	for i := range ids {
		if ids[i], err = createSession(ctx, c, cl, "sessiond-load searchlag"); err != nil {
			return nil, err
		}
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	appendOn, closeAll, err := leanAppenders(ctx, runCtx, c)
	if err != nil {
		return nil, err
	}
	defer closeAll()

	var (
		latest   atomic.Pointer[lagSample]
		issued   atomic.Int64
		acked    atomic.Int64
		firstErr error
		errOnce  sync.Once
		wg       sync.WaitGroup
	)
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err })
		stop()
	}
	padding := payload(max(0, c.size-len(searchToken(0, 0))-1))
	appendersDone := make(chan struct{})
	start := time.Now()
	deadline := start.Add(c.duration)
	for client := range c.clients {
		wg.Go(func() {
			for seq := 0; runCtx.Err() == nil && time.Now().Before(deadline); seq++ {
				if issued.Add(1) > int64(c.count) {
					return
				}
				token := searchToken(client, seq)
				id := ids[(client+seq*c.clients)%c.sessions]
				resp, err := appendOn(runCtx, client, &sessiondv1.AppendMessagesRequest{
					Ref: idRef(c.namespace, id),
					Messages: []*sessiondv1.Message{{
						Id: token, Role: sessiondv1.Role_ROLE_USER, Content: token + " " + padding,
					}},
				})
				if err != nil {
					if ctx.Err() == nil {
						fail(fmt.Errorf("append %s: %w", token, err))
					}
					return
				}
				acked.Add(1)
				latest.Store(&lagSample{token: token, session: id, index: resp.GetMessageCount() - 1, acked: time.Now()})
			}
		})
	}
	var elapsed time.Duration
	go func() {
		wg.Wait()
		elapsed = time.Since(start)
		close(appendersDone)
	}()

	rep := &searchLagReport{Mode: "searchlag", RPC: c.rpc, Clients: c.clients, Sessions: c.sessions, Size: c.size, WithinMS: ms(c.within)}
	var lags, calls []time.Duration
	probe := func(s *lagSample) (found bool, err error) {
		t0 := time.Now()
		found, err = searchFinds(runCtx, c, cl, s)
		calls = append(calls, time.Since(t0))
		if found {
			lags = append(lags, t0.Sub(s.acked))
		}
		return found, err
	}
	if err := probeSamples(runCtx, c, &latest, appendersDone, probe, rep); err != nil && ctx.Err() == nil {
		fail(err)
	}
	<-appendersDone

	rep.Appends = acked.Load()
	rep.Seconds = elapsed.Seconds()
	rep.AppendsPerSec = float64(rep.Appends) / rep.Seconds
	rep.Found = len(lags)
	within := 0
	for _, l := range lags {
		if l <= c.within {
			within++
		}
	}
	if rep.Sampled > 0 {
		rep.ShareWithin = float64(within) / float64(rep.Sampled)
	}
	rep.Lag, rep.Search = summarize(lags), summarize(calls)
	if firstErr != nil {
		return rep, firstErr
	}
	return rep, ctx.Err()
}

// probeSamples is the prober's loop: it takes a new sample from latest at
// most every --sample-every (up to --samples) while the appenders run,
// searches once for each sample still pending per round, and ends when
// the appenders are done and no sample is pending. A sample not found
// --wait after its acknowledgement is given up as not found.
func probeSamples(ctx context.Context, c *config, latest *atomic.Pointer[lagSample], appendersDone <-chan struct{},
	probe func(*lagSample) (bool, error), rep *searchLagReport) error {
	var pending []*lagSample
	next := time.Now()
	for {
		sampling := rep.Sampled < c.samples
		select {
		case <-appendersDone:
			sampling = false
		default:
		}
		if now := time.Now(); sampling && !now.Before(next) {
			if s := latest.Swap(nil); s != nil {
				pending = append(pending, s)
				rep.Sampled++
				next = now.Add(c.sampleEvery)
			}
		}
		if !sampling && len(pending) == 0 {
			return nil
		}
		foundAny := false
		kept := pending[:0]
		for _, s := range pending {
			rep.Searches++
			found, err := probe(s)
			if err != nil {
				return err
			}
			switch {
			case found:
				foundAny = true
			case time.Since(s.acked) > c.wait:
				rep.Missed++
				rep.NotFound++
			default:
				rep.Missed++
				kept = append(kept, s)
			}
		}
		pending = kept
		// Nothing to search, or nothing found yet: wait a little rather
		// than search the same tokens back to back.
		if len(pending) == 0 || !foundAny {
			pause := 10 * time.Millisecond
			if len(pending) == 0 {
				pause = min(max(time.Until(next), time.Millisecond), c.sampleEvery)
			}
			t := time.NewTimer(pause)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
		}
	}
}

// searchFinds reports whether a search for s's token finds it, and fails
// if the search finds it anywhere but in s's session at s's index.
func searchFinds(ctx context.Context, c *config, cl sessiondv1.SessionStoreServiceClient, s *lagSample) (bool, error) {
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	stream, err := cl.SearchSessions(cctx, &sessiondv1.SearchSessionsRequest{Namespace: c.namespace, Query: s.token, Limit: 1})
	if err != nil {
		return false, fmt.Errorf("search %s: %w", s.token, err)
	}
	found := false
	for {
		hit, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return found, nil
		}
		if err != nil {
			return false, fmt.Errorf("search %s: %w", s.token, err)
		}
		if hit.GetSession().GetId() != s.session || hit.GetMessageIndex() != s.index {
			return false, fmt.Errorf("search %s: hit in session %s at message %d, but it was appended to session %s at message %d",
				s.token, hit.GetSession().GetId(), hit.GetMessageIndex(), s.session, s.index)
		}
		found = true
	}
}
