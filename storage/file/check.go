package file

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/storage"
)

// FindingKind classifies what Check found.
type FindingKind string

// The kinds of finding.
const (
	// KindCorrupt: a file failed its checksum or does not parse; its session
	// answers ErrDataLoss. Repair copies the session's folder to
	// quarantine/ and rebuilds the session from every intact frame (see
	// salvage); a session whose metadata cannot be read anywhere is moved
	// to quarantine/ whole instead.
	KindCorrupt FindingKind = "corrupt"
	// KindTruncated: a journal ends in an incomplete record (a crash during
	// an append). Repair trims it, as loading the session would.
	KindTruncated FindingKind = "truncated"
	// KindStray: a file or folder the store does not use (a crash's temp
	// file, a half-done delete, an unknown name). Repair moves it to
	// quarantine/.
	KindStray FindingKind = "stray"
	// KindOrphan: a journal of a generation the snapshot does not use, left
	// by an interrupted fold or save. Repair moves it to quarantine/.
	KindOrphan FindingKind = "orphan"
	// KindIndex: a derived index file is damaged. Repair rebuilds it.
	KindIndex FindingKind = "index"
	// KindMissing: the index knew a session (not deleted through the
	// store) that has no folder: removed by hand, or lost. Nothing can
	// bring it back; repair makes the index forget it.
	KindMissing FindingKind = "missing"
)

// Finding is one problem Check found.
type Finding struct {
	Path     string // relative to the data dir
	Kind     FindingKind
	Detail   string
	Repaired bool
}

// CheckReport is what Check found and did.
type CheckReport struct {
	Dir      string
	Sessions int // session folders checked
	Findings []Finding
}

// Damaged reports whether Check found anything.
func (r *CheckReport) Damaged() bool { return len(r.Findings) > 0 }

// Check reads every file of the data dir offline and reports what is
// damaged, truncated or stray. With repair it trims torn journal tails
// (and gives back the space a fold left reserved past a segment),
// salvages damaged sessions (keeping every intact message and metadata
// record, after copying the damaged files into quarantine/), moves what
// cannot be read into quarantine/ (it never deletes data), and rebuilds
// the derived index files. progress, if not nil, is called after
// each session with the number done and the total. It fails with an error
// wrapping storage.ErrLocked while a store has the dir open.
func Check(ctx context.Context, dir string, repair bool, progress func(done, total int)) (*CheckReport, error) {
	b, err := os.ReadFile(filepath.Join(dir, formatFile))
	if err != nil {
		return nil, fmt.Errorf("file: check %s: not a sessiond data dir: %w", dir, err)
	}
	if string(b) != formatVersion {
		return nil, fmt.Errorf("file: check %s: format %q is not %q; refusing to check", dir, strings.TrimSpace(string(b)), strings.TrimSpace(formatVersion))
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	c := &checker{dir: dir, repair: repair, rep: &CheckReport{Dir: dir}, stamp: time.Now().UTC().Format("20060102T150405Z")}
	err = c.run(ctx, progress)
	if err == nil && repair && c.changed {
		return c.rep, rebuildIndex(ctx, dir, lock)
	}
	lock.Close()
	if err != nil {
		return nil, err
	}
	return c.rep, nil
}

// rebuildIndex rebuilds the derived indexes from the sessions and releases
// lock: an open without the checkpoint mark scans every session, and its
// Close writes a new checkpoint.
func rebuildIndex(ctx context.Context, dir string, lock *os.File) error {
	_ = os.Remove(filepath.Join(dir, "index", cleanName))
	s, err := openLocked(ctx, dir, lock)
	if err != nil {
		lock.Close()
		return err
	}
	return s.Close() // releases the lock
}

type checker struct {
	dir     string
	repair  bool
	rep     *CheckReport
	stamp   string
	changed bool
	// restoring: salvage rebuilds a copy taken from quarantine/ (Restore),
	// so it makes no copy of its own, and a session whose metadata is lost
	// everywhere comes back named by its folder alone.
	restoring bool
	known     map[string]uint64           // revisions the last checkpoint vouched for
	indexed   map[string]*storage.Session // the last checkpoint's metadata of each session it knows
	wal       *walPlan                    // the write-ahead log's records, put into journals as Open would
	lost      map[string]error            // sessions whose change the write-ahead log lost
}

// checkWAL reads the write-ahead log. Its records count as part of the
// journals they name (after a power failure a journal may lack what only
// the log holds), so sessions are checked as Open would see them. Damage is
// a finding; a torn last flush (never acknowledged) is one too. Repair
// puts the records into the journals and syncs them, moves damaged
// segments to quarantine/ and removes the others.
func (c *checker) checkWAL() error {
	p, err := readWAL(c.dir, zap.NewNop())
	if err != nil {
		return fmt.Errorf("file: check the write-ahead log: %w", err)
	}
	c.wal = p
	if c.repair && len(p.segs) > 0 {
		// The segments go below, and with them what the checkpoint's
		// position relies on: the index is rebuilt.
		c.changed = true
		if _, err := applyWAL(p, c.dir, &ioStats{}); err != nil {
			return fmt.Errorf("file: repair: %w", err)
		}
		for jp := range p.byPath {
			if err := syncFile(jp); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("file: repair: sync %s: %w", c.rel(jp), err)
			}
		}
	}
	c.lost = lostChanges(p, c.dir)
	for _, seg := range p.segs {
		why, bad := p.damaged[seg.path]
		end, torn := p.torn[seg.path]
		var err error
		switch {
		case bad:
			detail := "write-ahead log segment is damaged: " + why + "; the sessions whose change it lost answer DATA_LOSS"
			err = c.find(seg.path, KindCorrupt, detail, c.quarantine(seg.path))
		case torn:
			detail := fmt.Sprintf("incomplete last flush after byte %d (a crash during a flush, never acknowledged)", end)
			err = c.find(seg.path, KindTruncated, detail, c.removeSegment(seg.path))
		case c.repair:
			err = c.removeSegment(seg.path)()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// removeSegment removes a write-ahead log segment whose records are in the
// journals (durably, after checkWAL's repair).
func (c *checker) removeSegment(path string) func() error {
	return func() error {
		if err := os.Remove(path); err != nil {
			return err
		}
		return syncDir(filepath.Dir(path))
	}
}

// trustedRevisions reads the revisions and metadata the current
// checkpoint recorded for sessions not changed since (named by no record
// in the log p from its position on), if the checkpoint is intact.
// Revisions only grow until a delete, so a session whose files hold less
// lost acknowledged changes, which on its own would look like a torn tail.
func trustedRevisions(dir string, p *walPlan) (map[string]uint64, map[string]*storage.Session) {
	out := map[string]uint64{}
	metas := map[string]*storage.Session{}
	ck := readCheckpoint(dir, zap.NewNop())
	if !ck.ok {
		return out, metas
	}
	changed, ok := p.changedSince(ck.pos)
	if !ok {
		return out, metas
	}
	for _, m := range ck.metas {
		if !changed[m.ID] {
			out[m.ID] = m.Revision
			metas[m.ID] = m
		}
	}
	return out, metas
}

func (c *checker) rel(path string) string {
	r, err := filepath.Rel(c.dir, path)
	if err != nil {
		return path
	}
	return r
}

func (c *checker) find(path string, kind FindingKind, detail string, fix func() error) error {
	f := Finding{Path: c.rel(path), Kind: kind, Detail: detail}
	if c.repair && fix != nil {
		if err := fix(); err != nil {
			return fmt.Errorf("file: repair %s: %w", f.Path, err)
		}
		f.Repaired = true
		c.changed = true
	}
	c.rep.Findings = append(c.rep.Findings, f)
	return nil
}

// quarantine moves path under quarantine/, keeping its path relative to the
// data dir, so that nothing is deleted and an operator can look at it.
func (c *checker) quarantine(path string) func() error {
	return func() error {
		dst := filepath.Join(c.dir, "quarantine", c.stamp, c.rel(path))
		if err := os.MkdirAll(filepath.Dir(dst), dirPerm); err != nil {
			return err
		}
		if err := os.Rename(path, dst); err != nil {
			return err
		}
		if err := syncDir(filepath.Dir(dst)); err != nil {
			return err
		}
		return syncDir(filepath.Dir(path))
	}
}

func (c *checker) run(ctx context.Context, progress func(done, total int)) error {
	top, err := os.ReadDir(c.dir)
	if err != nil {
		return err
	}
	for _, de := range top {
		switch de.Name() {
		case formatFile, "LOCK", "sessions", "index", "quarantine", walDir:
		default:
			p := filepath.Join(c.dir, de.Name())
			if err := c.find(p, KindStray, "not a file of the store", c.quarantine(p)); err != nil {
				return err
			}
		}
	}
	root := filepath.Join(c.dir, "sessions")
	des, err := os.ReadDir(root)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	var ids []string
	for _, de := range des {
		p := filepath.Join(root, de.Name())
		switch {
		case strings.HasPrefix(de.Name(), tmpPref):
			err = c.find(p, KindStray, "left by an interrupted create", c.quarantine(p))
		case strings.HasPrefix(de.Name(), delPref):
			err = c.find(p, KindStray, "left by an interrupted delete", c.quarantine(p))
		case !isSessionID(de.Name()) || !de.IsDir():
			err = c.find(p, KindStray, "not a session folder", c.quarantine(p))
		default:
			ids = append(ids, de.Name())
		}
		if err != nil {
			return err
		}
	}
	if err := c.checkWAL(); err != nil {
		return err
	}
	c.known, c.indexed = trustedRevisions(c.dir, c.wal)
	present := make(map[string]bool, len(ids))
	for _, id := range ids {
		present[id] = true
	}
	for _, id := range slices.Sorted(maps.Keys(c.known)) {
		if !present[id] {
			detail := fmt.Sprintf("the index knew this session (revision %d) but it has no folder: removed by hand, or lost", c.known[id])
			if err := c.find(filepath.Join(root, id), KindMissing, detail, func() error { return nil }); err != nil {
				return err
			}
		}
	}
	c.rep.Sessions = len(ids)
	for i, id := range ids {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := c.session(id); err != nil {
			return err
		}
		if progress != nil {
			progress(i+1, len(ids))
		}
	}
	return c.indexes()
}

// session checks one session folder the way a load reads it.
func (c *checker) session(id string) error {
	dir := filepath.Join(c.dir, "sessions", id)
	corrupt := func(path string, err error) error {
		detail := err.Error() + "; the session answers DATA_LOSS"
		if !c.repair {
			return c.find(path, KindCorrupt, detail, nil)
		}
		kept, serr := c.salvage(id, dir)
		if errors.Is(serr, errNoMetadata) {
			return c.find(path, KindCorrupt, detail+"; "+serr.Error()+", so its folder was moved to quarantine/", c.quarantine(dir))
		}
		if serr != nil {
			return fmt.Errorf("file: repair %s: %w", c.rel(dir), serr)
		}
		return c.find(path, KindCorrupt, detail+"; "+kept, func() error { return nil })
	}
	snap := filepath.Join(dir, snapshotName)
	data, err := os.ReadFile(snap)
	if err != nil {
		return corrupt(snap, err)
	}
	gen, meta, segs, msgs, cs, err := decodeSnapshot(data)
	if err == nil && meta.ID != id {
		err = fmt.Errorf("snapshot holds session %s", meta.ID)
	}
	if err != nil {
		return corrupt(snap, err)
	}
	des, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, de := range des {
		n, p := de.Name(), filepath.Join(dir, de.Name())
		switch {
		case sessionFileKept(n, gen, segs):
		case isSegmentName(n):
			err = c.find(p, KindOrphan, "journal or snapshot of a generation the snapshot does not use, left by an interrupted fold or save", c.quarantine(p))
		case strings.HasPrefix(n, tmpPref):
			err = c.find(p, KindStray, "left by an interrupted snapshot write", c.quarantine(p))
		default:
			err = c.find(p, KindStray, "not a file of the session", c.quarantine(p))
		}
		if err != nil {
			return err
		}
	}
	if segs != nil {
		// Repair gives back the space a fold left reserved past a segment,
		// as a load does: no finding, as nothing is lost or wrong.
		var trim func(string, int64)
		var trimErr error
		if c.repair {
			trim = func(p string, n int64) {
				if err := os.Truncate(p, n); err != nil && trimErr == nil {
					trimErr = fmt.Errorf("file: repair %s: give back reserved space: %w", c.rel(p), err)
				}
			}
		}
		if msgs, cs, err = readSegments(dir, id, gen, meta, segs, true, trim); err != nil {
			var se *segmentError
			if errors.As(err, &se) {
				return corrupt(filepath.Join(dir, se.name), err)
			}
			return corrupt(snap, err)
		}
		if trimErr != nil {
			return trimErr
		}
	}
	jpath := filepath.Join(dir, journalName(gen))
	jdata, err := os.ReadFile(jpath)
	if errors.Is(err, os.ErrNotExist) {
		jdata, err = encodeJournalHead(gen, id), nil // what a load recreates
	}
	if err != nil {
		return corrupt(jpath, err)
	}
	if !c.repair {
		jdata, _ = patchJournal(jdata, c.wal.byPath[jpath])
	}
	jc, err := decodeJournal(jdata)
	if err == nil {
		meta, msgs, _, err = replay(meta, msgs, cs, gen, id, jc, true, true)
	}
	if lerr := c.lost[id]; err == nil && lerr != nil {
		err = lerr
	}
	if err == nil && meta.Revision < c.known[id] {
		err = fmt.Errorf("files hold revision %d, but the last checkpoint recorded %d", meta.Revision, c.known[id])
	}
	if err == nil {
		for i, m := range msgs {
			if _, merr := messageID(m); merr != nil {
				err = fmt.Errorf("message %d: %w", i, merr)
				break
			}
		}
	}
	if err != nil {
		return corrupt(jpath, err)
	}
	if jc.torn {
		end := int64(jc.end)
		return c.find(jpath, KindTruncated,
			fmt.Sprintf("incomplete last record after byte %d of %d (a write a crash cut short); trimming keeps every record before byte %d and drops that one change, "+
				"which the write-ahead log does not hold either: it was never acknowledged, unless the log lost it too (a damaged log segment, reported on its own)", end, len(jdata), end),
			func() error { return truncateSync(jpath, end) })
	}
	return nil
}

// errNoMetadata: salvage found nothing that says which session it is.
var errNoMetadata = errors.New("nothing identifies the session: its snapshot header and metadata records are all damaged, and no checkpoint knows it")

// salvage rebuilds the damaged session in dir from what is intact, after
// copying its files into quarantine/: the metadata of the snapshot's header
// (or of the journals' last metadata record, or of the oldest segment's
// header, or of the last checkpoint), every message of every intact snapshot frame and of every
// intact record of a journal commit, in order: the segments the snapshot
// lists (see segList), the snapshot, its journal. The frames that fail
// their checksum are what is lost. The session is written back as a new
// generation (whole snapshot and empty journal, as a rewrite writes them)
// whose revision is above any it had or that the checkpoint recorded, so
// a client or watcher holding a revision never sees it go backwards. It
// fails, changing nothing in dir, when no metadata can be read
// (errNoMetadata); it returns what it kept, for the finding.
func (c *checker) salvage(id, dir string) (string, error) {
	sv := salvaged{id: id}
	snap, _ := os.ReadFile(filepath.Join(dir, snapshotName))
	var segs *segList
	var gen uint64
	var inline [][]byte
	frames, bad := intactFrames(snap)
	sv.lost += bad
	lostList := bad > 0
	for i, p := range frames {
		switch {
		case p[0] == typeSnapHeader && i == 0:
			g, m, _, err := decodeSnapshotHeader(appendFrame(nil, p))
			if err == nil && m.ID == id {
				gen = g
				sv.meta, sv.rev, sv.updated = m, m.Revision, m.UpdatedAt
			} else {
				sv.lost++
			}
		case p[0] == typeSnapSegments:
			if l, err := decodeSegList(p); err == nil && (sv.meta == nil || l.gen() == gen) {
				segs, gen = l, l.gen()
			} else {
				sv.lost++
				lostList = true
			}
		case p[0] == typeSnapMsgs:
			lostList = false // a whole snapshot
			run, err := decodeSnapRun(p)
			if err != nil {
				sv.lost++
				continue
			}
			inline = append(inline, run...)
		case p[0] == typeSnapEnd, p[0] == typeSnapCompactions:
		default:
			sv.lost++
		}
	}
	// The journal that goes with the snapshot, or if the snapshot's header
	// is lost, the newest one.
	var gens, snaps []uint64
	des, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	for _, de := range des {
		var g uint64
		if _, err := fmt.Sscanf(de.Name(), "journal-%016x", &g); err == nil && de.Name() == journalName(g) {
			gens = append(gens, g)
		}
		if _, err := fmt.Sscanf(de.Name(), "snap-%016x", &g); err == nil && de.Name() == snapName(g) {
			snaps = append(snaps, g)
		}
	}
	if sv.meta == nil && segs == nil && len(gens) > 0 {
		gen = slices.Max(gens)
	}
	// The segments: those the snapshot lists, or if it lost its list, the
	// newest whole snapshot generation before it and the journals since.
	var names []string
	switch {
	case segs != nil:
		names = segs.files()
	case lostList:
		base, found := uint64(0), false
		for _, g := range snaps {
			if g < gen && (!found || g > base) {
				base, found = g, true
			}
		}
		if found && gen-base <= 1<<20 {
			names = (&segList{base: base, journals: make([]segRef, gen-base)}).files()
		}
	}
	for _, n := range names {
		data, _ := os.ReadFile(filepath.Join(dir, n))
		if strings.HasPrefix(n, "snap-") {
			sv.snapshot(data)
		} else {
			sv.journal(data)
		}
	}
	sv.msgs = append(sv.msgs, inline...)
	jdata, _ := os.ReadFile(filepath.Join(dir, journalName(gen)))
	sv.journal(jdata)
	if sv.meta == nil {
		sv.meta = sv.baseMeta
	}
	if sv.meta == nil && c.indexed[id] != nil {
		// The folder's name is the id, and the last checkpoint holds the
		// session's metadata as of then: namespace, alias, title, times.
		sv.meta = cloneMeta(c.indexed[id])
	}
	metaLost := false
	if sv.meta == nil && c.restoring {
		sv.meta = &storage.Session{ID: id, CreatedAt: time.Now().UTC()}
		metaLost = true
	}
	if sv.meta == nil {
		return "", errNoMetadata
	}
	kept := sv.msgs[:0]
	for _, m := range sv.msgs {
		if _, err := messageID(m); err != nil {
			sv.lost++
			continue
		}
		kept = append(kept, m)
	}
	msgs := kept
	m := *sv.meta
	m.Revision = max(sv.rev, m.Revision, c.known[id]) + 1
	m.MessageCount = int64(len(msgs))
	if m.Tally, err = tallyStored(id, storage.Tally{}, msgs); err != nil {
		return "", err
	}
	m.Compaction = nil // compactions are not salvaged: the messages are what matters
	m.UpdatedAt = time.Now().UTC()
	if !sv.updated.IsZero() && sv.updated.After(m.UpdatedAt) {
		m.UpdatedAt = sv.updated
	}
	q := filepath.Join(c.dir, "quarantine", c.stamp, c.rel(dir))
	if !c.restoring {
		if err := copyFolder(dir, q); err != nil {
			return "", fmt.Errorf("copy to quarantine: %w", err)
		}
	}
	for _, g := range slices.Concat(gens, snaps) {
		gen = max(gen, g)
	}
	gen++
	var st ioStats
	jpath := filepath.Join(dir, journalName(gen))
	if err := writeFileSync(&st, jpath, encodeJournalHead(gen, id)); err != nil {
		return "", err
	}
	if err := writeAtomic(&st, filepath.Join(dir, snapshotName), encodeSnapshot(gen, &m, msgs, nil)); err != nil {
		_ = os.Remove(jpath)
		return "", err
	}
	for _, g := range gens {
		if err := os.Remove(filepath.Join(dir, journalName(g))); err != nil {
			return "", err
		}
	}
	for _, g := range snaps {
		if err := os.Remove(filepath.Join(dir, snapName(g))); err != nil {
			return "", err
		}
	}
	if err := syncDir(dir); err != nil {
		return "", err
	}
	c.changed = true
	done := fmt.Sprintf("salvaged %d messages at revision %d, dropping %d damaged frames or records", len(msgs), m.Revision, sv.lost)
	if metaLost {
		done += "; its metadata is lost: it is in the default namespace, without alias, title or labels"
	}
	if c.restoring {
		return done, nil
	}
	return done + "; the damaged files are in " + c.rel(q), nil
}

// salvaged collects what salvage keeps of a session, file by file in order.
type salvaged struct {
	id       string
	meta     *storage.Session // the newest metadata found
	baseMeta *storage.Session // a segment's snapshot header, if nothing newer is found
	msgs     [][]byte
	rev      uint64
	updated  time.Time
	lost     int
}

// snapshot takes the messages of a whole snapshot kept as a segment.
func (sv *salvaged) snapshot(data []byte) {
	frames, bad := intactFrames(data)
	sv.lost += bad
	for i, p := range frames {
		switch {
		case p[0] == typeSnapHeader && i == 0:
			if _, m, _, err := decodeSnapshotHeader(appendFrame(nil, p)); err == nil && m.ID == sv.id {
				sv.baseMeta = m
				sv.rev = max(sv.rev, m.Revision)
			}
		case p[0] == typeSnapMsgs:
			run, err := decodeSnapRun(p)
			if err != nil {
				sv.lost++
				continue
			}
			sv.msgs = append(sv.msgs, run...)
		}
	}
}

// journal takes the records of every intact commit of a journal.
func (sv *salvaged) journal(data []byte) {
	frames, bad := intactFrames(data)
	sv.lost += bad
	for _, f := range frames {
		if f[0] == typeJournalHead {
			continue
		}
		recs, err := appendCommit(nil, f)
		if err != nil {
			sv.lost++
			continue
		}
		for _, r := range recs {
			sv.rev = max(sv.rev, r.rev)
			switch r.kind {
			case recAppend:
				sv.msgs = append(sv.msgs, r.msgs...)
				if r.updatedAt.After(sv.updated) {
					sv.updated = r.updatedAt
				}
			case recMeta:
				if r.meta.ID == sv.id {
					sv.meta = r.meta
				}
			case recDelta, recClose:
				next, ok := []byte(nil), r.index < uint64(len(sv.msgs))
				if ok && r.kind == recClose {
					next = r.msgs[0]
				} else if ok {
					var err error
					next, err = replayDelta(sv.id, sv.msgs[r.index], r.delta)
					ok = err == nil
				}
				if !ok {
					sv.lost++
					continue
				}
				sv.msgs[r.index] = next
				if r.updatedAt.After(sv.updated) {
					sv.updated = r.updatedAt
				}
			}
		}
	}
}

// intactFrames returns every frame of data that passes its checksum, in
// order, skipping damaged stretches (a frame starts at a multiple of 8),
// and how many damaged stretches it skipped. Zeros at the end (reserved
// journal space) are not damage.
func intactFrames(data []byte) (frames [][]byte, bad int) {
	for off := 0; off < len(data); {
		if allZero(data[off:]) {
			break
		}
		if p, next, ok := readFrame(data, off); ok {
			frames = append(frames, p)
			off = next
			continue
		}
		bad++
		for off += 8; off < len(data); off += 8 {
			if _, _, ok := readFrame(data, off); ok {
				break
			}
		}
	}
	return frames, bad
}

// copyFolder copies the regular files of src into a new folder dst, fsynced.
func copyFolder(src, dst string) error {
	if err := os.MkdirAll(dst, dirPerm); err != nil {
		return err
	}
	des, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	var st ioStats
	for _, de := range des {
		if !de.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, de.Name()))
		if err != nil {
			return err
		}
		if err := writeFileSync(&st, filepath.Join(dst, de.Name()), b); err != nil {
			return err
		}
	}
	if err := syncDir(dst); err != nil {
		return err
	}
	return syncDir(filepath.Dir(dst))
}

func truncateSync(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_RDWR, filePerm)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return err
	}
	return f.Sync()
}

// indexes checks the derived files of the index folder: the checkpoint
// mark and the checkpoints' index files. Stale ones (older
// than the mark, left by a crash) are normal and not reported. Any of them
// damaged costs the next open a rescan, nothing else: repair removes it, and
// Check then rebuilds the checkpoint from the sessions.
func (c *checker) indexes() error {
	dir := filepath.Join(c.dir, "index")
	des, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, de := range des {
		n, p := de.Name(), filepath.Join(dir, de.Name())
		_, ckpt := parseSeqName(n, ckptPref)
		switch {
		case n == cleanName:
			err = c.derivedFile(p, func(b []byte) error { _, _, _, err := decodeMark(b); return err })
		case ckpt && de.IsDir():
			err = c.indexFolder(p)
		default:
			err = c.find(p, KindStray, "not an index file", c.quarantine(p))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// indexFolder checks one checkpoint's index files.
func (c *checker) indexFolder(dir string) error {
	des, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, de := range des {
		p := filepath.Join(dir, de.Name())
		if _, ok := nsFromFileName(de.Name()); !ok || de.IsDir() {
			err = c.find(p, KindStray, "not an index file", c.quarantine(p))
		} else {
			err = c.derivedFile(p, func(b []byte) error { _, _, _, err := decodeIndex(b); return err })
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// derivedFile checks the derived file p with decode. Rebuilding derived
// data loses nothing, so repair removes a damaged copy rather than
// quarantining it.
func (c *checker) derivedFile(p string, decode func([]byte) error) error {
	data, err := os.ReadFile(p)
	if err == nil {
		err = decode(data)
	}
	if err == nil {
		return nil
	}
	return c.find(p, KindIndex, err.Error()+"; derived data, rebuilt from the sessions", func() error { return os.Remove(p) })
}
