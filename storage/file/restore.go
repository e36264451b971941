package file

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/storage"
)

// Restored is what Restore brought back.
type Restored struct {
	ID     string
	From   string // the quarantined folder, relative to the data dir
	Detail string // what was kept, as Check's findings say it
}

// Restore brings session id back into service from its newest copy in
// quarantine/ (where Check's repair moves a session it cannot read whole,
// and copies one it salvages). The copy is rebuilt as salvage rebuilds a
// damaged session, from every intact record, as a new generation at a
// revision above any its intact files or the last checkpoint record; when nothing in it names the
// session's metadata, the folder's name is its id and it comes back in the
// default namespace, without alias or title. The quarantined copy is kept.
// It fails with storage.ErrNotFound when quarantine/ holds no copy, with
// storage.ErrAlreadyExists when the session is in service (a salvaged
// session, or one created again since), and with an error wrapping
// storage.ErrLocked while a store has the dir open.
func Restore(ctx context.Context, dir, id string) (*Restored, error) {
	if !isSessionID(id) {
		return nil, fmt.Errorf("file: restore %q: %w", id, storage.Invalid("id", "is not a session id"))
	}
	if _, err := os.Stat(filepath.Join(dir, formatFile)); err != nil {
		return nil, fmt.Errorf("file: restore in %s: not a sessiond data dir: %w", dir, err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	r, err := restoreLocked(dir, id)
	if err != nil {
		lock.Close()
		return nil, err
	}
	// The session is listed and its alias known once the indexes are
	// rebuilt.
	return r, rebuildIndex(ctx, dir, lock)
}

func restoreLocked(dir, id string) (*Restored, error) {
	copies, err := filepath.Glob(filepath.Join(dir, "quarantine", "*", "sessions", id))
	if err != nil {
		return nil, err
	}
	copies = slices.DeleteFunc(copies, func(p string) bool {
		fi, err := os.Stat(p)
		return err != nil || !fi.IsDir()
	})
	if len(copies) == 0 {
		return nil, fmt.Errorf("file: restore %s: no copy in quarantine/: %w", id, storage.ErrNotFound)
	}
	src := slices.Max(copies) // quarantine/'s folders are named by UTC time
	root := filepath.Join(dir, "sessions")
	live := filepath.Join(root, id)
	if _, err := os.Lstat(live); err == nil {
		return nil, fmt.Errorf("file: restore %s: the session is in service (sessions/%s exists): %w", id, id, storage.ErrAlreadyExists)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if err := os.MkdirAll(root, dirPerm); err != nil {
		return nil, err
	}
	// Rebuilt beside the live folders under a temporary name, which a crash
	// leaves as a stray for Check, and renamed in whole.
	tmp := filepath.Join(root, tmpPref+id+"-"+randSuffix())
	renamed := false
	defer func() {
		if !renamed {
			_ = os.RemoveAll(tmp)
		}
	}()
	if err := copyFolder(src, tmp); err != nil {
		return nil, fmt.Errorf("file: restore %s: copy from quarantine: %w", id, err)
	}
	p, err := readWAL(dir, zap.NewNop())
	if err != nil {
		return nil, fmt.Errorf("file: restore %s: read the write-ahead log: %w", id, err)
	}
	c := &checker{dir: dir, restoring: true}
	c.known, c.indexed = trustedRevisions(dir, p)
	kept, err := c.salvage(id, tmp)
	if err != nil {
		return nil, fmt.Errorf("file: restore %s: %w", id, err)
	}
	if err := os.Rename(tmp, live); err != nil {
		return nil, err
	}
	renamed = true
	if err := syncDir(root); err != nil {
		return nil, err
	}
	return &Restored{ID: id, From: c.rel(src), Detail: kept}, nil
}
