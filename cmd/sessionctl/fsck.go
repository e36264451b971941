package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/sessiond/sessiond/storage"
	"github.com/sessiond/sessiond/storage/file"
)

func cmdFsck(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet("fsck", e)
	repair := fs.Bool("repair", false, "repair what can be repaired (trim torn journal tails, set damaged sessions aside)")
	pos, err := parseArgs(e, fs, args, 1, 1)
	if err != nil {
		return err
	}
	dir := pos[0]
	if st, err := os.Stat(dir); err != nil {
		return fmt.Errorf("fsck: %w; give the daemon's --data-dir", err)
	} else if !st.IsDir() {
		return usageErrorf("fsck: %s is not a directory; give the daemon's --data-dir", dir)
	}
	prog := newProgress(e, "checking")
	defer prog.finish()
	rep, err := file.Check(ctx, dir, *repair, func(done, total int) {
		prog.update(int64(done), int64(total), "sessions")
	})
	prog.finish()
	if errors.Is(err, storage.ErrLocked) {
		return fmt.Errorf("fsck: %s is in use by a running sessiond; stop the daemon first (fsck works offline)", dir)
	}
	if err != nil {
		return fmt.Errorf("fsck %s: %w", dir, err)
	}
	if e.json {
		for _, f := range rep.Findings {
			b, err := json.Marshal(map[string]any{"path": f.Path, "kind": string(f.Kind), "detail": f.Detail, "repaired": f.Repaired})
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "%s\n", b)
		}
	} else if rep.Damaged() {
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "KIND\tPATH\tREPAIRED\tDETAIL")
		for _, f := range rep.Findings {
			repaired := "no"
			if f.Repaired {
				repaired = "yes"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.Kind, f.Path, repaired, oneLine(f.Detail))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if !rep.Damaged() {
		if !e.json {
			fmt.Fprintf(e.stdout, "%s: %d sessions checked, no damage found\n", dir, rep.Sessions)
		}
		return nil
	}
	unrepaired := 0
	for _, f := range rep.Findings {
		if !f.Repaired {
			unrepaired++
		}
	}
	switch {
	case !*repair:
		fmt.Fprintf(e.stderr, "sessionctl: fsck: %d problems in %s (%d sessions checked); with the daemon stopped, run 'sessionctl fsck --repair %s' (it moves what it cannot fix to quarantine/, deleting nothing)\n", len(rep.Findings), dir, rep.Sessions, dir)
	case unrepaired > 0:
		fmt.Fprintf(e.stderr, "sessionctl: fsck: %d problems in %s, %d of them not repaired; see the list above\n", len(rep.Findings), dir, unrepaired)
	default:
		fmt.Fprintf(e.stderr, "sessionctl: fsck: %d problems in %s, all repaired (damaged sessions moved to quarantine/); the daemon can start again\n", len(rep.Findings), dir)
	}
	return &exitErr{code: exitDamage, err: errSilent}
}
