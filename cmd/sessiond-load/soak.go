package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// --- soak ---

// soakSample is the daemon's resident memory at one moment of a soak.
type soakSample struct {
	Seconds float64 `json:"t_s"`
	RSSMiB  float64 `json:"rss_mib"`
	Appends int64   `json:"appends"`
}

type soakReport struct {
	Mode        string       `json:"mode"`
	Seconds     float64      `json:"seconds"`
	Clients     int          `json:"clients"`
	Watchers    int          `json:"watchers"`
	Stalled     int          `json:"stalled_readers"`
	Kills       int          `json:"kills"`
	Appends     int64        `json:"appends_acknowledged"`
	Failed      int64        `json:"calls_failed"`
	WatchEvents int64        `json:"watch_events"`
	Lost        int64        `json:"acknowledged_lost"`
	Samples     []soakSample `json:"rss"`
}

func (r *soakReport) rows() [][2]string {
	rows := [][2]string{
		{"mode", r.Mode},
		{"elapsed", fmt.Sprintf("%.0f s", r.Seconds)},
		{"clients / watchers / stalled readers", fmt.Sprintf("%d / %d / %d", r.Clients, r.Watchers, r.Stalled)},
		{"kill -9 and restarts", strconv.Itoa(r.Kills)},
		{"appends acknowledged", strconv.FormatInt(r.Appends, 10)},
		{"calls failed (daemon down)", strconv.FormatInt(r.Failed, 10)},
		{"watch events", strconv.FormatInt(r.WatchEvents, 10)},
		{"acknowledged and lost", strconv.FormatInt(r.Lost, 10)},
	}
	for _, s := range r.Samples {
		rows = append(rows, [2]string{fmt.Sprintf("rss at %4.0f s", s.Seconds), fmt.Sprintf("%.1f MiB (%d appends)", s.RSSMiB, s.Appends)})
	}
	return rows
}

// soakDaemon is the sessiond process a soak runs, kills and restarts.
type soakDaemon struct {
	cmd  *exec.Cmd
	addr string
	// storeOpen is how long the daemon said opening its file store took.
	storeOpen time.Duration
	done      chan struct{}
}

// startSoakDaemon runs c.sessiond on a free loopback port over c.dir and
// waits for its "sessiond started" log line.
func startSoakDaemon(ctx context.Context, c *config) (*soakDaemon, error) {
	cmd := exec.Command(c.sessiond, "--listen", "127.0.0.1:0", "--data-dir", c.dir, "--log-format", "json")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", c.sessiond, err)
	}
	d := &soakDaemon{cmd: cmd, done: make(chan struct{})}
	started := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var line struct{ Msg, Addr, Took string }
			if json.Unmarshal(sc.Bytes(), &line) != nil {
				continue
			}
			switch line.Msg {
			case "file store opened": // logged before "sessiond started"
				d.storeOpen, _ = time.ParseDuration(line.Took)
			case "sessiond started":
				started <- line.Addr
			}
		}
		_ = cmd.Wait()
		close(d.done)
	}()
	select {
	case d.addr = <-started:
		c.addr = d.addr
		return d, nil
	case <-d.done:
		return nil, fmt.Errorf("%s exited before it started", c.sessiond)
	case <-time.After(30 * time.Second):
		d.kill()
		return nil, fmt.Errorf("%s did not start within 30 s", c.sessiond)
	case <-ctx.Done():
		d.kill()
		return nil, ctx.Err()
	}
}

func (d *soakDaemon) kill() {
	_ = d.cmd.Process.Kill()
	<-d.done
}

func (d *soakDaemon) stop() error {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
		return nil
	case <-time.After(30 * time.Second):
		d.kill()
		return errors.New("sessiond did not stop within 30 s of SIGTERM")
	}
}

// rssMiB reads the process's resident set from /proc.
func rssMiB(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

// runSoak starts sessiond over --dir and, for --duration, runs --clients
// appenders (each on its own session), --watchers watches that reconnect,
// and --stalled readers that load a large session, read one frame and stop
// reading; every --kill-every it kills the daemon with SIGKILL, restarts it
// and checks that every acknowledged append is there. It prints the
// daemon's RSS every --sample. Any acknowledged append missing fails the run.
func runSoak(ctx context.Context, c *config, stderr io.Writer) (report, error) {
	rep := &soakReport{Mode: "soak", Clients: c.clients, Watchers: c.watchers, Stalled: c.stalled}
	d, err := startSoakDaemon(ctx, c)
	if err != nil {
		return nil, err
	}
	defer func() {
		if d != nil {
			d.kill()
		}
	}()
	conn, err := dial(c)
	if err != nil {
		return nil, err
	}
	cl := sessiondv1.NewSessionStoreServiceClient(conn)
	ids := make([]string, c.clients)
	for i := range ids {
		if ids[i], err = createSession(ctx, c, cl, fmt.Sprint("soak ", i)); err != nil {
			return nil, err
		}
	}
	// The stalled readers' session: large enough that a load cannot be
	// answered in one frame.
	big, err := createSession(ctx, c, cl, "soak big")
	if err != nil {
		return nil, err
	}
	chunk := make([]*sessiondv1.Message, 0, 64)
	for i := range 64 {
		chunk = append(chunk, &sessiondv1.Message{Id: fmt.Sprint("big-", i), Role: sessiondv1.Role_ROLE_USER, Content: payload(64 << 10)})
	}
	if _, err := cl.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: idRef(c.namespace, big), Messages: chunk}); err != nil {
		return nil, fmt.Errorf("fill the stalled readers' session: %w", err)
	}
	_ = conn.Close()

	acked := make([]atomic.Int64, c.clients) // per session: messages acknowledged, in order
	var failed, events atomic.Int64
	start := time.Now()
	runCtx, cancel := context.WithTimeout(ctx, c.duration)
	defer cancel()

	// epoch is one life of the daemon: its connection and the goroutines
	// using it, ended before a kill.
	var wg sync.WaitGroup
	epoch := func(ectx context.Context) error {
		conn, err := dial(c)
		if err != nil {
			return err
		}
		cl := sessiondv1.NewSessionStoreServiceClient(conn)
		var ewg sync.WaitGroup
		for i := range c.clients {
			content := payload(c.size) // the same for a retry: appends are idempotent by id and content
			ewg.Go(func() {
				for ectx.Err() == nil {
					n := acked[i].Load()
					cctx, ccancel := context.WithTimeout(ectx, c.timeout)
					_, err := cl.AppendMessages(cctx, &sessiondv1.AppendMessagesRequest{Ref: idRef(c.namespace, ids[i]), Messages: []*sessiondv1.Message{
						{Id: fmt.Sprint("m-", n), Role: sessiondv1.Role_ROLE_USER, Content: content},
					}})
					ccancel()
					if err != nil {
						failed.Add(1)
						time.Sleep(50 * time.Millisecond)
						continue
					}
					acked[i].Add(1)
				}
			})
		}
		for w := range c.watchers {
			ewg.Go(func() {
				for ectx.Err() == nil {
					st, err := cl.WatchSession(ectx, &sessiondv1.WatchSessionRequest{Ref: idRef(c.namespace, ids[w%len(ids)])})
					for err == nil {
						if _, err = st.Recv(); err == nil {
							events.Add(1)
						}
					}
					time.Sleep(50 * time.Millisecond)
				}
			})
		}
		for range c.stalled {
			ewg.Go(func() {
				st, err := cl.LoadSession(ectx, &sessiondv1.LoadSessionRequest{Ref: idRef(c.namespace, big)})
				if err == nil {
					_, _ = st.Recv() // one frame, then nothing until the epoch ends
				}
				<-ectx.Done()
			})
		}
		wg.Go(func() {
			ewg.Wait()
			_ = conn.Close()
		})
		return nil
	}

	sample := func() {
		s := soakSample{Seconds: time.Since(start).Seconds(), RSSMiB: rssMiB(d.cmd.Process.Pid)}
		for i := range acked {
			s.Appends += acked[i].Load()
		}
		rep.Samples = append(rep.Samples, s)
		fmt.Fprintf(stderr, "soak: %4.0f s  rss %.1f MiB  appends %d  kills %d\n", s.Seconds, s.RSSMiB, s.Appends, rep.Kills)
	}
	// verify checks that every session holds at least the messages acknowledged.
	verify := func() error {
		conn, err := dial(c)
		if err != nil {
			return err
		}
		defer conn.Close()
		cl := sessiondv1.NewSessionStoreServiceClient(conn)
		for i, id := range ids {
			cctx, ccancel := context.WithTimeout(ctx, c.timeout)
			resp, err := cl.GetSession(cctx, &sessiondv1.GetSessionRequest{Ref: idRef(c.namespace, id)})
			ccancel()
			if err != nil {
				return fmt.Errorf("after a restart, session %s: %w", id, err)
			}
			if have, want := resp.GetSession().GetMessageCount(), acked[i].Load(); have < want {
				rep.Lost += want - have
			} else if have > want {
				acked[i].Store(have) // landed, though its answer was cut off by the kill
			}
		}
		return nil
	}

	ectx, ecancel := context.WithCancel(runCtx)
	if err := epoch(ectx); err != nil {
		ecancel()
		return nil, err
	}
	sampleT := time.NewTicker(c.sample)
	defer sampleT.Stop()
	killT := time.NewTicker(c.killEvery)
	defer killT.Stop()
	sample()
loop:
	for {
		select {
		case <-runCtx.Done():
			break loop
		case <-sampleT.C:
			sample()
		case <-killT.C:
			d.kill()
			ecancel()
			wg.Wait()
			rep.Kills++
			if d, err = startSoakDaemon(ctx, c); err != nil {
				return rep, fmt.Errorf("restart after kill -9: %w", err)
			}
			if err := verify(); err != nil {
				return rep, err
			}
			ectx, ecancel = context.WithCancel(runCtx)
			if err := epoch(ectx); err != nil {
				ecancel()
				return rep, err
			}
		}
	}
	ecancel()
	wg.Wait()
	sample()
	err = verify()
	if serr := d.stop(); serr != nil && err == nil {
		err = serr
	}
	d = nil
	rep.Seconds = time.Since(start).Seconds()
	for i := range acked {
		rep.Appends += acked[i].Load()
	}
	rep.Failed, rep.WatchEvents = failed.Load(), events.Load()
	if err == nil && rep.Lost > 0 {
		err = fmt.Errorf("%d acknowledged appends were lost", rep.Lost)
	}
	return rep, err
}
