package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"

	"github.com/sessiond/sessiond/storage"
	"github.com/sessiond/sessiond/storage/file"
)

func fsckCmd(e *env) *cobra.Command {
	var repair bool
	var restore []string
	cmd := &cobra.Command{
		Use:   "fsck DATA_DIR",
		Short: "check (and repair) a stopped daemon's file data dir",
		Long: `fsck reads every file of a file data dir (the daemon's --data-dir, with the
daemon stopped) and reports what is damaged. With --repair it trims torn
journal tails, salvages every intact record of a damaged session (a copy of
the damaged files goes to quarantine/ first), moves what it cannot read to
quarantine/, and rebuilds the derived indexes. It never deletes data.

With --restore ID it brings a session that --repair moved to quarantine/
back into service instead: it is rebuilt from the newest quarantined copy's
intact records, at a revision above any they record (if nothing names its
metadata, it comes back in the default namespace without alias or title),
and the copy stays in quarantine/. A session in service is not replaced.

Exit codes, as e2fsck's: 0 no damage, 1 damage found and all of it
repaired, 4 damage left, 8 not checked (the data dir is missing,
unreadable, or in use by a running daemon).`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, pos []string) error {
			if len(restore) > 0 {
				if repair {
					return usageErrorf("fsck: --restore and --repair are separate steps; run --repair first")
				}
				return e.fsckRestore(cmd.Context(), pos[0], restore)
			}
			return e.fsck(cmd.Context(), pos[0], repair)
		},
	}
	cmd.Flags().BoolVar(&repair, "repair", false, "repair what can be repaired (trim torn tails, salvage damaged sessions, quarantine the rest)")
	cmd.Flags().StringSliceVar(&restore, "restore", nil, "bring the session `ID` back from quarantine/ (repeatable)")
	return cmd
}

// checkDataDir refuses a DATA_DIR that is not a directory.
func checkDataDir(dir string) error {
	if st, err := os.Stat(dir); err != nil {
		return &exitErr{code: exitFsckOperational, grpc: codes.FailedPrecondition, err: fmt.Errorf("fsck: %w; give the daemon's --data-dir", err)}
	} else if !st.IsDir() {
		return usageErrorf("fsck: %s is not a directory; give the daemon's --data-dir", dir)
	}
	return nil
}

// errInUse is fsck's answer when a daemon holds the data dir.
func errInUse(dir string) error {
	return &exitErr{code: exitFsckOperational, grpc: codes.FailedPrecondition, err: fmt.Errorf("fsck: %s is in use by a running sessiond; stop the daemon first (fsck works offline)", dir)}
}

func (e *env) fsck(ctx context.Context, dir string, repair bool) error {
	if err := checkDataDir(dir); err != nil {
		return err
	}
	prog := newProgress(e, "checking")
	defer prog.finish()
	rep, err := file.Check(ctx, dir, repair, func(done, total int) {
		prog.update(int64(done), int64(total), "sessions")
	})
	prog.finish()
	if errors.Is(err, storage.ErrLocked) {
		return errInUse(dir)
	}
	if err != nil {
		return &exitErr{code: exitFsckOperational, grpc: codes.Unknown, err: fmt.Errorf("fsck %s: %w", dir, err)}
	}
	unrepaired := 0
	for _, f := range rep.Findings {
		if !f.Repaired {
			unrepaired++
		}
	}
	code := exitFsckClean
	switch {
	case unrepaired > 0:
		code = exitFsckLeft
	case rep.Damaged():
		code = exitFsckCorrected
	}
	if e.json {
		for _, f := range rep.Findings {
			if err := json.NewEncoder(e.stdout).Encode(map[string]any{"path": f.Path, "kind": string(f.Kind), "detail": f.Detail, "repaired": f.Repaired}); err != nil {
				return err
			}
		}
		if err := json.NewEncoder(e.stdout).Encode(map[string]any{"summary": map[string]any{
			"data_dir": dir, "sessions": rep.Sessions, "problems": len(rep.Findings),
			"repaired": len(rep.Findings) - unrepaired, "exit_code": code,
		}}); err != nil {
			return err
		}
	} else if rep.Damaged() {
		tb := newTable(e.stdout, "KIND", "PATH", "REPAIRED", "DETAIL")
		for _, f := range rep.Findings {
			repaired := "no"
			if f.Repaired {
				repaired = "yes"
			}
			if err := tb.row(string(f.Kind), safeLine(f.Path), repaired, safeLine(oneLine(f.Detail))); err != nil {
				return err
			}
		}
		if err := tb.flush(); err != nil {
			return err
		}
	}
	switch {
	case !rep.Damaged():
		if !e.json {
			fmt.Fprintf(e.stdout, "%s: %d sessions checked, no damage found\n", dir, rep.Sessions)
		}
		return nil
	case e.json:
	case !repair:
		fmt.Fprintf(e.stderr, "sessionctl: fsck: %d problems in %s (%d sessions checked); with the daemon stopped, run 'sessionctl fsck --repair %s' (it salvages what it can and moves the rest to quarantine/, deleting nothing)\n", len(rep.Findings), dir, rep.Sessions, dir)
	case unrepaired > 0:
		fmt.Fprintf(e.stderr, "sessionctl: fsck: %d problems in %s, %d of them not repaired; see the list above\n", len(rep.Findings), dir, unrepaired)
	default:
		fmt.Fprintf(e.stderr, "sessionctl: fsck: %d problems in %s, all repaired (copies of the damaged files are in quarantine/); the daemon can start again\n", len(rep.Findings), dir)
	}
	return &exitErr{code: code, grpc: codes.DataLoss, err: errSilent}
}

// fsckRestore brings sessions back from quarantine/, one after the other;
// it stops at the first that cannot be restored.
func (e *env) fsckRestore(ctx context.Context, dir string, ids []string) error {
	if err := checkDataDir(dir); err != nil {
		return err
	}
	for _, id := range ids {
		r, err := file.Restore(ctx, dir, id)
		switch {
		case errors.Is(err, storage.ErrLocked):
			return errInUse(dir)
		case errors.Is(err, storage.ErrInvalid):
			return usageErrorf("fsck: --restore %q: not a session id", id)
		case errors.Is(err, storage.ErrNotFound):
			return &exitErr{code: exitFsckOperational, grpc: codes.NotFound, err: fmt.Errorf("fsck: session %s: no copy in %s", id, filepath.Join(dir, "quarantine"))}
		case errors.Is(err, storage.ErrAlreadyExists):
			return &exitErr{code: exitFsckOperational, grpc: codes.AlreadyExists, err: fmt.Errorf("fsck: session %s is in service; delete it first to restore the quarantined copy", id)}
		case err != nil:
			return &exitErr{code: exitFsckOperational, grpc: codes.Unknown, err: fmt.Errorf("fsck: restore %s: %w", id, err)}
		}
		if err := e.printResult(map[string]any{"restored": r.ID, "from": r.From, "detail": r.Detail},
			"restored session %s from %s: %s\n", r.ID, safeLine(r.From), safeLine(oneLine(r.Detail))); err != nil {
			return err
		}
	}
	return nil
}
