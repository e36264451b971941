package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/google/uuid"

	"github.com/sessiond/sessiond/client/convert"
	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// maxConversationBytes bounds a conversation file import reads into
// memory: the daemon's default session limit is far below it.
const maxConversationBytes = 1 << 30

// conversationFormat checks --format for import and export: "" and jsonl
// are the lossless JSON lines (ok false), the others a conversation format.
func conversationFormat(cmd, s string, extra ...string) (convert.Format, bool, error) {
	if s == "" || s == "json" {
		return convert.JSONL, false, nil
	}
	for _, x := range extra {
		if s == x {
			return "", false, nil
		}
	}
	f, err := convert.ParseFormat(s)
	if err != nil {
		names := []string{}
		for _, f := range convert.Formats() {
			names = append(names, string(f))
		}
		return "", false, usageErrorf("%s: --format %q: use %s", cmd, s, strings.Join(append(names, extra...), ", "))
	}
	return f, f != convert.JSONL, nil
}

// warn prints what a conversion could not carry, one line each on stderr
// (a JSON object each with --json).
func (e *env) warn(op string, f convert.Format, ws []convert.Warning) {
	for _, w := range ws {
		e.notice(map[string]any{"warning": op, "format": f, "field": w.Field, "count": w.Count, "first": w.First, "reason": w.Reason},
			"sessionctl: %s: warning: %s", op, safeLine(w.String()))
	}
}

// exportConversation writes one session in a conversation format. It asks
// the daemon to close open tool calls (close_open_tool_calls): a model API
// refuses a history with a call left unanswered, and these formats are
// what is sent to one.
func (e *env) exportConversation(ctx context.Context, sa sessionArg, output string, f convert.Format, view sessiondv1.LoadView, o convert.ExportOptions) error {
	sess, msgs, err := e.loadSession(ctx, "export", &sessiondv1.LoadSessionRequest{Ref: sa.ref, CloseOpenToolCalls: true, View: view})
	if err != nil {
		return err
	}
	// The synthetic results' marker is the daemon's, not the session's (a
	// stored message never carries it): warning that a format dropped it
	// would name a field the user never stored.
	for _, m := range msgs {
		delete(m.Metadata, storage.SyntheticKey)
	}
	sess.Messages = msgs
	doc, warns, err := convert.Export(f, sess, o)
	if err != nil {
		return fmt.Errorf("export %s: %w", sa.text, err)
	}
	e.warn("export", f, warns)
	out, commit, err := openOutput(e, output)
	if err != nil {
		return err
	}
	defer commit(false)
	if _, err := out.Write(doc); err != nil {
		return fmt.Errorf("export: write: %w", err)
	}
	return commit(true)
}

// importConversation reads one conversation in format f from name (- for
// stdin) and creates it as a new session of the namespace.
func (e *env) importConversation(ctx context.Context, name string, f convert.Format, alias string) error {
	if err := optionalAlias("import: --alias", alias); err != nil {
		return err
	}
	if _, err := uuid.Parse(alias); err == nil {
		return usageErrorf("import: --alias %q is shaped like a session id; aliases never are", alias)
	}
	var in io.Reader = e.stdin
	if name != "-" {
		file, err := os.Open(name)
		if err != nil {
			return fmt.Errorf("import: %w; give a %s file, or - for stdin", err, f)
		}
		defer file.Close()
		in = file
	} else {
		name = "stdin"
	}
	data, err := io.ReadAll(io.LimitReader(in, maxConversationBytes+1))
	if err != nil {
		return fmt.Errorf("import %s: read: %w", name, err)
	}
	if len(data) > maxConversationBytes {
		return fmt.Errorf("import %s: more than %d bytes; one conversation per file", name, maxConversationBytes)
	}
	s, warns, err := convert.Import(f, data)
	if err != nil {
		return fmt.Errorf("import %s: %w", name, err)
	}
	e.warn("import", f, warns)
	c, err := e.dial(ctx)
	if err != nil {
		return err
	}
	id := uuid.Must(uuid.NewV7()).String()
	sess, err := createInBatches(ctx, e, c, &sessiondv1.CreateSessionRequest{
		Namespace: e.namespace,
		Id:        id,
		Alias:     alias,
		Metadata:  s.GetMetadata(),
	}, s.GetMessages(), 0, "session "+id)
	if err != nil {
		return fmt.Errorf("import %s: %w", name, err)
	}
	named := ""
	if alias != "" {
		named = fmt.Sprintf(" (alias %s)", alias)
	}
	return e.printResult(sess, "imported %s as session %s%s, %d messages\n", name, sess.GetId(), named, sess.GetMessageCount())
}
