package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// futureFields is what a newer client might add to a message: fields this
// version of the proto does not know, kept as unknown fields.
func futureFields() []byte {
	b := protowire.AppendTag(nil, 999, protowire.BytesType)
	b = protowire.AppendString(b, "a field from the future")
	b = protowire.AppendTag(b, 1000, protowire.VarintType)
	return protowire.AppendVarint(b, 42)
}

// richMessages covers every field of Message, an unknown one included.
func richMessages() []*sessiondv1.Message {
	at := func(s int) *timestamppb.Timestamp {
		return timestamppb.New(time.Date(2025, 3, 1, 12, 0, s, 123456789, time.UTC))
	}
	future := &sessiondv1.Message{Id: "u1", Role: user, Content: "hi from a newer client", CreatedAt: at(1)}
	future.ProtoReflect().SetUnknown(futureFields())
	return []*sessiondv1.Message{
		{Id: "s", Role: system, Content: "be helpful", CreatedAt: at(0)},
		future,
		{Id: "a1", Role: assistant, Name: "bot", CreatedAt: at(2),
			Reasoning: &sessiondv1.Reasoning{Text: "thinking", Signature: "sig=="},
			ToolCalls: []*sessiondv1.ToolCall{{Id: "c1", Name: "search", Arguments: `{"q": "x",  "bad json"`}},
			Metadata:  map[string]string{"model": "m-1", "tokens": "12"},
			Parts: []*sessiondv1.ContentPart{
				{Kind: &sessiondv1.ContentPart_Text{Text: "part text"}},
				{Kind: &sessiondv1.ContentPart_Json{Json: `{"k":[1,2]}`}},
				{Kind: &sessiondv1.ContentPart_Blob{Blob: &sessiondv1.Blob{MimeType: "image/png", Data: []byte{0, 1, 2, 255, '\n'}}}},
			}},
		{Id: "t1", Role: toolRole, ToolCallId: "c1", Content: "result\nwith lines", CreatedAt: at(3)},
	}
}

// ignoreServerFields drops what an import cannot keep: the daemon sets
// updated_at anew. (The revision is kept.)
var ignoreServerFields = protocmp.IgnoreFields(&sessiondv1.Session{}, "updated_at")

func TestExportRmImportRoundTrip(t *testing.T) {
	d := startDaemon(t, t.TempDir(), "")
	ctx := t.Context()
	a := d.create(&sessiondv1.CreateSessionRequest{Alias: "alpha", Title: "Alpha", Summary: "a summary",
		Metadata: map[string]string{"repl": "v1"}, Labels: map[string]string{"team": "x"}, Messages: richMessages(),
		CreatedAt: timestamppb.New(time.Date(2024, 1, 2, 3, 4, 5, 6, time.UTC))})
	fork, err := d.client.ForkSession(ctx, &sessiondv1.ForkSessionRequest{Ref: &sessiondv1.SessionRef{Key: &sessiondv1.SessionRef_Alias{Alias: "alpha"}}, MessageCount: 2, Alias: "alpha-fork"})
	if err != nil {
		t.Fatal(err)
	}
	b := fork.GetSession()
	if _, err := d.client.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: &sessiondv1.SessionRef{Key: &sessiondv1.SessionRef_Id{Id: b.GetId()}},
		Messages: []*sessiondv1.Message{text(assistant, "b2", "only in the fork")}}); err != nil {
		t.Fatal(err)
	}
	// A session bigger than one import batch: it must come back through
	// CreateSession plus AppendMessages. The batch is made small so the
	// test needs no megabytes (JSON under the race detector is slow).
	defer func(n int) { importBatchBytes = n }(importBatchBytes)
	importBatchBytes = 150 << 10
	big := strings.Repeat("0123456789abcdef", 1<<12) // 64 KiB
	var bigMsgs []*sessiondv1.Message
	for i := range 6 {
		bigMsgs = append(bigMsgs, text(user, uuid.NewString(), big+string(rune('a'+i))))
	}
	// Created with half its messages, then three appends: revision 4, which
	// the import keeps although the messages travel in other batches.
	c := d.create(&sessiondv1.CreateSessionRequest{Title: "big, no alias", Messages: bigMsgs[:3]})
	for _, m := range bigMsgs[3:] {
		if _, err := d.client.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: &sessiondv1.SessionRef{Key: &sessiondv1.SessionRef_Id{Id: c.GetId()}},
			Messages: []*sessiondv1.Message{m}}); err != nil {
			t.Fatal(err)
		}
	}
	ids := []string{a.GetId(), b.GetId(), c.GetId()}

	originals := map[string]*sessiondv1.Session{}
	for _, id := range ids {
		s, err := d.load("", id)
		if err != nil {
			t.Fatal(err)
		}
		originals[id] = s
	}
	// The daemon kept the unknown fields; the round trip must too.
	if got := originals[a.GetId()].GetMessages()[1].ProtoReflect().GetUnknown(); !bytes.Equal(got, futureFields()) {
		t.Fatalf("the daemon did not keep the unknown fields before export: %x", got)
	}

	file := filepath.Join(t.TempDir(), "all.jsonl")
	must(t, d.ctl("export", "--all", "--output", file))
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	checkExportFile(t, data, 3, 6+3+4)

	for _, id := range ids {
		must(t, d.ctl("rm", "--yes", id))
	}
	r := must(t, d.ctl("import", file))
	if !strings.Contains(r.stdout, "imported 3 sessions") {
		t.Errorf("import output: %q", r.stdout)
	}
	for _, id := range ids {
		got, err := d.load("", id)
		if err != nil {
			t.Fatalf("session %s after import: %v", id, err)
		}
		if diff := cmp.Diff(originals[id], got, protocmp.Transform(), ignoreServerFields); diff != "" {
			t.Errorf("session %s after export, rm, import (-before +after):\n%s", id, diff)
		}
	}
	got, _ := d.load("", a.GetId())
	if u := got.GetMessages()[1].ProtoReflect().GetUnknown(); !bytes.Equal(u, futureFields()) {
		t.Errorf("unknown message fields after import: %x, want %x", u, futureFields())
	}
	if got.GetAlias() != "alpha" || !got.GetCreatedAt().AsTime().Equal(time.Date(2024, 1, 2, 3, 4, 5, 6, time.UTC)) {
		t.Errorf("alias or created_at lost: %q %v", got.GetAlias(), got.GetCreatedAt().AsTime())
	}
	if gb, _ := d.load("", b.GetId()); gb.GetParent().GetSessionId() != a.GetId() || gb.GetParent().GetMessageCount() != 2 {
		t.Errorf("fork parent lost: %v", gb.GetParent())
	}

	// Existing sessions are not overwritten without --force.
	r = d.ctl("import", file)
	if r.code != exitError || !strings.Contains(r.stderr, "--force") {
		t.Errorf("import over existing sessions: want exit 1 naming --force, got %v", r)
	}
	checkOneLineError(t, r)

	// --force replaces a changed session with the exported one.
	must(t, d.ctl("rewind", "alpha", "1", "--yes"))
	must(t, d.ctl("rename", "alpha-fork", "moved"))
	must(t, d.ctl("import", "--force", file))
	for _, id := range ids {
		got, err := d.load("", id)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(originals[id], got, protocmp.Transform(), ignoreServerFields); diff != "" {
			t.Errorf("session %s after import --force (-exported +now):\n%s", id, diff)
		}
	}
}

func TestImportFromStdinAndDamagedFiles(t *testing.T) {
	d := startDaemon(t, t.TempDir(), "")
	s := d.create(&sessiondv1.CreateSessionRequest{Alias: "solo", Messages: richMessages()})
	orig, err := d.load("", s.GetId())
	if err != nil {
		t.Fatal(err)
	}
	r := must(t, d.ctl("export", "solo"))
	export := r.stdout
	markdown := must(t, d.ctl("export", "--format", "markdown", "solo")).stdout
	checkExportFile(t, []byte(export), 1, 4)
	must(t, d.ctl("rm", "--yes", "solo"))

	lines := strings.SplitAfter(strings.TrimRight(export, "\n"), "\n")
	tests := []struct {
		name    string
		input   string
		created bool // the session was whole before the damage
	}{
		{"cut before the end line", strings.Join(lines[:len(lines)-2], ""), false},
		{"a message missing", strings.Join(append(append([]string{}, lines[:3]...), lines[4:]...), ""), false},
		{"garbage line", strings.Join(lines[:2], "") + "{not json\n" + strings.Join(lines[2:], ""), false},
		{"no header", strings.Join(lines[1:], ""), false},
		{"markdown", markdown, false},
		{"empty", "", false},
		// A session whose end line arrived is whole: it is imported, and
		// the missing trailer is still an error.
		{"cut before the trailer", strings.Join(lines[:len(lines)-1], ""), true},
	}
	for _, tt := range tests {
		r := ctlIn(t, strings.NewReader(tt.input), "--addr", d.addr, "import", "-")
		if r.code != exitError {
			t.Errorf("%s: want exit 1, got %v", tt.name, r)
		}
		checkOneLineError(t, r)
		got, err := d.load("", s.GetId())
		switch {
		case tt.created && err != nil:
			t.Errorf("%s: the whole session was not imported: %v", tt.name, err)
		case tt.created:
			if diff := cmp.Diff(orig, got, protocmp.Transform(), ignoreServerFields); diff != "" {
				t.Errorf("%s: (-exported +imported):\n%s", tt.name, diff)
			}
			must(t, d.ctl("rm", "--yes", "solo"))
		case err == nil:
			t.Errorf("%s: a damaged import left a session behind", tt.name)
		}
	}

	r = must(t, ctlIn(t, strings.NewReader(export), "--addr", d.addr, "import", "-"))
	got, err := d.load("", s.GetId())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(orig, got, protocmp.Transform(), ignoreServerFields); diff != "" {
		t.Errorf("import from stdin (-exported +imported):\n%s", diff)
	}

	// A hand-written file without proto bytes is read from its JSON.
	var hand []string
	for _, line := range strings.SplitAfter(strings.TrimRight(export, "\n"), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		delete(m, "proto")
		b, _ := json.Marshal(m)
		hand = append(hand, string(b)+"\n")
	}
	must(t, d.ctl("rm", "--yes", "solo"))
	must(t, ctlIn(t, strings.NewReader(strings.Join(hand, "")), "--addr", d.addr, "import", "-"))
	got, _ = d.load("", s.GetId())
	want := proto.CloneOf(orig)
	want.GetMessages()[1].ProtoReflect().SetUnknown(nil) // JSON cannot carry them
	if diff := cmp.Diff(want, got, protocmp.Transform(), ignoreServerFields); diff != "" {
		t.Errorf("import of JSON without proto bytes (-want +got):\n%s", diff)
	}

}

func TestImportNamespaces(t *testing.T) {
	d := startDaemon(t, t.TempDir(), "")
	s := d.create(&sessiondv1.CreateSessionRequest{Namespace: "team", Alias: "shared", Messages: richMessages()})
	orig, err := d.load("team", s.GetId())
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "team.jsonl")
	must(t, d.ctl("--namespace", "team", "export", "--all", "-o", file))
	must(t, d.ctl("--namespace", "team", "rm", "--yes", "shared"))

	// Without --namespace, sessions go back where the file says they were.
	must(t, d.ctl("import", file))
	got, err := d.load("team", s.GetId())
	if err != nil {
		t.Fatalf("import did not restore the session into namespace team: %v", err)
	}
	if diff := cmp.Diff(orig, got, protocmp.Transform(), ignoreServerFields); diff != "" {
		t.Errorf("after import (-exported +imported):\n%s", diff)
	}

	// --namespace names another namespace: the sessions are copied there
	// under new ids, while the originals stay; the copies remember their
	// source, and a fork's parent is its parent's copy.
	fork := must(t, d.ctl("--json", "--namespace", "team", "fork", "shared", "--messages", "2", "--alias", "shared-fork"))
	forkSrc := &sessiondv1.Session{}
	if err := protojson.Unmarshal([]byte(fork.stdout), forkSrc); err != nil {
		t.Fatal(err)
	}
	must(t, d.ctl("--namespace", "team", "export", "--all", "-o", file))
	r := must(t, d.ctl("--json", "--namespace", "copy", "import", file))
	copies := map[string]*sessiondv1.Session{}
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		c := &sessiondv1.Session{}
		if err := protojson.Unmarshal([]byte(line), c); err != nil {
			t.Fatalf("import --json line %q: %v", line, err)
		}
		copies[c.GetMetadata()["sessiond.source_id"]] = c
	}
	if len(copies) != 2 || copies[s.GetId()] == nil || copies[forkSrc.GetId()] == nil {
		t.Fatalf("import --namespace copy printed %v", r)
	}
	c := copies[s.GetId()]
	got, err = d.load("copy", c.GetId())
	if err != nil {
		t.Fatalf("import --namespace copy: %v", err)
	}
	if got.GetId() == s.GetId() || got.GetNamespace() != "copy" || got.GetAlias() != "shared" || len(got.GetMessages()) != 4 ||
		got.GetMetadata()["sessiond.source_id"] != s.GetId() || got.GetMetadata()["sessiond.source_namespace"] != "team" {
		t.Errorf("import --namespace copy: %v", got)
	}
	if diff := cmp.Diff(orig.GetMessages(), got.GetMessages(), protocmp.Transform()); diff != "" {
		t.Errorf("copied messages (-source +copy):\n%s", diff)
	}
	fc, err := d.load("copy", copies[forkSrc.GetId()].GetId())
	if err != nil || fc.GetParent().GetSessionId() != c.GetId() || fc.GetParent().GetMessageCount() != 2 {
		t.Errorf("the fork's copy does not point to its parent's copy %s: %v %v", c.GetId(), fc.GetParent(), err)
	}
	must(t, d.ctl("--namespace", "team", "show", "shared"))
	// Running the same import again finds the copies instead of duplicating.
	if r := d.ctl("--namespace", "copy", "import", file); r.code != exitError || !strings.Contains(r.stderr, "already exists") || !strings.Contains(r.stderr, "--force") {
		t.Errorf("second import into copy: want exit 1 naming --force, got %v", r)
	}
	must(t, d.ctl("--namespace", "copy", "import", "--force", file))
	if r := must(t, d.ctl("--namespace", "copy", "ls", "--json")); strings.Count(r.stdout, "\n") != 2 {
		t.Errorf("namespace copy after a forced second import:\n%s", r.stdout)
	}
}

func TestExportMarkdown(t *testing.T) {
	d := startDaemon(t, t.TempDir(), "")
	d.create(&sessiondv1.CreateSessionRequest{Alias: "md", Title: "Markdown title", Messages: richMessages()})
	d.create(&sessiondv1.CreateSessionRequest{Title: "Second"})
	r := must(t, d.ctl("export", "md", "--format", "markdown"))
	for _, want := range []string{"# Markdown title", "- **alias:** `md`", "## 1. user", "hi from a newer client",
		"**tool call** `search` (`c1`)", `{"q": "x",  "bad json"`, "(image/png, 5 bytes)", "## 3. tool — result of `c1`", "result\nwith lines"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("markdown lacks %q:\n%s", want, r.stdout)
		}
	}
	r = must(t, d.ctl("export", "--all", "--format", "markdown"))
	if !strings.Contains(r.stdout, "# Markdown title") || !strings.Contains(r.stdout, "# Second") || !strings.Contains(r.stdout, "\n---\n") {
		t.Errorf("markdown of --all:\n%s", r.stdout)
	}
}

// checkExportFile checks the documented layout: a header, per session a
// session line, its messages and an end line, then a trailer; every line
// one JSON object.
func checkExportFile(t *testing.T, data []byte, sessions, messages int) {
	t.Helper()
	counts := map[string]int{}
	var types []string
	for _, line := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
		var l struct {
			Type    string          `json:"type"`
			Message json.RawMessage `json:"message"`
			Proto   []byte          `json:"proto"`
		}
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("export line is not JSON: %v: %.200q", err, line)
		}
		counts[l.Type]++
		types = append(types, l.Type)
		if l.Type == "message" {
			if len(l.Proto) == 0 || len(l.Message) == 0 {
				t.Errorf("message line without both halves: %.200q", line)
			}
		}
	}
	if types[0] != "sessiond-export" || types[len(types)-1] != "trailer" {
		t.Errorf("export starts with %q and ends with %q", types[0], types[len(types)-1])
	}
	if counts["session"] != sessions || counts["end"] != sessions || counts["message"] != messages {
		t.Errorf("export holds %v, want %d sessions and %d messages", counts, sessions, messages)
	}
}

// TestExportAllSkipsDamaged: a damaged session does not stop a backup: the
// others are exported, the damaged one is named on stderr, and the exit
// code says something is missing.
func TestExportAllSkipsDamaged(t *testing.T) {
	dir := t.TempDir()
	d := startDaemon(t, dir, "")
	good1 := d.create(&sessiondv1.CreateSessionRequest{Alias: "good-1", Messages: richMessages()})
	bad := d.create(&sessiondv1.CreateSessionRequest{Alias: "bad", Messages: richMessages()})
	good2 := d.create(&sessiondv1.CreateSessionRequest{Alias: "good-2", Messages: richMessages()})
	d.stop()
	corruptMiddle(t, dir, bad.GetId())
	d = startDaemon(t, dir, "")

	for _, jsonMode := range []bool{false, true} {
		file := filepath.Join(t.TempDir(), "backup.jsonl")
		args := []string{"export", "--all", "-o", file}
		if jsonMode {
			args = append([]string{"--json"}, args...)
		}
		r := d.ctl(args...)
		if r.code != exitError || !strings.Contains(r.stderr, bad.GetId()) {
			t.Fatalf("export --all (json %v) with a damaged session: want exit 1 naming %s, got %v", jsonMode, bad.GetId(), r)
		}
		lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
		if !jsonMode {
			if len(lines) != 3 || !strings.Contains(lines[1], "exported 2 sessions") {
				t.Errorf("want the damaged session, the count and the final error on stderr, got %q", r.stderr)
			}
		} else {
			if len(lines) != 2 || !strings.Contains(r.stdout, `"exported":2`) {
				t.Errorf("want the damaged session and the final error on stderr, the count on stdout, got %v", r)
			}
			for _, l := range lines {
				if !json.Valid([]byte(l)) {
					t.Errorf("export --json: stderr line %q is not JSON", l)
				}
			}
			if e := jsonError(t, result{code: r.code, stderr: lines[1] + "\n"}); e.Code != "DATA_LOSS" {
				t.Errorf("export --json final error: %+v", e)
			}
		}
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatalf("the backup of the healthy sessions was not written: %v", err)
		}
		checkExportFile(t, data, 2, 2*len(richMessages()))
		for _, id := range []string{good1.GetId(), good2.GetId()} {
			if !strings.Contains(string(data), id) {
				t.Errorf("backup lacks healthy session %s", id)
			}
		}
	}

	// ls marks the session the daemon could not read, and only that one.
	r := must(t, d.ctl("ls"))
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n")[1:] {
		damaged := strings.HasSuffix(l, " damaged")
		if damaged != strings.HasPrefix(l, bad.GetId()) || !damaged && !strings.HasSuffix(l, " ok") {
			t.Errorf("ls row %q: the damaged session is %s", l, bad.GetId())
		}
	}
	if !strings.Contains(r.stderr, "1 sessions could not be read") || !strings.Contains(r.stderr, "fsck") {
		t.Errorf("ls does not say what to do about the damaged session: %q", r.stderr)
	}
}
