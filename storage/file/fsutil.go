package file

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/sessiond/sessiond/storage"
)

const (
	filePerm = 0o600
	dirPerm  = 0o700
	tmpPref  = ".tmp-"
	delPref  = ".del-"
)

// ioStats counts bytes written, for tests that check what an append costs.
type ioStats struct {
	bytesWritten atomic.Int64
	journalSyncs atomic.Int64 // journal fdatasyncs
	flushes      atomic.Int64 // flushes that made appends durable
	flushAppends atomic.Int64 // appends those flushes covered
	walCreated   atomic.Int64 // write-ahead log segments started in a new file
	walRecycled  atomic.Int64 // write-ahead log segments started in a spare
}

// ErrTooManyOpenFiles is the store's error when an open fails because the
// process (EMFILE) or the system (ENFILE) has no file descriptor left. The
// store keeps at most WithMaxOpenJournals journal files open, plus a few
// for the operations in progress, so this means the limit is set below what
// the store needs, or something else in the process holds the descriptors.
// It wraps storage.ErrUnavailable: the call may succeed later.
var ErrTooManyOpenFiles = fmt.Errorf("file: too many open files (raise the process's descriptor limit, e.g. ulimit -n or systemd LimitNOFILE, or lower WithMaxOpenJournals): %w", storage.ErrUnavailable)

// ErrReadOnly is the store's error when a write fails because the data
// dir's filesystem became read-only (EROFS). It wraps
// storage.ErrUnavailable: reads go on, and writes work again once the
// filesystem is writable.
var ErrReadOnly = fmt.Errorf("file: the data dir's filesystem is read-only: %w", storage.ErrUnavailable)

// ErrIO is the store's error when the data dir's disk fails a read or
// write (EIO), or a write fails for a reason the store cannot name. It
// wraps storage.ErrUnavailable: the session keeps its last acknowledged
// state, and the call may succeed once the disk is repaired.
var ErrIO = fmt.Errorf("file: the data dir's disk failed a read or write (the kernel log says why): %w", storage.ErrUnavailable)

// writeFailed classifies a failed write's error for clients: a full disk
// stays storage.ErrNoSpace and a closed store storage.ErrClosed; every
// other failure is storage.ErrUnavailable (ErrIO unless it already is),
// never an error a server would answer INTERNAL.
func writeFailed(err error) error {
	if errors.Is(err, storage.ErrNoSpace) || errors.Is(err, storage.ErrUnavailable) || errors.Is(err, storage.ErrClosed) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrIO, err)
}

// ioErr turns a full-disk error into storage.ErrNoSpace, running out of
// file descriptors into ErrTooManyOpenFiles, a read-only filesystem into
// ErrReadOnly and a disk's I/O error into ErrIO, keeping others. The system
// error's text stays in the message; it leaves the chain, so that mapping
// twice changes nothing.
func ioErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT):
		return fmt.Errorf("%v: %w", err, storage.ErrNoSpace)
	case errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE):
		return fmt.Errorf("%v: %w", err, ErrTooManyOpenFiles)
	case errors.Is(err, unix.EROFS):
		return fmt.Errorf("%v: %w", err, ErrReadOnly)
	case errors.Is(err, unix.EIO):
		return fmt.Errorf("%v: %w", err, ErrIO)
	}
	return err
}

func randSuffix() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return ioErr(err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return ioErr(fmt.Errorf("fsync dir %s: %w", dir, err))
	}
	return nil
}

// writeFileSync writes data to a new file at path (which must not be in use)
// and fsyncs it.
func writeFileSync(st *ioStats, path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, filePerm)
	if err != nil {
		return ioErr(err)
	}
	n, err := f.Write(data)
	st.bytesWritten.Add(int64(n))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return ioErr(fmt.Errorf("write %s: %w", path, err))
	}
	return nil
}

// writeAtomic replaces path with data: temp file in the same folder, fsync,
// rename, fsync the folder. On error the temp file is removed and path is
// untouched.
func writeAtomic(st *ioStats, path string, data []byte) error {
	tmp := filepath.Join(filepath.Dir(path), tmpPref+filepath.Base(path)+"-"+randSuffix())
	if err := writeFileSync(st, tmp, data); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return ioErr(err)
	}
	return ioErr(syncDir(filepath.Dir(path)))
}

// readHead reads up to n bytes from the start of path.
func readHead(path string, n int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, ioErr(err)
	}
	defer f.Close()
	buf := make([]byte, n)
	m, err := io.ReadFull(f, buf)
	if err == io.ErrUnexpectedEOF || err == io.EOF {
		err = nil
	}
	return buf[:m], err
}

// parallel calls work(w, i) for every i in [0, n), on at most workers
// goroutines; w is its goroutine's own scratch state (a read buffer). A
// goroutine whose work returns false takes no more items; the others go
// on unless their work says so too.
func parallel[W any](n, workers int, work func(w *W, i int) bool) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Go(func() {
			var w W
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				if !work(&w, i) {
					return
				}
			}
		})
	}
	wg.Wait()
}

// readFileInto is os.ReadFile reading into buf's space (grown as needed)
// rather than a new allocation: the open scan reads a journal per session,
// and reusing one buffer per worker spares the garbage collector the bytes
// of every journal. The result aliases buf.
func readFileInto(path string, buf []byte) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return buf[:0], err
	}
	defer f.Close()
	size := 0
	if fi, err := f.Stat(); err == nil && fi.Size() > 0 && int64(int(fi.Size())) == fi.Size() {
		size = int(fi.Size())
	}
	b := bytes.NewBuffer(slices.Grow(buf[:0], size+bytes.MinRead)) // room to see the end in one read
	_, err = b.ReadFrom(f)
	return b.Bytes(), err
}

// lockDir takes the exclusive lock on dir's LOCK file.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_RDWR|os.O_CREATE, filePerm)
	if err != nil {
		return nil, fmt.Errorf("file: open lock of %s: %w", dir, ioErr(err))
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("file: data dir %s is in use by another process or store: %w", dir, storage.ErrLocked)
		}
		return nil, fmt.Errorf("file: lock data dir %s: %w", dir, err)
	}
	return f, nil
}

// Format version file. A data dir of any other format (a newer sessiond's,
// or not a sessiond data dir) is refused: reading it as this format could
// take its files for damage.
const (
	formatFile    = "FORMAT"
	formatVersion = "sessiond-file-format 4\n"
)

// checkFormat reads the format version file, writing it into a new data dir
// (one with no FORMAT yet).
func checkFormat(st *ioStats, dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, formatFile))
	if errors.Is(err, os.ErrNotExist) {
		return writeAtomic(st, filepath.Join(dir, formatFile), []byte(formatVersion))
	}
	if err != nil {
		return fmt.Errorf("file: read format of %s: %w", dir, err)
	}
	if string(b) != formatVersion {
		return fmt.Errorf("file: data dir %s has format %q; this sessiond reads only %q (a newer sessiond's data dir, or not a sessiond data dir)",
			dir, strings.TrimSpace(string(b)), strings.TrimSpace(formatVersion))
	}
	return nil
}

func journalName(gen uint64) string { return fmt.Sprintf("journal-%016x", gen) }

const snapshotName = "snapshot"

// privateDir makes dir (the data dir, which may have existed before the
// store) private to its owner, dirPerm, when it was open to others or
// carried the sticky, setgid or setuid bit (a tmpfs root is 1777), and says
// so in the log: every conversation lives under it. When it cannot (the
// daemon does not own it), it warns and carries on, since the files and
// folders the store makes are private anyway.
func privateDir(dir string, log *zap.Logger) {
	fi, err := os.Stat(dir)
	if err != nil {
		return // Open reports what is wrong with dir
	}
	mode := fi.Mode()
	if mode.Perm()&0o077 == 0 && mode&(os.ModeSticky|os.ModeSetgid|os.ModeSetuid) == 0 {
		return
	}
	if err := os.Chmod(dir, dirPerm); err != nil {
		log.Warn("the data dir is open to other users and could not be made private; its sessions' own folders are private",
			zap.String("dir", dir), zap.String("mode", mode.String()), zap.Error(err))
		return
	}
	log.Warn("the data dir was open to other users; made it private",
		zap.String("dir", dir), zap.String("old_mode", mode.String()), zap.String("mode", os.FileMode(dirPerm).String()))
}
