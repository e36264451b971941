//go:build !linux

package file

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// fallocate reports that space cannot be reserved ahead here, so journals
// grow by their writes alone (the journal's no-preallocation path).
func fallocate(*os.File, int64, int64) error { return unix.EOPNOTSUPP }

// fdatasync makes f durable. os.File.Sync is the call that reaches stable
// storage on every system Go supports (on darwin it issues F_FULLFSYNC,
// which plain fsync does not).
func fdatasync(f *os.File) error { return f.Sync() }

// readDirNames calls each with the name and type (unix.DT_*) of every
// entry of dir, in the order the file system lists them, without sorting.
// An error each returns ends the walk.
func readDirNames(dir string, each func(name string, typ byte) error) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("file: list %s: %w", dir, ioErr(err))
	}
	defer f.Close()
	for {
		ents, err := f.ReadDir(4096)
		for _, e := range ents {
			if err := each(e.Name(), direntType(e.Type())); err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("file: list %s: %w", dir, ioErr(err))
		}
	}
}

// direntType is the unix.DT_* of a directory entry's type bits.
func direntType(m fs.FileMode) byte {
	switch {
	case m.IsDir():
		return unix.DT_DIR
	case m.IsRegular():
		return unix.DT_REG
	case m&fs.ModeSymlink != 0:
		return unix.DT_LNK
	}
	return unix.DT_UNKNOWN
}
