package file

import (
	"encoding/binary"
	"errors"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sessiond/sessiond/storage"
)

// TestWALSpaceWrittenAhead: the space a log segment reserves past its
// tail is written zeros, not unwritten (fallocated) extents, so that a
// flush's fdatasync has no extent to convert.
func TestWALSpaceWrittenAhead(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	id := mustCreate(t, s, storage.CreateRequest{}).ID
	for i := range 20 {
		mustAppend(t, s, id, msg(string(rune('a'+i)), "some content"))
	}
	segs := walSegments(t, dir)
	if len(segs) != 1 {
		t.Fatalf("%d log segments, want 1", len(segs))
	}
	tail := s.logEnd().off
	f, err := os.Open(segs[0])
	must(t, err)
	defer f.Close()
	fi, err := f.Stat()
	must(t, err)
	if fi.Size() <= tail {
		t.Fatalf("segment is %d bytes, its tail at %d: want space reserved past the tail", fi.Size(), tail)
	}
	extents, err := fileExtents(f)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOTTY) {
		t.Skipf("the file system of %s cannot map extents: %v", dir, err)
	}
	must(t, err)
	var mapped uint64
	for _, e := range extents {
		if e.logical >= uint64(fi.Size()) {
			break // the file system's own allocation past the end
		}
		if e.flags&fiemapExtentUnwritten != 0 {
			t.Errorf("segment extent at %d (%d bytes) is unwritten: reserved with fallocate, not zeros", e.logical, e.length)
		}
		mapped = max(mapped, e.logical+e.length)
	}
	if mapped < uint64(fi.Size()) {
		t.Errorf("segment extents map %d of its %d bytes; want the reserved space written", mapped, fi.Size())
	}
}

const (
	fsIocFiemap            = 0xC020660B // FS_IOC_FIEMAP
	fiemapFlagSync         = 0x1
	fiemapExtentUnwritten  = 0x800
	fiemapHeaderLen        = 32
	fiemapExtentLen        = 56
	fiemapExtentsRequested = 64
)

type fileExtent struct {
	logical, length uint64
	flags           uint32
}

// fileExtents maps f's extents with the FS_IOC_FIEMAP ioctl, after
// syncing f.
func fileExtents(f *os.File) ([]fileExtent, error) {
	buf := make([]byte, fiemapHeaderLen+fiemapExtentsRequested*fiemapExtentLen)
	le := binary.LittleEndian
	le.PutUint64(buf[0:], 0)               // fm_start
	le.PutUint64(buf[8:], ^uint64(0))      // fm_length
	le.PutUint32(buf[16:], fiemapFlagSync) // fm_flags
	le.PutUint32(buf[24:], fiemapExtentsRequested)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), fsIocFiemap, uintptr(unsafe.Pointer(&buf[0]))); errno != 0 {
		return nil, errno
	}
	n := le.Uint32(buf[20:]) // fm_mapped_extents
	out := make([]fileExtent, n)
	for i := range out {
		e := buf[fiemapHeaderLen+i*fiemapExtentLen:]
		out[i] = fileExtent{logical: le.Uint64(e[0:]), length: le.Uint64(e[16:]), flags: le.Uint32(e[40:])}
	}
	return out, nil
}
