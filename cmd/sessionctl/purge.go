package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// defaultPurgeWorkers is how many sessions purge loads and deletes at once:
// enough to keep the daemon's parallel writers busy (deletes of different
// sessions do not wait for each other), few enough not to flood it.
const defaultPurgeWorkers = 16

// maxPurgeWorkers bounds --concurrency.
const maxPurgeWorkers = 256

func purgeCmd(e *env) *cobra.Command {
	var idle string
	var dryRun bool
	var workers int
	cmd := &cobra.Command{
		Use:   "purge --idle-for DURATION [--dry-run]",
		Short: "delete the sessions of the namespace not updated for a while",
		Long: `purge deletes every session of the namespace (--namespace) not updated for
--idle-for (30d, 12h, 90m, 45s, or sums such as 1d12h), and prints a report:
the sessions, messages and bytes removed. Bytes are the protobuf-encoded
size of the sessions' messages, as the daemon stores and limits them
(metadata and index overhead of the backend not included).

Each session is read, then deleted with its revision as expected_revision,
so a session written after the listing is kept (counted as skipped). With
--dry-run nothing is deleted: the sessions that would be are listed, with
the same report. Sessions are handled --concurrency at a time.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if idle == "" {
				return usageErrorf("purge: --idle-for is required (e.g. 30d)")
			}
			d, err := parseIdle(idle)
			if err != nil {
				return err
			}
			if workers < 1 || workers > maxPurgeWorkers {
				return usageErrorf("purge: --concurrency %d: give 1 to %d", workers, maxPurgeWorkers)
			}
			return e.purge(cmd.Context(), d, idle, dryRun, workers)
		},
	}
	f := cmd.Flags()
	f.StringVar(&idle, "idle-for", "", "delete sessions not updated for this long: 30d, 12h, 90m, 45s, 1d12h")
	f.BoolVar(&dryRun, "dry-run", false, "list what would be deleted, delete nothing")
	f.IntVar(&workers, "concurrency", defaultPurgeWorkers, "sessions read and deleted at once")
	return cmd
}

var idlePattern = regexp.MustCompile(`^(\d+[dhms])+$`)

// parseIdle reads a duration in days, hours, minutes and seconds.
func parseIdle(s string) (time.Duration, error) {
	if !idlePattern.MatchString(s) {
		return 0, usageErrorf("purge: --idle-for %q: give a duration in d, h, m or s, such as 30d, 12h, 1d12h", s)
	}
	var total time.Duration
	for _, m := range regexp.MustCompile(`(\d+)([dhms])`).FindAllStringSubmatch(s, -1) {
		n, err := strconv.ParseInt(m[1], 10, 64)
		unit := map[string]time.Duration{"d": 24 * time.Hour, "h": time.Hour, "m": time.Minute, "s": time.Second}[m[2]]
		if err != nil || n > int64((1<<63-1)/unit) || total+time.Duration(n)*unit < total {
			return 0, usageErrorf("purge: --idle-for %q is too long", s)
		}
		total += time.Duration(n) * unit
	}
	if total <= 0 {
		return 0, usageErrorf("purge: --idle-for %q: give more than zero", s)
	}
	return total, nil
}

// purgeReport is what purge prints at the end.
type purgeReport struct {
	Namespace    string  `json:"namespace"`
	IdleFor      string  `json:"idle_for"`
	Cutoff       string  `json:"cutoff"`
	DryRun       bool    `json:"dry_run"`
	Listed       int64   `json:"listed"`
	Sessions     int64   `json:"sessions"`
	Messages     int64   `json:"messages"`
	Bytes        int64   `json:"bytes"`
	Skipped      int64   `json:"skipped"`
	Failed       int64   `json:"failed"`
	ListSeconds  float64 `json:"list_seconds"`
	TotalSeconds float64 `json:"total_seconds"`
}

// purgeResult is one session's outcome.
type purgeResult struct {
	s       *sessiondv1.Session // as loaded
	bytes   int64
	skipped bool // written since the listing, or gone
	err     error
}

func (e *env) purge(ctx context.Context, idle time.Duration, idleText string, dryRun bool, workers int) error {
	c, err := e.dial(ctx)
	if err != nil {
		return err
	}
	start := time.Now()
	cutoff := start.Add(-idle)
	listed, err := e.listSessions(ctx, c, "purge: list", &sessiondv1.ListSessionsRequest{Namespace: e.namespace, UpdatedBefore: timestamppb.New(cutoff)})
	if err != nil {
		return err
	}
	rep := purgeReport{Namespace: e.namespace, IdleFor: idleText, Cutoff: cutoff.UTC().Format(time.RFC3339), DryRun: dryRun,
		Listed: int64(len(listed)), ListSeconds: time.Since(start).Seconds()}

	results := make(chan purgeResult)
	go func() {
		var g errgroup.Group
		g.SetLimit(workers)
		for _, s := range listed {
			if ctx.Err() != nil {
				break
			}
			g.Go(func() error {
				results <- e.purgeOne(ctx, c, s, cutoff, dryRun)
				return nil
			})
		}
		_ = g.Wait() // every call reports nil; its outcome goes to results
		close(results)
	}()

	verb := "purged"
	if dryRun {
		verb = "would purge"
	}
	prog := newProgress(e, verb)
	defer prog.finish()
	var firstErr error
	var done int64
	var candidates []purgeResult // with --dry-run, listed oldest first at the end
	for r := range results {
		done++
		prog.update(done, rep.Listed, "sessions")
		switch {
		case r.err != nil:
			rep.Failed++
			if firstErr == nil {
				firstErr = r.err
			}
			continue
		case r.skipped:
			rep.Skipped++
			continue
		}
		rep.Sessions++
		rep.Messages += r.s.GetMessageCount()
		rep.Bytes += r.bytes
		if dryRun {
			candidates = append(candidates, r)
		}
	}
	prog.finish()
	if err := e.printPurgeCandidates(candidates); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return &exitErr{code: exitError, grpc: codes.Canceled, err: fmt.Errorf("purge: interrupted after %d of %d sessions", done, rep.Listed)}
	}
	rep.TotalSeconds = time.Since(start).Seconds()
	if e.json {
		b, _ := json.Marshal(rep)
		fmt.Fprintf(e.stdout, "%s\n", b)
	} else {
		fmt.Fprintf(e.stdout, "%s %d sessions of %s idle since before %s: %d messages, %s of messages (encoded)",
			verb, rep.Sessions, e.nsLabel(), fmtTime(timestamppb.New(cutoff)), rep.Messages, humanBytes(rep.Bytes))
		if rep.Skipped > 0 {
			fmt.Fprintf(e.stdout, "; %d skipped (written or deleted since the listing)", rep.Skipped)
		}
		fmt.Fprintf(e.stdout, "; listed %d in %s, done in %s\n", rep.Listed, roundDur(rep.ListSeconds), roundDur(rep.TotalSeconds))
	}
	if firstErr != nil {
		return fmt.Errorf("purge: %d sessions could not be purged; the first: %w", rep.Failed, firstErr)
	}
	return nil
}

// printPurgeCandidates lists what a dry run would delete, the longest
// idle first: a table, or JSON lines with --json.
func (e *env) printPurgeCandidates(rs []purgeResult) error {
	if len(rs) == 0 {
		return nil
	}
	slices.SortFunc(rs, func(a, b purgeResult) int {
		return cmp.Or(a.s.GetUpdatedAt().AsTime().Compare(b.s.GetUpdatedAt().AsTime()), strings.Compare(a.s.GetId(), b.s.GetId()))
	})
	if e.json {
		for _, r := range rs {
			if err := json.NewEncoder(e.stdout).Encode(map[string]any{"id": r.s.GetId(), "alias": r.s.GetAlias(), "updated_at": r.s.GetUpdatedAt().AsTime().UTC().Format(time.RFC3339Nano),
				"message_count": r.s.GetMessageCount(), "bytes": r.bytes}); err != nil {
				return err
			}
		}
		return nil
	}
	tb := newTable(e.stdout, "ID", "ALIAS", "UPDATED", "MESSAGES", "BYTES")
	for _, r := range rs {
		if err := tb.row(r.s.GetId(), safeLine(r.s.GetAlias()), fmtTime(r.s.GetUpdatedAt()), fmt.Sprint(r.s.GetMessageCount()), fmt.Sprint(r.bytes)); err != nil {
			return err
		}
	}
	return tb.flush()
}

// purgeOne reads session s (to count its messages and bytes, and to
// learn its revision) and, unless dryRun, deletes it at that revision.
func (e *env) purgeOne(ctx context.Context, c sessiondv1.SessionStoreServiceClient, listed *sessiondv1.Session, cutoff time.Time, dryRun bool) purgeResult {
	ref := e.idRef(listed.GetId())
	stream, err := c.LoadSession(ctx, &sessiondv1.LoadSessionRequest{Ref: ref})
	if err != nil {
		return purgeResult{err: e.rpcError("load "+listed.GetId(), err)}
	}
	var s *sessiondv1.Session
	var size int64
	for {
		resp, err := stream.Recv()
		if err != nil {
			if status.Code(err) == codes.NotFound {
				return purgeResult{skipped: true}
			}
			if errors.Is(err, io.EOF) {
				break
			}
			return purgeResult{err: e.rpcError("load "+listed.GetId(), err)}
		}
		if s == nil {
			s = resp.GetSession()
		}
		for _, m := range resp.GetMessages() {
			size += int64(proto.Size(m))
		}
	}
	if s == nil || !s.GetUpdatedAt().AsTime().Before(cutoff) {
		return purgeResult{skipped: true} // written since the listing: not idle
	}
	if !dryRun {
		_, err := c.DeleteSession(ctx, &sessiondv1.DeleteSessionRequest{Ref: ref, ExpectedRevision: s.GetRevision()})
		switch status.Code(err) {
		case codes.OK:
		case codes.Aborted, codes.NotFound:
			return purgeResult{skipped: true}
		default:
			return purgeResult{err: e.rpcError("delete "+listed.GetId(), err)}
		}
	}
	return purgeResult{s: s, bytes: size}
}

// humanBytes writes a byte count in binary units.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d bytes", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB (%d bytes)", float64(n)/float64(div), "KMGTPE"[exp], n)
}

func roundDur(sec float64) string {
	return time.Duration(sec * float64(time.Second)).Round(time.Millisecond).String()
}
