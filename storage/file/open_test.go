package file

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"golang.org/x/sys/unix"

	"github.com/sessiond/sessiond/storage"
)

// isSessionID must accept exactly what uuid.Parse accepts and String
// gives back unchanged.
func TestIsSessionID(t *testing.T) {
	canonical := func(s string) bool {
		u, err := uuid.Parse(s)
		return err == nil && u.String() == s
	}
	id := uuid.NewString()
	cases := []string{id, strings.ToUpper(id), "{" + id + "}", "urn:uuid:" + id, strings.ReplaceAll(id, "-", ""),
		id[:35], id + "0", "", ".tmp-" + id, strings.Replace(id, "-", "x", 1), strings.Replace(id, id[:1], "g", 1),
		"00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff", "ffffffff-ffff-ffff-ffff-fffffffffff-",
		"ffffffff_ffff-ffff-ffff-ffffffffffff", "ffffffff-ffff-ffff-ffff-fffffffffffg", "/fffffff-ffff-ffff-ffff-ffffffffffff",
		":fffffff-ffff-ffff-ffff-ffffffffffff", "`fffffff-ffff-ffff-ffff-ffffffffffff"}
	for range 1000 {
		cases = append(cases, uuid.NewString())
	}
	for _, c := range cases {
		if got, want := isSessionID(c), canonical(c); got != want {
			t.Errorf("isSessionID(%q) = %v, uuid says %v", c, got, want)
		}
	}
}

// countingEncoder counts the sessions it encodes.
type countingEncoder struct{ calls atomic.Int64 }

func (c *countingEncoder) EncodeListed(s *storage.Session) ([]byte, error) {
	c.calls.Add(1)
	return fmt.Appendf(nil, "%s@%d:%s", s.ID, s.Revision, s.Title), nil
}

// The store keeps each session's encoding: listing again encodes nothing,
// and a write makes only its session's encoding be made again (the
// conformance suite's ListEncoded group checks that none is ever stale).
func TestListEncodedKeepsEncodings(t *testing.T) {
	s := openStore(t, t.TempDir())
	ctx := t.Context()
	var ids []string
	for i := range 5 {
		se, err := s.Create(ctx, storage.CreateRequest{Title: fmt.Sprint("s", i)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, se.ID)
	}
	enc := &countingEncoder{}
	list := func() []string {
		var out []string
		if err := s.Store.ListEncoded(ctx, storage.ListOptions{}, enc, func(b []byte) error {
			out = append(out, string(b))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	encoded := func(want int64, what string) {
		t.Helper()
		if n := enc.calls.Swap(0); n != want {
			t.Fatalf("%s: encoded %d sessions, want %d", what, n, want)
		}
	}
	list()
	encoded(5, "first listing")
	list()
	encoded(0, "second listing")
	if _, err := s.Update(ctx, storage.UpdateRequest{Ref: storage.Ref{ID: ids[2]}, Fields: storage.UpdateTitle, Title: "new"}); err != nil {
		t.Fatal(err)
	}
	got := list()
	encoded(1, "listing after an update")
	if !strings.HasSuffix(got[0], ":new") {
		t.Fatalf("listed %q first after the update, want the updated session", got[0])
	}
	// Another encoder gets its own encodings, never the first one's.
	other := &countingEncoder{}
	if err := s.Store.ListEncoded(ctx, storage.ListOptions{}, other, func([]byte) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if n := other.calls.Load(); n != 5 {
		t.Fatalf("a second encoder encoded %d sessions, want 5", n)
	}
}

// readDirNames lists what os.ReadDir lists, with the same folder/not
// folder answer, over more entries than one read of the directory returns.
func TestReadDirNames(t *testing.T) {
	dir := t.TempDir()
	want := map[string]bool{}
	for i := range 5000 {
		name := uuid.NewString()
		if i%3 == 0 {
			must(t, os.WriteFile(filepath.Join(dir, name), nil, 0o600))
		} else {
			must(t, os.Mkdir(filepath.Join(dir, name), 0o700))
		}
	}
	must(t, os.Symlink(".", filepath.Join(dir, "link-to-a-folder")))
	des, err := os.ReadDir(dir)
	must(t, err)
	for _, de := range des {
		want[de.Name()] = de.IsDir()
	}
	got := map[string]bool{}
	must(t, readDirNames(dir, func(name string, typ byte) error {
		if _, dup := got[name]; dup {
			t.Errorf("%s listed twice", name)
		}
		got[name] = direntIsDir(dir, name, typ)
		if d := direntIsDir(dir, name, unix.DT_UNKNOWN); d != got[name] {
			t.Errorf("%s: folder %v from its type, %v from lstat", name, got[name], d)
		}
		return nil
	}))
	if len(got) != len(want) {
		t.Fatalf("listed %d entries, os.ReadDir %d", len(got), len(want))
	}
	for name, isDir := range want {
		if g, ok := got[name]; !ok || g != isDir {
			t.Errorf("%s: listed %v (folder %v), os.ReadDir says folder %v", name, ok, g, isDir)
		}
	}
	stop := errors.New("stop")
	if err := readDirNames(dir, func(string, byte) error { return stop }); err != stop {
		t.Fatalf("readDirNames returned %v, not the error each returned", err)
	}
	if err := readDirNames(filepath.Join(dir, "missing"), func(string, byte) error { return nil }); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("readDirNames of a missing folder: %v", err)
	}
}
