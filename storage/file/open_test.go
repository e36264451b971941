package file

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"
	"golang.org/x/sys/unix"
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
