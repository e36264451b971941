package main

import (
	"encoding/json"
	"maps"
	"strings"
	"testing"

	"github.com/google/uuid"
	"google.golang.org/protobuf/encoding/protojson"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

func TestCreateAppendUpdate(t *testing.T) {
	d := startDaemon(t, t.TempDir(), "")
	ctl := func(stdin string, args ...string) result {
		return ctlIn(t, strings.NewReader(stdin), append([]string{"--addr", d.addr, "--namespace", "team"}, args...)...)
	}

	// create prints the id alone; --json the session.
	r := must(t, ctl("", "create", "--alias", "proj-a", "--title", "Project A", "--label", "team=x", "--label", "stage=draft"))
	id := strings.TrimSpace(r.stdout)
	if _, err := uuid.Parse(id); err != nil {
		t.Fatalf("create printed %q; want the id alone", r.stdout)
	}
	s, err := d.load("team", id)
	if err != nil || s.GetAlias() != "proj-a" || s.GetTitle() != "Project A" || !maps.Equal(s.GetLabels(), map[string]string{"team": "x", "stage": "draft"}) {
		t.Fatalf("created session %v, %v", s, err)
	}
	if r := ctl("", "create", "--alias", "proj-a"); r.code != exitError || !strings.Contains(r.stderr, "create") {
		t.Errorf("create with a taken alias: %v; want exit 1", r)
	}
	// The same create with --id, run twice, makes one session.
	fixed := uuid.NewString()
	first := must(t, ctl("", "--json", "create", "--id", fixed, "--title", "Fixed"))
	again := must(t, ctl("", "--json", "create", "--id", fixed, "--title", "Fixed"))
	var js sessiondv1.Session
	if err := protojson.Unmarshal([]byte(first.stdout), &js); err != nil || js.GetId() != fixed || js.GetTitle() != "Fixed" || first.stdout != again.stdout {
		t.Errorf("create --id twice: %q then %q (%v)", first.stdout, again.stdout, err)
	}

	// append: the argument, stdin with "-", and stdin with no TEXT.
	m1 := strings.TrimSpace(must(t, ctl("", "append", "proj-a", "What changed?")).stdout)
	m2 := strings.TrimSpace(must(t, ctl("diff --git a b\n", "append", "proj-a", "-", "--role", "tool")).stdout)
	r = must(t, ctl("Three things.", "--json", "append", "proj-a", "--role", "assistant", "--model", "gpt-4.1", "--metadata", "k=v"))
	var ap struct {
		MessageID    string `json:"message_id"`
		Revision     uint64 `json:"revision"`
		MessageCount int64  `json:"message_count"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &ap); err != nil || ap.MessageCount != 3 || ap.Revision == 0 {
		t.Fatalf("append --json: %q (%v)", r.stdout, err)
	}
	s, err = d.load("team", id)
	if err != nil || len(s.GetMessages()) != 3 {
		t.Fatalf("after 3 appends: %v, %v", s, err)
	}
	want := []struct {
		id, content, model string
		role               sessiondv1.Role
	}{{m1, "What changed?", "", user}, {m2, "diff --git a b\n", "", toolRole}, {ap.MessageID, "Three things.", "gpt-4.1", assistant}}
	for i, w := range want {
		m := s.GetMessages()[i]
		if m.GetId() != w.id || m.GetContent() != w.content || m.GetRole() != w.role || m.GetModel() != w.model {
			t.Errorf("message %d: %v; want %+v", i, m, w)
		}
	}
	if s.GetMessages()[2].GetMetadata()["k"] != "v" {
		t.Errorf("--metadata not stored: %v", s.GetMessages()[2])
	}
	if _, err := uuid.Parse(m1); err != nil {
		t.Errorf("append printed %q; want the message id", m1)
	}

	// An append retried with its --id is a no-op; other content under it is refused.
	mid := uuid.NewString()
	must(t, ctl("", "append", "proj-a", "--id", mid, "once"))
	must(t, ctl("", "append", "proj-a", "--id", mid, "once"))
	if s, _ := d.load("team", id); len(s.GetMessages()) != 4 {
		t.Errorf("a retried append added a message: %d messages", len(s.GetMessages()))
	}
	if r := ctl("", "append", "proj-a", "--id", mid, "other"); r.code != exitError || !strings.Contains(r.stderr, "--id") {
		t.Errorf("other content under a used id: %v; want exit 1 naming --id", r)
	}

	// update: title, labels merged with the session's own.
	r = must(t, ctl("", "update", "proj-a", "--title", "Phase 2", "--label", "stage=review", "--unlabel", "team", "--label", "new=1"))
	if !strings.Contains(r.stdout, id+" updated") {
		t.Errorf("update printed %q", r.stdout)
	}
	s, _ = d.load("team", id)
	if s.GetTitle() != "Phase 2" || !maps.Equal(s.GetLabels(), map[string]string{"stage": "review", "new": "1"}) {
		t.Errorf("after update: title %q labels %v", s.GetTitle(), s.GetLabels())
	}
	r = must(t, ctl("", "--json", "update", "proj-a", "--title", ""))
	if err := protojson.Unmarshal([]byte(r.stdout), &js); err != nil || js.GetTitle() != "" || js.GetLabels()["stage"] != "review" {
		t.Errorf("update --title '' --json: %q (%v)", r.stdout, err)
	}

	// Not found is exit 3, usage is exit 2.
	if r := ctl("", "append", "nope", "x"); r.code != exitNotFound {
		t.Errorf("append to a missing session: %v; want exit 3", r)
	}
	if r := ctl("", "update", "nope", "--title", "x"); r.code != exitNotFound {
		t.Errorf("update of a missing session: %v; want exit 3", r)
	}
	for _, args := range [][]string{
		{"create", "extra"},
		{"create", "--alias", "a b"},
		{"create", "--id", "not-a-uuid"},
		{"create", "--label", "novalue"},
		{"append", "proj-a"}, // empty stdin
		{"append", "proj-a", ""},
		{"append", "proj-a", "x", "y"},
		{"append", "proj-a", "x", "--role", "robot"},
		{"append", "proj-a", "x", "--metadata", "novalue"},
		{"update", "proj-a"},
		{"update", "proj-a", "--label", "a=1", "--unlabel", "a"},
	} {
		r := ctlIn(t, strings.NewReader(""), append([]string{"--addr", deadAddr}, args...)...)
		if r.code != exitUsage {
			t.Errorf("%v: %v; want exit 2", args, r)
		}
		checkOneLineError(t, r)
	}
}
