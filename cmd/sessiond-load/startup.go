package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// --- startup ---

type startupReport struct {
	Mode           string    `json:"mode"`
	CleanMS        []float64 `json:"clean_ms"`
	KilledMS       []float64 `json:"killed_ms,omitempty"`
	CleanMSMedian  float64   `json:"clean_ms_median"`
	KilledMSMedian float64   `json:"killed_ms_median,omitempty"`
	// The store's share: how long opening it took, as the daemon logged.
	CleanOpenMSMedian  float64 `json:"clean_store_open_ms_median"`
	KilledOpenMSMedian float64 `json:"killed_store_open_ms_median,omitempty"`
	Appends            int64   `json:"appends_before_kills,omitempty"`
}

func (r *startupReport) rows() [][2]string {
	rows := [][2]string{
		{"mode", r.Mode},
		{"ready after a clean stop (median)", fmtMS(r.CleanMSMedian)},
		{"  of which opening the store", fmtMS(r.CleanOpenMSMedian)},
	}
	if len(r.KilledMS) > 0 {
		rows = append(rows,
			[2]string{"ready after kill -9 under load (median)", fmtMS(r.KilledMSMedian)},
			[2]string{"  of which opening the store", fmtMS(r.KilledOpenMSMedian)},
			[2]string{"appends before the kills", strconv.FormatInt(r.Appends, 10)})
	}
	for i, v := range r.CleanMS {
		row := fmt.Sprintf("clean %s", fmtMS(v))
		if i < len(r.KilledMS) {
			row += fmt.Sprintf(", after kill -9 %s", fmtMS(r.KilledMS[i]))
		}
		rows = append(rows, [2]string{fmt.Sprintf("run %d", i+1), row})
	}
	return rows
}

// runStartup times --repeat start-ups of sessiond over --dir: from starting
// the process to its first SERVING health check. Each run starts the daemon
// after a clean stop (SIGTERM) and, with --load, appends from --clients
// clients for that long, kills it with SIGKILL and times the start-up after
// that too. An untimed start and stop comes first, so that the first run
// also follows a clean stop.
func runStartup(ctx context.Context, c *config, stderr io.Writer) (report, error) {
	rep := &startupReport{Mode: "startup"}
	var cleanOpen, killedOpen []float64
	d, err := startSoakDaemon(ctx, c)
	if err != nil {
		return nil, err
	}
	if err := d.stop(); err != nil {
		return nil, err
	}
	for i := range c.repeat {
		took, d, err := timedStart(ctx, c)
		if err != nil {
			return rep, err
		}
		rep.CleanMS = append(rep.CleanMS, took)
		cleanOpen = append(cleanOpen, ms(d.storeOpen))
		if c.duration > 0 {
			n, err := appendLoad(ctx, c)
			rep.Appends += n
			d.kill()
			if err != nil {
				return rep, err
			}
			if took, d, err = timedStart(ctx, c); err != nil {
				return rep, err
			}
			rep.KilledMS = append(rep.KilledMS, took)
			killedOpen = append(killedOpen, ms(d.storeOpen))
		}
		if err := d.stop(); err != nil {
			return rep, err
		}
		fmt.Fprintf(stderr, "sessiond-load: start-up run %d of %d done\n", i+1, c.repeat)
	}
	rep.CleanMSMedian, rep.KilledMSMedian = median(rep.CleanMS), median(rep.KilledMS)
	rep.CleanOpenMSMedian, rep.KilledOpenMSMedian = median(cleanOpen), median(killedOpen)
	return rep, nil
}

// timedStart starts the daemon and waits for its first SERVING health
// check; it returns the time that took, in milliseconds.
func timedStart(ctx context.Context, c *config) (float64, *soakDaemon, error) {
	start := time.Now()
	d, err := startSoakDaemon(ctx, c)
	if err != nil {
		return 0, nil, err
	}
	if err := waitServing(ctx, c); err != nil {
		d.kill()
		return 0, nil, err
	}
	return ms(time.Since(start)), d, nil
}

// waitServing calls Health.Check until it answers SERVING, within --timeout.
func waitServing(ctx context.Context, c *config) error {
	conn, err := dial(c)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	hc := healthpb.NewHealthClient(conn)
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	for {
		resp, err := hc.Check(cctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		if cctx.Err() != nil {
			return fmt.Errorf("sessiond not serving within --timeout %v: last answer %v, %v", c.timeout, resp.GetStatus(), err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// appendLoad has --clients clients, each on its own connection and its own
// new session, append --size-byte messages one call at a time for
// --duration, and returns how many appends were acknowledged.
func appendLoad(ctx context.Context, c *config) (int64, error) {
	conns, closeAll, err := dialN(c, c.clients)
	if err != nil {
		return 0, err
	}
	defer closeAll()
	lctx, cancel := context.WithTimeout(ctx, c.duration)
	defer cancel()
	content := string(make([]byte, c.size))
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total int64
		errs  = make([]error, len(conns))
	)
	for i, cc := range conns {
		cl := sessiondv1.NewSessionStoreServiceClient(cc)
		wg.Go(func() {
			id, err := createSession(ctx, c, cl, "sessiond-load startup")
			if err != nil {
				errs[i] = err
				return
			}
			n := int64(0)
			defer func() { mu.Lock(); total += n; mu.Unlock() }()
			for k := 0; lctx.Err() == nil; k++ {
				_, err := cl.AppendMessages(lctx, &sessiondv1.AppendMessagesRequest{Ref: idRef(c.namespace, id),
					Messages: []*sessiondv1.Message{{Id: "m" + strconv.Itoa(k), Role: sessiondv1.Role_ROLE_USER, Content: content}}})
				if err != nil {
					if status.Code(err) != codes.DeadlineExceeded { // the load's end, else
						errs[i] = fmt.Errorf("append: %w", err)
					}
					return
				}
				n++
			}
		})
	}
	wg.Wait()
	return total, errors.Join(errs...)
}
