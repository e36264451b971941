package file

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// TestTallyOfOldMetadata: a session whose metadata was written before
// tallies were kept (no usage in its snapshot header) answers an unknown
// tally until its first load, which recounts its messages, so that a
// result for a call made back then is accepted.
func TestTallyOfOldMetadata(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	se := mustCreate(t, s, storage.CreateRequest{Messages: []*sessiondv1.Message{
		{Id: "a1", Role: sessiondv1.Role_ROLE_ASSISTANT, Model: "m-1", Usage: &sessiondv1.Usage{InputTokens: 7},
			ToolCalls: []*sessiondv1.ToolCall{{Id: "c1"}, {Id: "c2"}}},
		{Id: "r1", Role: sessiondv1.Role_ROLE_TOOL, ToolCallId: "c1"},
	}})
	mustAppend(t, s, se.ID, &sessiondv1.Message{Id: "a2", Role: sessiondv1.Role_ROLE_ASSISTANT, Model: "m-2", ToolCalls: []*sessiondv1.ToolCall{{Id: "c3"}}})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Rewrite the snapshot as an earlier version wrote it, and drop the
	// index so that Open scans the session.
	path := filepath.Join(dir, "sessions", se.ID, snapshotName)
	data, err := os.ReadFile(path)
	must(t, err)
	gen, meta, _, msgs, cs, err := decodeSnapshot(data)
	must(t, err)
	meta.Tally = storage.Tally{Unknown: true}
	must(t, os.WriteFile(path, encodeSnapshot(gen, meta, msgs, cs), 0o600))
	must(t, os.RemoveAll(filepath.Join(dir, "index")))

	s = open(t, dir)
	got, err := s.Get(t.Context(), storage.Ref{ID: se.ID})
	must(t, err)
	if !got.Unknown || got.Usage != (storage.Usage{}) {
		t.Fatalf("old metadata: tally %+v, want unknown", got.Tally)
	}
	// The journal's append was replayed on top; a write recounts the rest.
	mustAppend(t, s, se.ID, &sessiondv1.Message{Id: "r2", Role: sessiondv1.Role_ROLE_TOOL, ToolCallId: "c2"})
	got, err = s.Get(t.Context(), storage.Ref{ID: se.ID})
	must(t, err)
	if got.Unknown || !slices.Equal(got.OpenToolCallIDs, []string{"c3"}) || got.Usage.InputTokens != 7 || !slices.Equal(got.Models, []string{"m-2", "m-1"}) {
		t.Fatalf("after a write: tally %+v", got.Tally)
	}
	// And it is kept: a reopen reads it back from the journal and snapshot.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	must(t, os.RemoveAll(filepath.Join(dir, "index")))
	s = open(t, dir)
	again, err := s.Get(t.Context(), storage.Ref{ID: se.ID})
	must(t, err)
	if !storage.SameTally(again.Tally, got.Tally) && !again.Unknown {
		t.Fatalf("after reopen: tally %+v, want %+v", again.Tally, got.Tally)
	}
	_, _, err = s.Load(t.Context(), storage.Ref{ID: se.ID}, storage.LoadOptions{})
	must(t, err)
	again, err = s.Get(t.Context(), storage.Ref{ID: se.ID})
	must(t, err)
	if !storage.SameTally(again.Tally, got.Tally) {
		t.Fatalf("after reopen and load: tally %+v, want %+v", again.Tally, got.Tally)
	}
}
