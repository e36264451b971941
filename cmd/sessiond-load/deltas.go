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

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// --- deltas ---

type deltasReport struct {
	Mode     string  `json:"mode"`
	Sessions int     `json:"sessions"`
	Rate     int     `json:"rate_per_session"`
	Size     int     `json:"size"`
	Acked    int64   `json:"deltas_acknowledged"`
	Errors   int64   `json:"errors"`
	Seen     int64   `json:"deltas_seen"`
	Seconds  float64 `json:"seconds"`
	PerSec   float64 `json:"deltas_per_sec"`
	// Lag is from a delta's send to its arrival at the watcher that joined
	// mid-stream, over the deltas sent after it joined.
	Lag latencyMS `json:"lag_ms"`
	// Ack is from a delta's send to its writer's answer (the delta
	// durable): the part of Lag before the watch delivers it.
	Ack latencyMS `json:"ack_ms"`
}

func (r *deltasReport) rows() [][2]string {
	return append([][2]string{
		{"mode", r.Mode},
		{"sessions x rate", fmt.Sprintf("%d x %d/s", r.Sessions, r.Rate)},
		{"delta size", fmt.Sprintf("%d B", r.Size)},
		{"deltas acknowledged", strconv.FormatInt(r.Acked, 10)},
		{"deltas failed", strconv.FormatInt(r.Errors, 10)},
		{"deltas seen by watchers", strconv.FormatInt(r.Seen, 10)},
		{"elapsed", fmt.Sprintf("%.2f s", r.Seconds)},
		{"throughput", fmtRate(r.PerSec)},
	}, append(r.Ack.rows("writer ack"), r.Lag.rows("watcher lag")...)...)
}

// runDeltas: each session has an open message written by one writer at
// --rate deltas of 16 bytes a second (each delta is its send time, in
// hexadecimal nanoseconds). After a second, one watcher per session joins
// mid-stream (a load, then a watch from the loaded revision) and measures
// each delta's lag. At the end every message is finished; each watcher's
// copy (the loaded text plus its deltas, each at the offset where the
// previous one ended) must equal the stored message: every delta once, in
// order.
func runDeltas(ctx context.Context, c *config, stderr io.Writer) (report, error) {
	if c.size != 16 {
		return nil, usagef("--size %d: a delta carries its send time in 16 bytes", c.size)
	}
	if c.sessions < 1 || c.rate < 1 {
		return nil, usagef("--sessions and --rate must be at least 1")
	}
	conns, closeAll, err := dialN(c, min(c.sessions, 16))
	if err != nil {
		return nil, err
	}
	defer closeAll()
	client := func(i int) sessiondv1.SessionStoreServiceClient {
		return sessiondv1.NewSessionStoreServiceClient(conns[i%len(conns)])
	}
	ids := make([]string, c.sessions)
	for i := range ids {
		open := &sessiondv1.Message{Id: "live", Role: sessiondv1.Role_ROLE_ASSISTANT, State: sessiondv1.MessageState_MESSAGE_STATE_STREAMING}
		if ids[i], err = createSession(ctx, c, client(i), "deltas", open); err != nil {
			return nil, err
		}
	}
	var acked, failed, seen atomic.Int64
	runCtx, stop := context.WithTimeout(ctx, c.duration)
	defer stop()
	start := time.Now()
	acks := make([][]time.Duration, len(ids))
	var writers sync.WaitGroup
	for i, id := range ids {
		writers.Go(func() {
			cl, ref := client(i), idRef(c.namespace, id)
			tick := time.NewTicker(time.Second / time.Duration(c.rate))
			defer tick.Stop()
			var off int64
			for {
				select {
				case <-runCtx.Done():
					return
				case <-tick.C:
				}
				cctx, cancel := context.WithTimeout(ctx, c.timeout)
				sent := time.Now()
				resp, err := cl.AppendDelta(cctx, &sessiondv1.AppendDeltaRequest{Ref: ref, MessageId: "live", Offset: off,
					Content: fmt.Sprintf("%016x", sent.UnixNano())})
				cancel()
				if err != nil {
					failed.Add(1)
					continue // the next delta goes at the same offset
				}
				acks[i] = append(acks[i], time.Since(sent))
				off = resp.GetLength()
				acked.Add(1)
			}
		})
	}
	// The watchers join mid-stream.
	select {
	case <-time.After(time.Second):
	case <-runCtx.Done():
	}
	lags := make([][]time.Duration, len(ids))
	copies := make([]string, len(ids))
	watchErrs := make(chan error, len(ids))
	var watchers sync.WaitGroup
	for i, id := range ids {
		watchers.Go(func() {
			text, got, err := followTurn(ctx, c, client(i), idRef(c.namespace, id), &lags[i])
			copies[i] = text
			seen.Add(got)
			if err != nil {
				watchErrs <- fmt.Errorf("watcher of session %s: %w", id, err)
			}
		})
	}
	writers.Wait()
	elapsed := time.Since(start)
	for i, id := range ids {
		cctx, cancel := context.WithTimeout(ctx, c.timeout)
		_, err := client(i).FinishMessage(cctx, &sessiondv1.FinishMessageRequest{Ref: idRef(c.namespace, id), MessageId: "live"})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("finish the message of session %s: %w", id, err)
		}
	}
	watchers.Wait()
	close(watchErrs)
	for err := range watchErrs {
		return nil, err
	}
	for i, id := range ids {
		_, stored, err := loadLast(ctx, c, client(i), idRef(c.namespace, id))
		if err != nil {
			return nil, err
		}
		if stored != copies[i] {
			return nil, fmt.Errorf("session %s: the watcher's copy (%d bytes) differs from the stored message (%d bytes): a delta was lost, repeated or reordered", id, len(copies[i]), len(stored))
		}
	}
	var all, allAcks []time.Duration
	for _, l := range lags {
		all = append(all, l...)
	}
	for _, a := range acks {
		allAcks = append(allAcks, a...)
	}
	fmt.Fprintf(stderr, "sessiond-load: deltas: %d sessions, watchers' copies match the stored messages\n", len(ids))
	return &deltasReport{Mode: "deltas", Sessions: c.sessions, Rate: c.rate, Size: c.size, Acked: acked.Load(), Errors: failed.Load(),
		Seen: seen.Load(), Seconds: elapsed.Seconds(), PerSec: float64(acked.Load()) / elapsed.Seconds(), Lag: summarize(all), Ack: summarize(allAcks)}, nil
}

// followTurn joins a live turn: it loads the open message, then watches
// from the loaded revision until the message is finished, checking that
// each delta starts where the text ends, and records each delta's lag. A
// session's watch history is kept only once it is watched, so the first
// watch may be told to reload (OUT_OF_RANGE): it then loads and watches
// again, as every client does.
func followTurn(ctx context.Context, c *config, cl sessiondv1.SessionStoreServiceClient, ref *sessiondv1.SessionRef, lags *[]time.Duration) (string, int64, error) {
	var got int64
	for attempt := 0; ; attempt++ {
		rev, text, err := loadLast(ctx, c, cl, ref)
		if err != nil {
			return "", got, err
		}
		w, err := cl.WatchSession(ctx, &sessiondv1.WatchSessionRequest{Ref: ref, FromRevision: rev})
		if err != nil {
			return text, got, err
		}
		for {
			ev, err := w.Recv()
			if status.Code(err) == codes.OutOfRange && attempt < 10 {
				break
			}
			if err != nil {
				return text, got, err
			}
			switch ev.GetType() {
			case sessiondv1.EventType_EVENT_TYPE_DELTA:
				d := ev.GetDelta()
				if d.GetOffset() != int64(len(text)) {
					return text, got, fmt.Errorf("delta at offset %d, but the text so far is %d bytes: a gap or a repeat", d.GetOffset(), len(text))
				}
				if sent, err := strconv.ParseInt(d.GetContent(), 16, 64); err == nil {
					*lags = append(*lags, time.Since(time.Unix(0, sent)))
				}
				text += d.GetContent()
				got++
			case sessiondv1.EventType_EVENT_TYPE_FINISHED:
				return text, got, nil
			default:
				return text, got, fmt.Errorf("unexpected %v event at revision %d", ev.GetType(), ev.GetRevision())
			}
		}
	}
}

// loadLast returns a session's revision and the content of its last message.
func loadLast(ctx context.Context, c *config, cl sessiondv1.SessionStoreServiceClient, ref *sessiondv1.SessionRef) (uint64, string, error) {
	lctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	stream, err := cl.LoadSession(lctx, &sessiondv1.LoadSessionRequest{Ref: ref, Tail: true, Limit: 1})
	if err != nil {
		return 0, "", err
	}
	var rev uint64
	var text string
	for {
		frame, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return rev, text, nil
		}
		if err != nil {
			return 0, "", err
		}
		if s := frame.GetSession(); s != nil {
			rev = s.GetRevision()
		}
		for _, m := range frame.GetMessages() {
			text = m.GetContent()
		}
	}
}
