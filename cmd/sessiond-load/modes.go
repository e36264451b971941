package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	sdk "github.com/sessiond/sessiond/client"
	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/internal/metrics"
)

// maxMsgBytes lets the tool send and receive frames up to sessiond's default
// max_frame_bytes (64 MiB).
const maxMsgBytes = 64 << 20

// dial opens one connection. Each load client gets its own, as separate
// REPLs would, and as redis-benchmark and pgbench do.
func dial(c *config) (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient(c.addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsgBytes), grpc.MaxCallSendMsgSize(maxMsgBytes)),
		// The SDK's windows (client.Dial): no PING per call.
		grpc.WithInitialWindowSize(4<<20), grpc.WithInitialConnWindowSize(16<<20),
	)
	if err != nil {
		return nil, usagef("--addr %q: %v", c.addr, err)
	}
	return conn, nil
}

// dialN opens n connections; close closes those opened.
func dialN(c *config, n int) (conns []*grpc.ClientConn, closeAll func(), err error) {
	closeAll = func() {
		for _, cc := range conns {
			_ = cc.Close()
		}
	}
	for range n {
		cc, err := dial(c)
		if err != nil {
			closeAll()
			return nil, func() {}, err
		}
		conns = append(conns, cc)
	}
	return conns, closeAll, nil
}

func idRef(ns, id string) *sessiondv1.SessionRef {
	return &sessiondv1.SessionRef{Namespace: ns, Key: &sessiondv1.SessionRef_Id{Id: id}}
}

// createSession makes a session in the run's namespace holding msgs.
func createSession(ctx context.Context, c *config, cl sessiondv1.SessionStoreServiceClient, title string, msgs ...*sessiondv1.Message) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := cl.CreateSession(cctx, &sessiondv1.CreateSessionRequest{Namespace: c.namespace, Title: title, Messages: msgs})
	if err != nil {
		return "", fmt.Errorf("create session in namespace %q: %w", c.namespace, err)
	}
	c.recordCreated(resp.GetSession().GetId())
	return resp.GetSession().GetId(), nil
}

// deleteSessions deletes the sessions ids of the run's namespace, 16 at a
// time, and reports the first failure.
func deleteSessions(c *config, ids []string) error {
	conn, err := dial(c)
	if err != nil {
		return fmt.Errorf("cleanup: %w", err)
	}
	defer conn.Close()
	cl := sessiondv1.NewSessionStoreServiceClient(conn)
	// Its own context: an interrupted run still cleans up after itself.
	ctx := context.Background()
	var g errgroup.Group
	g.SetLimit(16)
	for _, id := range ids {
		g.Go(func() error {
			cctx, cancel := context.WithTimeout(ctx, c.timeout)
			defer cancel()
			_, err := cl.DeleteSession(cctx, &sessiondv1.DeleteSessionRequest{Ref: idRef(c.namespace, id)})
			if err == nil || status.Code(err) == codes.NotFound {
				return nil
			}
			return fmt.Errorf("cleanup: delete session %s of namespace %s: %w", id, c.namespace, err)
		})
	}
	return g.Wait()
}

// --- append ---

type appendReport struct {
	Mode      string    `json:"mode"`
	RPC       string    `json:"rpc"`
	Clients   int       `json:"clients"`
	Sessions  int       `json:"sessions"`
	Size      int       `json:"size"`
	Ops       int64     `json:"ops"`
	Errors    int64     `json:"errors"`
	Warmup    int64     `json:"warmup_ops"`
	Stored    int64     `json:"stored"`
	Seconds   float64   `json:"seconds"`
	OpsPerSec float64   `json:"ops_per_sec"`
	Latency   latencyMS `json:"latency_ms"`
	// Daemon is what the daemon's metrics say about the run (--metrics).
	Daemon *daemonMetrics `json:"daemon_metrics,omitempty"`
	// Prefill is how many messages each session held before the run.
	Prefill int `json:"prefill"`
	// Turns: every second append was an assistant's answer with a model
	// and usage (--turns).
	Turns bool `json:"turns,omitempty"`
}

func (r *appendReport) rows() [][2]string {
	rows := [][2]string{
		{"mode", r.Mode + " (" + r.RPC + ")"},
		{"clients / sessions", fmt.Sprintf("%d / %d", r.Clients, r.Sessions)},
		{"message size", fmt.Sprintf("%d B", r.Size)},
		{"appends acknowledged", strconv.FormatInt(r.Ops, 10)},
		{"appends failed", strconv.FormatInt(r.Errors, 10)},
		{"messages stored", fmt.Sprintf("%d (incl. %d warm-up)", r.Stored, r.Warmup)},
		{"elapsed", fmt.Sprintf("%.2f s", r.Seconds)},
		{"throughput", fmtRate(r.OpsPerSec)},
	}
	if r.Prefill > 0 {
		rows = append(rows, [2]string{"messages per session before the run", strconv.Itoa(r.Prefill)})
	}
	if r.Turns {
		rows = append(rows, [2]string{"messages", "user, then an assistant's answer with model and usage"})
	}
	rows = append(rows, r.Latency.rows("latency")...)
	if r.Daemon != nil {
		rows = append(rows, r.Daemon.rows()...)
	}
	return rows
}

// runAppend: each client appends one message per call, with a unique id,
// its seq-th to session (client + seq*clients) mod sessions (so session
// client mod sessions when sessions divides clients, and every session
// when there are more sessions than clients), until --count appends in all
// or --duration.
// Afterwards the sessions must hold exactly the acknowledged messages.
func runAppend(ctx context.Context, c *config, stderr io.Writer) (report, error) {
	conns, closeAll, err := dialN(c, c.clients)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	clients := make([]sessiondv1.SessionStoreServiceClient, len(conns))
	for i, cc := range conns {
		clients[i] = sessiondv1.NewSessionStoreServiceClient(cc)
	}
	content := payload(c.size)
	prefill := make([]*sessiondv1.Message, c.prefill)
	for i := range prefill {
		prefill[i] = &sessiondv1.Message{Id: "p-" + strconv.Itoa(i), Role: sessiondv1.Role_ROLE_USER, Content: content}
	}
	ids := make([]string, c.sessions)
	for i := range ids {
		if ids[i], err = createSession(ctx, c, clients[0], "sessiond-load append", prefill...); err != nil {
			return nil, err
		}
	}

	appendReq := func(client, seq int) *sessiondv1.AppendMessagesRequest {
		m := &sessiondv1.Message{Id: "c" + strconv.Itoa(client) + "-" + strconv.Itoa(seq), Role: sessiondv1.Role_ROLE_USER, Content: content}
		if c.turns && seq%2 == 1 {
			m.Role, m.Model = sessiondv1.Role_ROLE_ASSISTANT, "load-model"
			m.Usage = &sessiondv1.Usage{InputTokens: int64(seq), OutputTokens: int64(c.size / 4)}
		}
		return &sessiondv1.AppendMessagesRequest{Ref: idRef(c.namespace, ids[(client+seq*c.clients)%c.sessions]), Messages: []*sessiondv1.Message{m}}
	}
	appendOne := func(ctx context.Context, client, seq int) error {
		cctx, cancel := context.WithTimeout(ctx, c.timeout)
		defer cancel()
		_, err := clients[client].AppendMessages(cctx, appendReq(client, seq))
		return err
	}
	if c.rpc == rpcStream && c.client == clientGRPC {
		if appendOne, err = streamAppender(ctx, c, clients, appendReq); err != nil {
			return nil, err
		}
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	if c.client == clientLean {
		appendLean, closeLean, err := leanAppenders(ctx, runCtx, c)
		if err != nil {
			return nil, err
		}
		defer closeLean()
		appendOne = func(ctx context.Context, client, seq int) error {
			_, err := appendLean(ctx, client, appendReq(client, seq))
			return err
		}
	}

	// Warm-up: connections established, files opened, caches filled.
	var wg sync.WaitGroup
	warmErrs := make([]error, c.clients)
	for cl := range c.clients {
		wg.Go(func() {
			for seq := range c.warmup {
				if err := appendOne(ctx, cl, seq); err != nil {
					warmErrs[cl] = fmt.Errorf("warm-up append: %w", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(warmErrs...); err != nil {
		return nil, err
	}

	var before metrics.Samples
	if c.metrics != "" {
		if before, err = scrapeDaemon(ctx, c); err != nil {
			return nil, err
		}
	}

	var (
		issued, acked, failed atomic.Int64
		firstErr              error
		errOnce               sync.Once
	)
	lat := make([][]time.Duration, c.clients)
	start := time.Now()
	deadline := start.Add(c.duration)
	for cl := range c.clients {
		wg.Go(func() {
			for seq := c.warmup; runCtx.Err() == nil && time.Now().Before(deadline); seq++ {
				if issued.Add(1) > int64(c.count) {
					return
				}
				t0 := time.Now()
				if err := appendOne(runCtx, cl, seq); err != nil {
					if runCtx.Err() != nil && ctx.Err() != nil {
						return // interrupted: not the daemon's failure
					}
					failed.Add(1)
					errOnce.Do(func() { firstErr = err })
					stop() // a failing daemon is not measured further
					return
				}
				lat[cl] = append(lat[cl], time.Since(t0))
				acked.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)

	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	rep := &appendReport{
		Mode: "append", RPC: c.rpc, Clients: c.clients, Sessions: c.sessions, Size: c.size,
		Ops: acked.Load(), Errors: failed.Load(), Warmup: int64(c.clients * c.warmup),
		Seconds: elapsed.Seconds(), OpsPerSec: float64(acked.Load()) / elapsed.Seconds(),
		Latency: summarize(all), Prefill: c.prefill, Turns: c.turns,
	}
	if c.metrics != "" {
		after, err := scrapeDaemon(ctx, c)
		if err != nil {
			return rep, err
		}
		rep.Daemon = diffMetrics(before, after)
	}
	if firstErr != nil {
		return rep, fmt.Errorf("%d appends failed; first: %w", rep.Errors, firstErr)
	}

	// Every acknowledged message, and nothing else, must be stored.
	for _, id := range ids {
		cctx, cancel := context.WithTimeout(ctx, c.timeout)
		resp, err := clients[0].GetSession(cctx, &sessiondv1.GetSessionRequest{Ref: idRef(c.namespace, id)})
		cancel()
		if err != nil {
			return rep, fmt.Errorf("count stored messages of %s: %w", id, err)
		}
		rep.Stored += resp.GetSession().GetMessageCount()
	}
	if pre := int64(c.sessions * c.prefill); ctx.Err() == nil && rep.Stored != rep.Ops+rep.Warmup+pre {
		return rep, fmt.Errorf("sessions hold %d messages, but %d appends were acknowledged (+%d warm-up, +%d before the run)", rep.Stored, rep.Ops, rep.Warmup, pre)
	}
	return rep, ctx.Err()
}

// streamAppender returns grpc-go's appendOne for --rpc stream: client i's
// appends go over one AppendStream call on its connection, one in flight,
// each answered before the next is sent. The calls end with ctx.
func streamAppender(ctx context.Context, c *config, clients []sessiondv1.SessionStoreServiceClient,
	appendReq func(client, seq int) *sessiondv1.AppendMessagesRequest) (func(context.Context, int, int) error, error) {
	streams := make([]grpc.BidiStreamingClient[sessiondv1.AppendStreamRequest, sessiondv1.AppendStreamResponse], len(clients))
	for i, cl := range clients {
		st, err := cl.AppendStream(ctx)
		if err != nil {
			return nil, fmt.Errorf("open AppendStream: %w", err)
		}
		streams[i] = st
	}
	return func(ctx context.Context, client, seq int) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		st := streams[client]
		if err := st.Send(&sessiondv1.AppendStreamRequest{Append: appendReq(client, seq)}); err != nil {
			_, err = st.Recv() // the status the stream ended with
			return err
		}
		resp, err := st.Recv()
		if err != nil {
			return err
		}
		return sdk.AppendStreamError(resp)
	}, nil
}

// --- health ---

type healthReport struct {
	Mode      string    `json:"mode"`
	Ops       int64     `json:"ops"`
	Seconds   float64   `json:"seconds"`
	OpsPerSec float64   `json:"ops_per_sec"`
	Latency   latencyMS `json:"latency_ms"`
}

func (r *healthReport) rows() [][2]string {
	rows := [][2]string{
		{"mode", r.Mode},
		{"checks", strconv.FormatInt(r.Ops, 10)},
		{"elapsed", fmt.Sprintf("%.2f s", r.Seconds)},
		{"throughput", fmtRate(r.OpsPerSec)},
	}
	return append(rows, r.Latency.rows("round trip")...)
}

// runHealth times sequential health checks: one unary round trip each.
func runHealth(ctx context.Context, c *config, stderr io.Writer) (report, error) {
	conn, err := dial(c)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	hc := healthpb.NewHealthClient(conn)
	check := func() error {
		cctx, cancel := context.WithTimeout(ctx, c.timeout)
		defer cancel()
		resp, err := hc.Check(cctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return fmt.Errorf("health check: %w", err)
		}
		if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			return fmt.Errorf("health check: daemon is %v", resp.GetStatus())
		}
		return nil
	}
	lat, elapsed, err := timeSequential(ctx, c, check)
	if err != nil {
		return nil, err
	}
	return &healthReport{
		Mode: "health", Ops: int64(len(lat)), Seconds: elapsed.Seconds(),
		OpsPerSec: float64(len(lat)) / elapsed.Seconds(), Latency: summarize(lat),
	}, ctx.Err()
}

// timeSequential calls op --warmup times untimed, then times one call after
// another until --count calls, --duration or ctx ends the run. It returns
// each timed call's latency and the run's wall time; an error of op ends
// the run.
func timeSequential(ctx context.Context, c *config, op func() error) ([]time.Duration, time.Duration, error) {
	for range c.warmup {
		if err := op(); err != nil {
			return nil, 0, err
		}
	}
	lat := make([]time.Duration, 0, min(c.count, 1<<20))
	start := time.Now()
	deadline := start.Add(c.duration)
	for len(lat) < c.count && time.Now().Before(deadline) && ctx.Err() == nil {
		t0 := time.Now()
		if err := op(); err != nil {
			return nil, 0, err
		}
		lat = append(lat, time.Since(t0))
	}
	return lat, time.Since(start), nil
}

// --- list ---

type listRun struct {
	FirstMS  float64 `json:"first_ms"`
	AllMS    float64 `json:"all_ms"`
	Sessions int64   `json:"sessions"`
}

type listReport struct {
	Mode            string    `json:"mode"`
	Populated       int64     `json:"populated"`
	PopulateSeconds float64   `json:"populate_seconds"`
	PopulatePerSec  float64   `json:"populate_per_sec"`
	Sessions        int64     `json:"sessions"`
	FirstMSMedian   float64   `json:"first_ms_median"`
	AllMSMedian     float64   `json:"all_ms_median"`
	SessionsPerSec  float64   `json:"sessions_per_sec"`
	Runs            []listRun `json:"runs"`
}

func (r *listReport) rows() [][2]string {
	rows := [][2]string{{"mode", r.Mode}}
	if r.Populated > 0 {
		rows = append(rows, [2]string{"sessions created", fmt.Sprintf("%d in %.1f s (%s)", r.Populated, r.PopulateSeconds, fmtRate(r.PopulatePerSec))})
	}
	rows = append(rows,
		[2]string{"sessions listed", strconv.FormatInt(r.Sessions, 10)},
		[2]string{"first result (median)", fmtMS(r.FirstMSMedian)},
		[2]string{"all results (median)", fmtMS(r.AllMSMedian)},
		[2]string{"rate (median run)", fmtRate(r.SessionsPerSec)},
	)
	for i, run := range r.Runs {
		rows = append(rows, [2]string{fmt.Sprintf("run %d", i+1), fmt.Sprintf("first %s, all %s, %d sessions", fmtMS(run.FirstMS), fmtMS(run.AllMS), run.Sessions)})
	}
	return rows
}

// runList creates --populate sessions with --clients workers, then times
// --repeat listings of the whole namespace.
func runList(ctx context.Context, c *config, stderr io.Writer) (report, error) {
	conns, closeAll, err := dialN(c, c.clients)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	rep := &listReport{Mode: "list"}

	if c.populate > 0 {
		var (
			next, made atomic.Int64
			wg         sync.WaitGroup
			errs       = make([]error, len(conns))
		)
		start := time.Now()
		for i, cc := range conns {
			cl := sessiondv1.NewSessionStoreServiceClient(cc)
			wg.Go(func() {
				for next.Add(1) <= int64(c.populate) {
					if _, err := createSession(ctx, c, cl, "sessiond-load list"); err != nil {
						errs[i] = err
						return
					}
					if n := made.Add(1); n%20000 == 0 {
						fmt.Fprintf(stderr, "sessiond-load: created %d of %d sessions\n", n, c.populate)
					}
				}
			})
		}
		wg.Wait()
		rep.Populated = made.Load()
		rep.PopulateSeconds = time.Since(start).Seconds()
		rep.PopulatePerSec = float64(rep.Populated) / rep.PopulateSeconds
		if err := errors.Join(errs...); err != nil {
			return rep, fmt.Errorf("populate: %w", err)
		}
	}

	cl := sessiondv1.NewSessionStoreServiceClient(conns[0])
	var firsts, alls, rates []float64
	for range c.repeat {
		run, err := listOnce(ctx, c, cl)
		if err != nil {
			return rep, err
		}
		rep.Runs = append(rep.Runs, run)
		firsts = append(firsts, run.FirstMS)
		alls = append(alls, run.AllMS)
		rates = append(rates, float64(run.Sessions)/(run.AllMS/1000))
		rep.Sessions = run.Sessions
	}
	rep.FirstMSMedian, rep.AllMSMedian, rep.SessionsPerSec = median(firsts), median(alls), median(rates)
	if rep.Sessions < rep.Populated {
		return rep, fmt.Errorf("listed %d sessions, fewer than the %d just created", rep.Sessions, rep.Populated)
	}
	return rep, nil
}

func listOnce(ctx context.Context, c *config, cl sessiondv1.SessionStoreServiceClient) (listRun, error) {
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	start := time.Now()
	stream, err := cl.ListSessions(cctx, &sessiondv1.ListSessionsRequest{Namespace: c.namespace})
	if err != nil {
		return listRun{}, fmt.Errorf("list sessions: %w", err)
	}
	var run listRun
	for {
		_, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return listRun{}, fmt.Errorf("list sessions after %d: %w", run.Sessions, err)
		}
		if run.Sessions == 0 {
			run.FirstMS = ms(time.Since(start))
		}
		run.Sessions++
	}
	run.AllMS = ms(time.Since(start))
	if run.Sessions == 0 {
		run.FirstMS = run.AllMS // an empty listing's first answer is its end
	}
	return run, nil
}

// --- load ---

type loadRun struct {
	FirstMS     float64 `json:"first_ms"`
	AllMS       float64 `json:"all_ms"`
	MessagesSec float64 `json:"messages_per_sec"`
}

type loadReport struct {
	Mode              string    `json:"mode"`
	Messages          int       `json:"messages"`
	Size              int       `json:"size"`
	FillSeconds       float64   `json:"fill_seconds"`
	MessagesSecMedian float64   `json:"messages_per_sec_median"`
	AllMSMedian       float64   `json:"all_ms_median"`
	Runs              []loadRun `json:"runs"`
}

func (r *loadReport) rows() [][2]string {
	rows := [][2]string{
		{"mode", r.Mode},
		{"messages", fmt.Sprintf("%d of %d B (filled in %.1f s)", r.Messages, r.Size, r.FillSeconds)},
		{"load time (median)", fmtMS(r.AllMSMedian)},
		{"rate (median)", fmtRate(r.MessagesSecMedian)},
	}
	for i, run := range r.Runs {
		rows = append(rows, [2]string{fmt.Sprintf("run %d", i+1), fmt.Sprintf("first frame %s, all %s, %s", fmtMS(run.FirstMS), fmtMS(run.AllMS), fmtRate(run.MessagesSec))})
	}
	return rows
}

// runLoad fills one session with --messages messages, then times --repeat
// full LoadSession streams, each of which must return every message.
func runLoad(ctx context.Context, c *config, stderr io.Writer) (report, error) {
	conn, err := dial(c)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	cl := sessiondv1.NewSessionStoreServiceClient(conn)
	id, err := createSession(ctx, c, cl, "sessiond-load load")
	if err != nil {
		return nil, err
	}
	rep := &loadReport{Mode: "load", Messages: c.messages, Size: c.size}
	content := payload(c.size)
	start := time.Now()
	for done := 0; done < c.messages; {
		n := min(c.batch, c.messages-done)
		msgs := make([]*sessiondv1.Message, n)
		for i := range msgs {
			msgs[i] = &sessiondv1.Message{Id: "m" + strconv.Itoa(done+i), Role: sessiondv1.Role_ROLE_ASSISTANT, Content: content}
		}
		cctx, cancel := context.WithTimeout(ctx, c.timeout)
		_, err := cl.AppendMessages(cctx, &sessiondv1.AppendMessagesRequest{Ref: idRef(c.namespace, id), Messages: msgs})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("fill session %s at %d messages: %w", id, done, err)
		}
		done += n
	}
	rep.FillSeconds = time.Since(start).Seconds()

	var rates, alls []float64
	for range c.repeat {
		run, got, err := loadOnce(ctx, c, cl, id)
		if err != nil {
			return rep, err
		}
		if got != c.messages {
			return rep, fmt.Errorf("load session %s: got %d messages, want %d", id, got, c.messages)
		}
		rep.Runs = append(rep.Runs, run)
		rates = append(rates, run.MessagesSec)
		alls = append(alls, run.AllMS)
	}
	rep.MessagesSecMedian, rep.AllMSMedian = median(rates), median(alls)
	return rep, nil
}

func loadOnce(ctx context.Context, c *config, cl sessiondv1.SessionStoreServiceClient, id string) (loadRun, int, error) {
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	start := time.Now()
	stream, err := cl.LoadSession(cctx, &sessiondv1.LoadSessionRequest{Ref: idRef(c.namespace, id)})
	if err != nil {
		return loadRun{}, 0, fmt.Errorf("load session %s: %w", id, err)
	}
	var run loadRun
	got, frames := 0, 0
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return loadRun{}, 0, fmt.Errorf("load session %s after %d messages: %w", id, got, err)
		}
		if frames == 0 {
			run.FirstMS = ms(time.Since(start))
		}
		frames++
		got += len(resp.GetMessages())
	}
	run.AllMS = ms(time.Since(start))
	run.MessagesSec = float64(got) / (run.AllMS / 1000)
	return run, got, nil
}

// --- fsync ---

type fsyncReport struct {
	Mode      string    `json:"mode"`
	Dir       string    `json:"dir"`
	Size      int       `json:"size"`
	Ops       int64     `json:"ops"`
	Seconds   float64   `json:"seconds"`
	OpsPerSec float64   `json:"ops_per_sec"`
	Latency   latencyMS `json:"latency_ms"`
}

func (r *fsyncReport) rows() [][2]string {
	rows := [][2]string{
		{"mode", r.Mode},
		{"dir", r.Dir},
		{"append size", fmt.Sprintf("%d B", r.Size)},
		{"appends", strconv.FormatInt(r.Ops, 10)},
		{"elapsed", fmt.Sprintf("%.2f s", r.Seconds)},
		{"throughput", fmtRate(r.OpsPerSec)},
	}
	return append(rows, r.Latency.rows("write+fdatasync")...)
}

// runFsync measures the disk part of the append floor: write --size bytes at
// the end of a growing file, then fdatasync, which must also commit the new
// file size (as an append to a journal that was not preallocated does).
func runFsync(ctx context.Context, c *config, stderr io.Writer) (report, error) {
	f, err := os.CreateTemp(c.dir, ".sessiond-load-fsync-*")
	if err != nil {
		return nil, fmt.Errorf("fsync floor: %w", err)
	}
	defer func() {
		_ = f.Close()
		_ = os.Remove(f.Name())
	}()
	buf := []byte(payload(c.size))
	fd := int(f.Fd())
	appendSync := func() error {
		if _, err := f.Write(buf); err != nil {
			return fmt.Errorf("fsync floor: write: %w", err)
		}
		if err := datasync(fd); err != nil {
			return fmt.Errorf("fsync floor: fdatasync: %w", err)
		}
		return nil
	}
	lat, elapsed, err := timeSequential(ctx, c, appendSync)
	if err != nil {
		return nil, err
	}
	return &fsyncReport{
		Mode: "fsync", Dir: c.dir, Size: c.size, Ops: int64(len(lat)), Seconds: elapsed.Seconds(),
		OpsPerSec: float64(len(lat)) / elapsed.Seconds(), Latency: summarize(lat),
	}, ctx.Err()
}
