package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sessiond/sessiond/client/convert"
	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// importBatchBytes bounds the messages sent in one CreateSession or
// AppendMessages call: well under the daemon's default 64 MiB frame limit,
// so that a big session arrives in several calls. A message bigger than
// this travels alone. A variable so that tests can exercise the batching
// without megabytes of data.
var importBatchBytes = 4 << 20

// Metadata keys an import into another namespace records on each session.
const (
	metaSourceID        = "sessiond.source_id"
	metaSourceNamespace = "sessiond.source_namespace"
)

// importIDSpace is the UUID name space of the ids import gives sessions
// copied into another namespace (see importer.targetID).
var importIDSpace = uuid.MustParse("4f6d9a52-0b3e-4c1e-9d7a-6a2f3b8c1e70")

func importCmd(e *env) *cobra.Command {
	var force bool
	var format, alias string
	cmd := &cobra.Command{
		Use:   "import FILE|-",
		Short: "read sessions from an export, keeping ids and aliases",
		Long: `import reads a file written by 'sessionctl export' (or stdin, with -) and
creates its sessions with their ids, aliases, titles, metadata, labels,
creation times and fork parents. A session is created only once all of its
lines have been read, so a file cut short never leaves half a session.

With --namespace (or SESSIOND_NAMESPACE) naming another namespace than the
one a session was exported from, the session is copied there under a new
id (derived from the namespace and the source id, so that running the
same import again finds the copies instead of duplicating them); the
source id and namespace are kept in its metadata as sessiond.source_id and
sessiond.source_namespace, and fork parents point to the copies.

With --format openai-chat, openai-responses or anthropic, FILE is one
request body of that tool, and becomes one new session of the namespace
(named --alias if given). Request parameters other than the conversation
(max_tokens, tools...) are kept in the session's metadata so that an
export in the same format gives them back; fields it does not understand
are named on stderr.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, pos []string) error {
			f, conversation, err := conversationFormat("import", format)
			if err != nil {
				return err
			}
			switch {
			case !conversation && alias != "":
				return usageErrorf("import: --alias goes with --format openai-chat, openai-responses or anthropic; a jsonl export keeps its sessions' aliases")
			case conversation && force:
				return usageErrorf("import: --force goes with jsonl imports; --format %s always makes a new session", f)
			case conversation:
				return e.importConversation(cmd.Context(), pos[0], f, alias)
			}
			return e.importFile(cmd.Context(), pos[0], force)
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "replace sessions that already exist (delete, then recreate)")
	cmd.Flags().StringVar(&format, "format", "jsonl", "jsonl (a sessionctl export), openai-chat, openai-responses or anthropic")
	cmd.Flags().StringVar(&alias, "alias", "", "the new session's alias (with a conversation --format)")
	return cmd
}

func (e *env) importFile(ctx context.Context, name string, force bool) error {
	var in io.Reader = e.stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return fmt.Errorf("import: %w; give an export file, or - for stdin", err)
		}
		defer f.Close()
		in = f
	} else {
		name = "stdin"
	}
	c, err := e.dial(ctx)
	if err != nil {
		return err
	}
	im := &importer{e: e, c: c, force: force, name: name, prog: newProgress(e, "imported")}
	defer im.prog.finish()
	err = im.read(ctx, in)
	im.prog.final(im.imported, 0, "sessions")
	im.prog.finish()
	if err != nil {
		if im.imported > 0 {
			return fmt.Errorf("import %s: %w (%d sessions were imported before this)", name, err, im.imported)
		}
		return fmt.Errorf("import %s: %w", name, err)
	}
	if !e.json {
		fmt.Fprintf(e.stdout, "imported %d sessions\n", im.imported)
	}
	return nil
}

type importer struct {
	e        *env
	c        sessiondv1.SessionStoreServiceClient
	force    bool
	name     string
	prog     *progress
	imported int64

	// The session being read: its header and messages so far. A session is
	// created only once its end line has arrived, so that a file cut short
	// never leaves a session with half its messages.
	cur     *sessiondv1.Session
	msgs    []*sessiondv1.Message
	summary *sessiondv1.Message // of cur's compaction, if the file holds it
}

// read checks and imports the file session by session.
func (im *importer) read(ctx context.Context, r io.Reader) error {
	lines := convert.NewJSONLReader(r)
	for {
		s, err := lines.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		im.cur, im.msgs, im.summary = s, s.GetMessages(), lines.Summary()
		if err := im.create(ctx); err != nil {
			return err
		}
		im.prog.update(im.imported, 0, "sessions")
		im.cur, im.msgs, im.summary = nil, nil, nil
	}
}

// create makes the session read from the file, with its id, alias,
// created_at and parent (see createInBatches).
func (im *importer) create(ctx context.Context) error {
	s := im.cur
	e := im.e
	ns := s.GetNamespace()
	if e.namespaceSet {
		ns = e.namespace
	}
	if err := storage.ValidateNamespace(ns); err != nil {
		return fmt.Errorf("session %s: %w", s.GetId(), err)
	}
	if _, err := uuid.Parse(s.GetId()); err != nil || s.GetId() == "" {
		return fmt.Errorf("session id %q is not a UUID", s.GetId())
	}
	id, metadata, parent := s.GetId(), s.GetMetadata(), s.GetParent()
	if ns != s.GetNamespace() {
		// A copy into another namespace: ids are unique across namespaces,
		// so it gets its own, and remembers where it came from.
		id = targetID(ns, s.GetId())
		metadata = maps.Clone(metadata)
		if metadata == nil {
			metadata = map[string]string{}
		}
		metadata[metaSourceID] = s.GetId()
		metadata[metaSourceNamespace] = s.GetNamespace()
		if parent != nil {
			parent = &sessiondv1.ForkOrigin{SessionId: targetID(ns, parent.GetSessionId()), MessageCount: parent.GetMessageCount()}
		}
	}
	ref := &sessiondv1.SessionRef{Namespace: ns, Key: &sessiondv1.SessionRef_Id{Id: id}}
	op := "session " + id
	if id != s.GetId() {
		op += " (copy of " + s.GetId() + ")"
	}

	_, err := im.c.GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: ref})
	switch status.Code(err) {
	case codes.OK:
		if !im.force {
			return fmt.Errorf("%s already exists in namespace %q; pass --force to replace it", op, ns)
		}
		if _, err := im.c.DeleteSession(ctx, &sessiondv1.DeleteSessionRequest{Ref: ref}); err != nil && status.Code(err) != codes.NotFound {
			return e.rpcError("replace "+op, err)
		}
	case codes.NotFound:
	default:
		return e.rpcError(op, err)
	}

	rev := s.GetRevision()
	if s.GetCompaction() != nil && im.summary != nil && rev > 1 {
		rev-- // the compaction below makes the last revision
	}
	sess, err := createInBatches(ctx, e, im.c, &sessiondv1.CreateSessionRequest{
		Namespace: ns,
		Id:        id,
		Alias:     s.GetAlias(),
		Title:     givenTitle(s),
		Summary:   s.GetSummary(),
		Metadata:  metadata,
		Labels:    s.GetLabels(),
		CreatedAt: s.GetCreatedAt(),
		Parent:    parent,
	}, im.msgs, rev, op)
	if err != nil {
		return err
	}
	if c := s.GetCompaction(); c != nil && im.summary != nil {
		resp, err := im.c.CompactSession(ctx, &sessiondv1.CompactSessionRequest{Ref: ref, ThroughMessageId: c.GetThroughMessageId(),
			Summary: im.summary, ExpectedRevision: sess.GetRevision()})
		if err != nil {
			// As a failed append does: the import can simply be run again.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
			_, _ = im.c.DeleteSession(cctx, &sessiondv1.DeleteSessionRequest{Ref: ref})
			cancel()
			return e.rpcError("compact "+op, err)
		}
		sess = resp.GetSession()
	}
	im.imported++
	if e.json {
		return writeJSONLine(e.stdout, sess)
	}
	return nil
}

// createInBatches creates the session req describes (its id set) with
// msgs: the first batch travels in CreateSession and the rest in
// AppendMessages calls guarded by expected_revision. If anything fails
// after the create, the partial session is deleted so that the import can
// simply be run again. The session starts at exportedRev less the appends
// still to come, so that it ends at the revision it was exported with
// (above it only when it has more batches than revisions): never behind
// what a client holds. It returns the session as it ends.
func createInBatches(ctx context.Context, e *env, c sessiondv1.SessionStoreServiceClient, req *sessiondv1.CreateSessionRequest,
	msgs []*sessiondv1.Message, exportedRev uint64, op string) (*sessiondv1.Session, error) {
	batches := splitBatches(msgs, importBatchBytes)
	if len(batches) > 0 {
		req.Messages, batches = batches[0], batches[1:]
	}
	req.Revision = 1
	if n := uint64(len(batches)); exportedRev > n {
		req.Revision = exportedRev - n
	}
	resp, err := c.CreateSession(ctx, req)
	if err != nil {
		if status.Code(err) == codes.AlreadyExists {
			return nil, fmt.Errorf("%s (alias %q): %s; the id or alias is taken, maybe in another namespace: remove or rename that session first", op, req.GetAlias(), status.Convert(err).Message())
		}
		return nil, e.rpcError("create "+op, err)
	}
	sess := resp.GetSession()
	ref := &sessiondv1.SessionRef{Namespace: req.GetNamespace(), Key: &sessiondv1.SessionRef_Id{Id: sess.GetId()}}
	for _, b := range batches {
		ar, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: ref, Messages: b, ExpectedRevision: sess.GetRevision()})
		if err != nil {
			// Best effort, on a fresh context: the import is failing anyway,
			// possibly because ctx ended.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
			_, _ = c.DeleteSession(cctx, &sessiondv1.DeleteSessionRequest{Ref: ref})
			cancel()
			return nil, e.rpcError("append to "+op, err)
		}
		sess.Revision, sess.MessageCount = ar.GetRevision(), ar.GetMessageCount()
	}
	sess.MessageCount = int64(len(msgs))
	return sess, nil
}

// targetID is the id of the copy of session srcID in namespace ns: a
// name-based UUID (version 5), the same on every run, so that importing a
// file into a namespace twice finds the first copies (ALREADY_EXISTS, or
// replaced with --force) instead of making second ones.
func targetID(ns, srcID string) string {
	return uuid.NewSHA1(importIDSpace, []byte(ns+"\x00"+srcID)).String()
}

// splitBatches cuts msgs into runs of about max encoded bytes each.
func splitBatches(msgs []*sessiondv1.Message, max int) [][]*sessiondv1.Message {
	var out [][]*sessiondv1.Message
	var cur []*sessiondv1.Message
	size := 0
	for _, m := range msgs {
		n := proto.Size(m) + 8
		if len(cur) > 0 && size+n > max {
			out = append(out, cur)
			cur, size = nil, 0
		}
		cur = append(cur, m)
		size += n
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// givenTitle is the title an export holds that a client gave: a title
// derived from the first user message is left for the import to derive
// again, so that it stays marked as derived.
func givenTitle(s *sessiondv1.Session) string {
	if s.GetTitleDerived() {
		return ""
	}
	return s.GetTitle()
}
