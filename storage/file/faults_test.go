package file

import (
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// observed returns a logger whose lines the test can read.
func observed() (*zap.Logger, *observer.ObservedLogs) {
	core, logs := observer.New(zapcore.DebugLevel)
	return zap.New(core), logs
}

// TestDataDirMadePrivate: a data dir that existed with a loose mode (0755,
// or 1777 as a tmpfs root has) is made 0700 at open, with a warning.
func TestDataDirMadePrivate(t *testing.T) {
	for _, mode := range []os.FileMode{0o755, 0o777 | os.ModeSticky, 0o750} {
		t.Run(mode.String(), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, mode); err != nil {
				t.Fatal(err)
			}
			log, logs := observed()
			openStore(t, dir, WithLogger(log))
			fi, err := os.Stat(dir)
			if err != nil {
				t.Fatal(err)
			}
			if got := fi.Mode() & (os.ModePerm | os.ModeSticky | os.ModeSetgid | os.ModeSetuid); got != dirPerm {
				t.Errorf("data dir mode after open: %v, want %v", got, os.FileMode(dirPerm))
			}
			if logs.FilterMessage("the data dir was open to other users; made it private").Len() != 1 {
				t.Errorf("no warning about the loose mode; logs: %v", logs.All())
			}
		})
	}
	t.Run("private", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "data")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		log, logs := observed()
		openStore(t, dir, WithLogger(log))
		if n := logs.FilterLevelExact(zapcore.WarnLevel).Len(); n != 0 {
			t.Errorf("%d warnings for a private data dir", n)
		}
	})
}
