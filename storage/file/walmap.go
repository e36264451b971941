package file

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Open reads the write-ahead log from read-only shared mappings of its
// segments rather than heap copies: after kill -9 the segments are in the
// page cache, so a mapping shows those pages without copying them and
// without touching fresh memory, which on a small VM costs as much CPU as
// the replay itself. The records a plan hands to applyWAL are parts of the
// mappings, so the plan unmaps them (release) only once the replay is done.
//
// A read of a mapped page that fails (an I/O error under it) raises a fault
// instead of returning an error; the goroutines that read mapped bytes turn
// it into an error (debug.SetPanicOnFault and recoverFault).

// mapSegment maps the file at path read-only. unmap is nil for an empty
// file (nothing to map) and for a file system that cannot map, whose bytes
// are read into the heap instead.
func mapSegment(path string) (data []byte, unmap func(), err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	size := fi.Size()
	if size == 0 {
		return nil, nil, nil
	}
	if size != int64(int(size)) {
		return nil, nil, fmt.Errorf("%s: %d bytes cannot be mapped", path, size)
	}
	data, err = unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		data, err = os.ReadFile(path)
		return data, nil, err
	}
	return data, func() { _ = unix.Munmap(data) }, nil
}

// recoverFault, deferred in a goroutine that set debug.SetPanicOnFault,
// turns a fault reading mapped memory into an I/O error in *err. Any other
// panic goes on.
func recoverFault(err *error) {
	r := recover()
	if r == nil {
		return
	}
	if f, ok := r.(interface{ Addr() uintptr }); ok {
		*err = fmt.Errorf("read a mapped write-ahead log segment: fault at address %#x: %w", f.Addr(), unix.EIO)
		return
	}
	panic(r)
}

// release unmaps the segments the plan's records are parts of, and drops
// those records' bytes. Nothing may read them afterwards.
func (p *walPlan) release() {
	for _, recs := range p.byPath {
		for i := range recs {
			recs[i].frame = nil
		}
	}
	for _, unmap := range p.unmaps {
		unmap()
	}
	p.unmaps = nil
}
