package file

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"
)

// FindingKind classifies what Check found.
type FindingKind string

// The kinds of finding.
const (
	// KindCorrupt: a file failed its checksum or does not parse; its session
	// answers ErrDataLoss. Repair moves the session's folder to quarantine/.
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
// damaged, truncated or stray. With repair it trims torn journal tails,
// moves what cannot be read into quarantine/ (it never deletes data), and
// rebuilds the derived index files. progress, if not nil, is called after
// each session with the number done and the total. It fails with an error
// wrapping storage.ErrLocked while a store has the dir open.
func Check(ctx context.Context, dir string, repair bool, progress func(done, total int)) (*CheckReport, error) {
	if _, err := os.Stat(filepath.Join(dir, formatFile)); err != nil {
		return nil, fmt.Errorf("file: check %s: not a sessiond data dir: %w", dir, err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	c := &checker{dir: dir, repair: repair, rep: &CheckReport{Dir: dir}, stamp: time.Now().UTC().Format("20060102T150405Z")}
	err = c.run(ctx, progress)
	if err == nil && repair && c.changed {
		// Rebuild the derived indexes from the repaired sessions: an open
		// without the checkpoint mark scans every session, and Close writes a
		// new checkpoint.
		_ = os.Remove(filepath.Join(dir, "index", cleanName))
		var s *Store
		if s, err = openLocked(ctx, dir, lock); err == nil {
			return c.rep, s.Close() // releases the lock
		}
	}
	lock.Close()
	if err != nil {
		return nil, err
	}
	return c.rep, nil
}

type checker struct {
	dir     string
	repair  bool
	rep     *CheckReport
	stamp   string
	changed bool
	known   map[string]uint64 // revisions the last checkpoint vouched for
}

// trustedRevisions reads the revisions the current checkpoint recorded for
// sessions not deleted since, if the checkpoint and its dirty files are
// intact. Revisions only grow until a delete, so a session whose files hold
// less lost acknowledged changes, which on its own would look like a torn
// tail.
func trustedRevisions(dir string) map[string]uint64 {
	out := map[string]uint64{}
	ck := readCheckpoint(dir, zap.NewNop())
	if !ck.ok {
		return out
	}
	for id, m := range ck.metas {
		if ck.dirty[id] != dirtyReset {
			out[id] = m.Revision
		}
	}
	return out
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
	b, err := os.ReadFile(filepath.Join(c.dir, formatFile))
	if err != nil {
		return fmt.Errorf("file: check %s: %w", c.dir, err)
	}
	if string(b) != formatVersion {
		return fmt.Errorf("file: check %s: format %q is not %q; refusing to check", c.dir, strings.TrimSpace(string(b)), strings.TrimSpace(formatVersion))
	}
	top, err := os.ReadDir(c.dir)
	if err != nil {
		return err
	}
	for _, de := range top {
		switch de.Name() {
		case formatFile, "LOCK", "sessions", "index", "quarantine":
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
	c.known = trustedRevisions(c.dir)
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
		return c.find(path, KindCorrupt, err.Error()+"; the session answers DATA_LOSS", c.quarantine(dir))
	}
	snap := filepath.Join(dir, snapshotName)
	data, err := os.ReadFile(snap)
	if err != nil {
		return corrupt(snap, err)
	}
	gen, meta, msgs, err := decodeSnapshot(data)
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
		case n == snapshotName || n == journalName(gen):
		case strings.HasPrefix(n, "journal-"):
			if err := c.find(p, KindOrphan, "journal of an older generation, already folded into the snapshot", c.quarantine(p)); err != nil {
				return err
			}
		case strings.HasPrefix(n, tmpPref):
			if err := c.find(p, KindStray, "left by an interrupted snapshot write", c.quarantine(p)); err != nil {
				return err
			}
		default:
			if err := c.find(p, KindStray, "not a file of the session", c.quarantine(p)); err != nil {
				return err
			}
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
	jc, err := decodeJournal(jdata)
	if err == nil {
		meta, msgs, err = replay(meta, msgs, gen, id, jc, true)
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
			fmt.Sprintf("incomplete last record after byte %d of %d (a crash during an append); trimming keeps everything acknowledged", end, len(jdata)),
			func() error { return truncateSync(jpath, end) })
	}
	return nil
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
// mark, the dirty files and the checkpoints' index files. Stale ones (older
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
	derived := func(p string, err error) error {
		// Derived data: rebuilding it loses nothing, so the damaged copy is
		// removed rather than quarantined.
		return c.find(p, KindIndex, err.Error()+"; derived data, rebuilt from the sessions", func() error { return os.Remove(p) })
	}
	for _, de := range des {
		n, p := de.Name(), filepath.Join(dir, de.Name())
		var err error
		if n == cleanName {
			var data []byte
			if data, err = os.ReadFile(p); err == nil && !isLegacyMark(data) {
				_, _, err = decodeMark(data)
			}
		} else if seq, ok := parseSeqName(n, dirtyPref); ok && !de.IsDir() {
			var data []byte
			if data, err = os.ReadFile(p); err == nil {
				var got uint64
				if got, _, _, err = decodeDirty(data); err == nil && got != seq {
					err = fmt.Errorf("dirty file holds sequence number %d: %w", got, errCorrupt)
				}
			}
		} else if _, ok := parseSeqName(n, ckptPref); ok && de.IsDir() {
			if err := c.indexFolder(p, derived); err != nil {
				return err
			}
			continue
		} else if _, ok := nsFromFileName(n); ok && !de.IsDir() {
			err = checkIndexFile(p) // an earlier version's index file
		} else {
			if err := c.find(p, KindStray, "not an index file", c.quarantine(p)); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			if err := derived(p, err); err != nil {
				return err
			}
		}
	}
	return nil
}

// indexFolder checks one checkpoint's index files.
func (c *checker) indexFolder(dir string, derived func(string, error) error) error {
	des, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, de := range des {
		p := filepath.Join(dir, de.Name())
		if _, ok := nsFromFileName(de.Name()); !ok || de.IsDir() {
			if err := c.find(p, KindStray, "not an index file", c.quarantine(p)); err != nil {
				return err
			}
			continue
		}
		if err := checkIndexFile(p); err != nil {
			if err := derived(p, err); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkIndexFile(p string) error {
	data, err := os.ReadFile(p)
	if err == nil {
		_, _, _, err = decodeIndex(data)
	}
	return err
}

// isLegacyMark reports whether data is the clean mark of a version before
// checkpoints: an epoch in hex. Open ignores it (and rescans), so it is not
// damage.
func isLegacyMark(data []byte) bool {
	b, err := hex.DecodeString(strings.TrimSuffix(string(data), "\n"))
	return err == nil && len(b) == 16
}
