package file

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
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

// TestOpenAliasClaimedTwice: when damage leaves two sessions claiming one
// alias in the checkpoint, Open keeps it for the lower id, drops it from
// the other, and lists both.
func TestOpenAliasClaimedTwice(t *testing.T) {
	dir := t.TempDir()
	s, err := openPortable(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, alias := range []string{"x", "y", "z"} {
		se, err := s.Create(t.Context(), storage.CreateRequest{Alias: alias})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, se.ID)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Every session claims "x" in the checkpoint's index file.
	files, err := filepath.Glob(filepath.Join(dir, "index", ckptPref+"*", defaultNS))
	if err != nil || len(files) != 1 {
		t.Fatalf("index files %v, %v", files, err)
	}
	data, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	epoch, ns, metas, err := decodeIndex(data)
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range metas {
		c := cloneMeta(m)
		c.Alias = "x"
		metas[i] = c
	}
	if err := os.WriteFile(files[0], encodeIndex(epoch, ns, metas), filePerm); err != nil {
		t.Fatal(err)
	}

	s, err = openPortable(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	lowest := slices.Min(ids)
	got, err := s.Get(t.Context(), storage.Ref{Alias: "x"})
	if err != nil || got.ID != lowest {
		t.Fatalf("alias x is %v, %v; want the lowest id %s", got, err, lowest)
	}
	listed := 0
	if err := s.List(t.Context(), storage.ListOptions{}, func(se *storage.Session) error {
		listed++
		if se.ID != lowest && se.Alias != "" {
			t.Errorf("session %s kept alias %q; only %s may", se.ID, se.Alias, lowest)
		}
		return nil
	}); err != nil || listed != 3 {
		t.Fatalf("listed %d sessions, %v; want 3", listed, err)
	}
}
