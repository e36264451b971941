package file

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// fallocate reserves the bytes [off, off+n) of f, so that writes there do
// not run out of space later.
func fallocate(f *os.File, off, n int64) error {
	return unix.Fallocate(int(f.Fd()), 0, off, n)
}

// fdatasync makes f's data durable, and its metadata as far as reading the
// data back needs it.
func fdatasync(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }

// readDirNames calls each with the name and type (unix.DT_*) of every
// entry of dir, in the order the file system lists them: os.ReadDir
// without the sort by name and without an allocated DirEntry per entry,
// which Open would pay per session. An error each returns ends the walk.
func readDirNames(dir string, each func(name string, typ byte) error) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("file: list %s: %w", dir, ioErr(err))
	}
	defer f.Close()
	buf := make([]byte, 256<<10)
	for {
		n, err := unix.ReadDirent(int(f.Fd()), buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("file: list %s: %w", dir, ioErr(err))
		}
		if n <= 0 {
			return nil
		}
		// struct linux_dirent64: ino (8), off (8), reclen (2), type (1),
		// name (NUL-terminated).
		for b := buf[:n]; len(b) >= 19; {
			reclen := int(binary.NativeEndian.Uint16(b[16:]))
			if reclen < 19 || reclen > len(b) {
				return fmt.Errorf("file: list %s: malformed directory entry", dir)
			}
			typ, name := b[18], b[19:reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			b = b[reclen:]
			if string(name) == "." || string(name) == ".." {
				continue
			}
			if err := each(string(name), typ); err != nil {
				return err
			}
		}
	}
}
