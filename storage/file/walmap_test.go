package file

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/sessiond/sessiond/storage"
)

// TestMapWALMatchesRead: a WAL left by kill -9, with a segment started in
// a spare (its earlier batches past its tail), plans the same replay from
// mapped segments as from heap copies, and release drops the records'
// bytes along with the mappings.
func TestMapWALMatchesRead(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, WithWALSegmentBytes(16<<10))
	toRecycled(t, s)
	for i := range 3 {
		id := mustCreate(t, s, storage.CreateRequest{}).ID
		mustAppend(t, s, id, msg(fmt.Sprintf("m%d", i), strings.Repeat("m", 300)))
	}
	crashed := crashCopy(t, dir)

	read, err := readWAL(crashed, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	mapped, err := mapWAL(crashed, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if len(mapped.unmaps) == 0 {
		t.Fatal("mapWAL mapped no segment")
	}
	if len(read.byPath) == 0 {
		t.Fatal("the crashed store's WAL has no record to replay")
	}
	opts := []cmp.Option{cmp.AllowUnexported(walPlan{}, walRec{}, walSegment{}, walPos{}), cmpopts.IgnoreFields(walPlan{}, "unmaps")}
	if diff := cmp.Diff(read, mapped, opts...); diff != "" {
		t.Fatalf("mapped plan differs from the read one (-read +mapped):\n%s", diff)
	}
	mapped.release()
	for path, recs := range mapped.byPath {
		for _, r := range recs {
			if r.frame != nil {
				t.Fatalf("a record for %s keeps its bytes after release", path)
			}
		}
	}
	if mapped.unmaps != nil {
		t.Error("release left its unmaps")
	}
}

// TestMapWALFault: a mapped page that cannot be read (here: past the end of
// a file cut short after it was mapped) makes the read fail with EIO
// instead of crashing the process.
func TestMapWALFault(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, WithWALSegmentBytes(16<<10))
	id := mustCreate(t, s, storage.CreateRequest{}).ID
	mustAppend(t, s, id, msg("m", "x"))
	crashed := crashCopy(t, dir)
	segs := walSegments(t, crashed)
	if len(segs) == 0 {
		t.Fatal("no WAL segment")
	}
	cutAfterMapping := func(path string) ([]byte, func(), error) {
		data, unmap, err := mapSegment(path)
		if err == nil {
			err = os.Truncate(path, 0)
		}
		return data, unmap, err
	}
	p, err := planWAL(crashed, zap.NewNop(), cutAfterMapping)
	if !errors.Is(err, unix.EIO) {
		t.Fatalf("planWAL over a segment cut after mapping: %v, %v; want an EIO error", p, err)
	}
}
