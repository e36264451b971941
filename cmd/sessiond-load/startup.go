package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
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
	Mode string `json:"mode"`
	// Each start-up, in run order: from launching the process to its first
	// answer to a listing (after a SERVING health check), and the CPU time
	// the daemon had used by then.
	CleanMS        []float64 `json:"clean_ms"`
	KilledMS       []float64 `json:"killed_ms,omitempty"`
	CleanCPUMS     []float64 `json:"clean_cpu_ms,omitempty"`
	KilledCPUMS    []float64 `json:"killed_cpu_ms,omitempty"`
	CleanMSMedian  float64   `json:"clean_ms_median"`
	KilledMSMedian float64   `json:"killed_ms_median,omitempty"`
	CleanMSMax     float64   `json:"clean_ms_max"`
	KilledMSMax    float64   `json:"killed_ms_max,omitempty"`
	// The store's share: how long opening it took, as the daemon logged.
	CleanOpenMSMedian  float64 `json:"clean_store_open_ms_median"`
	KilledOpenMSMedian float64 `json:"killed_store_open_ms_median,omitempty"`
	Appends            int64   `json:"appends_before_kills,omitempty"`
}

func (r *startupReport) rows() [][2]string {
	rows := [][2]string{
		{"mode", r.Mode},
		{"ready after a clean stop (median, max)", fmtMS(r.CleanMSMedian) + ", " + fmtMS(r.CleanMSMax)},
		{"  of which opening the store (median)", fmtMS(r.CleanOpenMSMedian)},
		{"  daemon CPU by then (median)", fmtMS(median(r.CleanCPUMS))},
	}
	if len(r.KilledMS) > 0 {
		rows = append(rows,
			[2]string{"ready after kill -9 under load (median, max)", fmtMS(r.KilledMSMedian) + ", " + fmtMS(r.KilledMSMax)},
			[2]string{"  of which opening the store (median)", fmtMS(r.KilledOpenMSMedian)},
			[2]string{"  daemon CPU by then (median)", fmtMS(median(r.KilledCPUMS))},
			[2]string{"appends before the kills", strconv.FormatInt(r.Appends, 10)})
	}
	for i, v := range r.CleanMS {
		row := fmt.Sprintf("clean %s", fmtMS(v))
		if i < len(r.CleanCPUMS) {
			row += fmt.Sprintf(" (CPU %s)", fmtMS(r.CleanCPUMS[i]))
		}
		if i < len(r.KilledMS) {
			row += fmt.Sprintf(", after kill -9 %s", fmtMS(r.KilledMS[i]))
		}
		if i < len(r.KilledCPUMS) {
			row += fmt.Sprintf(" (CPU %s)", fmtMS(r.KilledCPUMS[i]))
		}
		rows = append(rows, [2]string{fmt.Sprintf("run %d", i+1), row})
	}
	return rows
}

// runStartup times --repeat start-ups of sessiond over --dir: from starting
// the process until it is ready, that is until it answers a SERVING health
// check and then a listing of the default namespace (its first result, or
// its end when empty). Each run starts the daemon after a clean stop
// (SIGTERM) and, with --load, appends from --clients clients for that long,
// kills it with SIGKILL and times the start-up after that too. An untimed start and stop comes first, so that the first run
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
		st, err := timedStart(ctx, c)
		if err != nil {
			return rep, err
		}
		d := st.d
		rep.CleanMS = append(rep.CleanMS, st.ms)
		rep.CleanCPUMS = st.appendCPU(rep.CleanCPUMS)
		cleanOpen = append(cleanOpen, ms(d.storeOpen))
		if c.duration > 0 {
			n, err := appendLoad(ctx, c)
			rep.Appends += n
			d.kill()
			if err != nil {
				return rep, err
			}
			if st, err = timedStart(ctx, c); err != nil {
				return rep, err
			}
			d = st.d
			rep.KilledMS = append(rep.KilledMS, st.ms)
			rep.KilledCPUMS = st.appendCPU(rep.KilledCPUMS)
			killedOpen = append(killedOpen, ms(d.storeOpen))
		}
		if err := d.stop(); err != nil {
			return rep, err
		}
		fmt.Fprintf(stderr, "sessiond-load: start-up run %d of %d done\n", i+1, c.repeat)
	}
	rep.CleanMSMedian, rep.KilledMSMedian = median(rep.CleanMS), median(rep.KilledMS)
	rep.CleanMSMax, rep.KilledMSMax = maxOf(rep.CleanMS), maxOf(rep.KilledMS)
	rep.CleanOpenMSMedian, rep.KilledOpenMSMedian = median(cleanOpen), median(killedOpen)
	return rep, nil
}

// timedStartup is one start-up of the daemon, timed until it was ready.
type timedStartup struct {
	d      *soakDaemon
	ms     float64 // from launching the process
	cpuMS  float64 // the daemon's CPU time by then
	hasCPU bool    // false where it cannot be read (no /proc)
}

// timedStart starts the daemon and waits until it is ready (see
// runStartup).
func timedStart(ctx context.Context, c *config) (timedStartup, error) {
	start := time.Now()
	d, err := startSoakDaemon(ctx, c)
	if err != nil {
		return timedStartup{}, err
	}
	if err := waitReady(ctx, c); err != nil {
		d.kill()
		return timedStartup{}, err
	}
	st := timedStartup{d: d, ms: ms(time.Since(start))}
	if cpu, err := processCPU(d.cmd.Process.Pid); err == nil {
		st.cpuMS, st.hasCPU = ms(cpu), true
	}
	return st, nil
}

// appendCPU adds the daemon's CPU time at ready to cpu, if it was read.
func (st timedStartup) appendCPU(cpu []float64) []float64 {
	if !st.hasCPU {
		return cpu
	}
	return append(cpu, st.cpuMS)
}

// waitReady calls Health.Check until it answers SERVING, then lists the
// default namespace until its first answer, within --timeout.
func waitReady(ctx context.Context, c *config) error {
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
			break
		}
		if cctx.Err() != nil {
			return fmt.Errorf("sessiond not serving within --timeout %v: last answer %v, %v", c.timeout, resp.GetStatus(), err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	stream, err := sessiondv1.NewSessionStoreServiceClient(conn).ListSessions(cctx, &sessiondv1.ListSessionsRequest{})
	if err != nil {
		return fmt.Errorf("list sessions: %w", err)
	}
	if _, err := stream.Recv(); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("list sessions: %w", err)
	}
	return nil
}

// processCPU returns the CPU time (user and system) process pid has used,
// from /proc (clock ticks of 10 ms); an error where there is no /proc.
func processCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, field 2, is in parentheses and may hold spaces:
	// utime and stime are fields 14 and 15, the 12th and 13th after it.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

func maxOf(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return slices.Max(xs)
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
