package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// ext4Mount makes a small ext4 filesystem on a loop device, mounted with
// errors=remount-ro, and returns its mount point and the loop device's
// name (as /sys/fs/ext4 names it). The cleanups unmount it and detach the
// device. Where that is not allowed (not root, no loop devices) the test
// skips, except in CI (CI=true), which runs it as root.
func ext4Mount(t *testing.T) (mnt, dev string) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, args...)
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s (this test needs root and loop devices, as CI has)", msg)
		}
		t.Skipf("skipping: %s (needs root and loop devices)", msg)
	}
	if os.Geteuid() != 0 {
		fail("not root")
	}
	img := filepath.Join(t.TempDir(), "ext4.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 64<<20); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", img).CombinedOutput(); err != nil {
		fail("mkfs.ext4: %v: %s", err, out)
	}
	out, err := exec.Command("losetup", "--find", "--show", img).CombinedOutput()
	if err != nil {
		fail("losetup: %v: %s", err, out)
	}
	loop := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "-d", loop).CombinedOutput(); err != nil {
			t.Errorf("losetup -d %s: %v: %s", loop, err, out)
		}
	})
	mnt = filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	mount := func() {
		t.Helper()
		if out, err := exec.Command("mount", "-t", "ext4", "-o", "errors=remount-ro", loop, mnt).CombinedOutput(); err != nil {
			fail("mount %s: %v: %s", loop, err, out)
		}
	}
	mount()
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
		}
	})
	return mnt, filepath.Base(loop)
}

// remountExt4 unmounts mnt, repairs the filesystem on /dev/<dev> with
// e2fsck as a reboot would, and mounts it again.
func remountExt4(t *testing.T, mnt, dev string) {
	t.Helper()
	if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
		t.Fatalf("umount %s: %v: %s", mnt, err, out)
	}
	// e2fsck exits 1 when it corrected errors: the abort marked the
	// filesystem as having some.
	if out, err := exec.Command("e2fsck", "-f", "-y", "/dev/"+dev).CombinedOutput(); err != nil {
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() > 1 {
			t.Fatalf("e2fsck /dev/%s: %v: %s", dev, err, out)
		}
	}
	if out, err := exec.Command("mount", "-t", "ext4", "-o", "errors=remount-ro", "/dev/"+dev, mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount /dev/%s again: %v: %s", dev, err, out)
	}
}

// TestExt4AbortServesOnlyAcknowledged: 4 writers append to their own
// sessions on an ext4 filesystem that aborts under them (errors=remount-ro,
// then trigger_fs_error), over 10 rounds. Every failed append is
// UNAVAILABLE or RESOURCE_EXHAUSTED, never INTERNAL; a load while the
// filesystem is aborted serves exactly the acknowledged messages; and
// after the filesystem is repaired and the daemon restarted, nothing that
// was never sent is served and every acknowledged append is there, also
// one acknowledged in the few milliseconds between the journal's abort and
// the read-only remount. That window is why the write-ahead log reserves
// its space by writing zeros: ext4 can confirm an fdatasync there that
// wrote into a preallocated (unwritten) extent whose conversion never
// reaches the aborted journal, and after e2fsck the file reads zeros where
// the acknowledged batch was (see docs/faults.md). An append whose
// fdatasync failed may be there (its bytes reached the disk before the
// error); those are counted and logged.
func TestExt4AbortServesOnlyAcknowledged(t *testing.T) {
	const rounds, writers = 10, 4
	for round := range rounds {
		t.Run(fmt.Sprint("round", round), func(t *testing.T) {
			ext4AbortRound(t, writers)
		})
	}
}

func ext4AbortRound(t *testing.T, writers int) {
	ctx := testContext(t, time.Minute)
	mnt, dev := ext4Mount(t)
	d := startDaemon(t, filepath.Join(mnt, "data"))
	c := d.client(t)
	ids := make([]string, writers)
	for w := range ids {
		r, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Title: fmt.Sprint("writer ", w)})
		if err != nil {
			t.Fatal(err)
		}
		ids[w] = r.GetSession().GetId()
	}
	content := strings.Repeat("x", 1<<10)
	acked := make([]map[string]time.Time, writers) // id -> when acknowledged
	inDoubt := make([]map[string]bool, writers)    // appends that failed
	var failed sync.Map                            // code -> count, for the log
	aborted := make(chan struct{})
	var wg sync.WaitGroup
	for w := range writers {
		acked[w], inDoubt[w] = map[string]time.Time{}, map[string]bool{}
		wg.Go(func() {
			// Each writer goes on until 20 appends in a row failed after
			// the abort: enough to see the writes in flight fail.
			for i, fails := 0, 0; fails < 20; i++ {
				id := fmt.Sprintf("w%d-%d", w, i)
				_, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byID("", ids[w]),
					Messages: []*sessiondv1.Message{textMsg(id, sessiondv1.Role_ROLE_USER, content)}})
				if err == nil {
					acked[w][id] = time.Now()
					fails = 0
					continue
				}
				inDoubt[w][id] = true
				code := status.Code(err)
				n, _ := failed.LoadOrStore(code, new(atomic.Int64))
				n.(*atomic.Int64).Add(1)
				if code != codes.Unavailable && code != codes.ResourceExhausted {
					t.Errorf("append %s failed with %v, want UNAVAILABLE or RESOURCE_EXHAUSTED", id, err)
					return
				}
				select {
				case <-aborted:
					fails++
				default:
				}
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	abortAt := time.Now()
	if err := os.WriteFile(filepath.Join("/sys/fs/ext4", dev, "trigger_fs_error"), []byte("1"), 0); err != nil {
		t.Fatalf("abort the filesystem: %v", err)
	}
	close(aborted)
	wg.Wait()
	failed.Range(func(k, v any) bool {
		t.Logf("appends that failed with %v: %d", k, v.(*atomic.Int64).Load())
		return true
	})

	// served loads every session and checks it against what its writer
	// was told. While the daemon that saw the abort runs, a session serves
	// exactly its acknowledged messages. After a restart it serves none that
	// was never sent and every one acknowledged; appends that failed (in
	// doubt) and are there are counted, for the log.
	served := func(when string, c sessiondv1.SessionStoreServiceClient, restarted bool) (doubtful int) {
		t.Helper()
		for w, id := range ids {
			_, ms, _, err := loadSession(ctx, c, &sessiondv1.LoadSessionRequest{Ref: byID("", id)})
			if err != nil {
				t.Errorf("%s: load writer %d's session: %v", when, w, err)
				continue
			}
			var unacked, missing []string
			seen := map[string]bool{}
			for _, m := range ms {
				seen[m.GetId()] = true
				_, ok := acked[w][m.GetId()]
				switch {
				case ok:
				case restarted && inDoubt[w][m.GetId()]:
					doubtful++
				default:
					unacked = append(unacked, m.GetId())
				}
			}
			for id := range acked[w] {
				if !seen[id] {
					missing = append(missing, id)
				}
			}
			if len(unacked) > 0 || len(missing) > 0 {
				t.Errorf("%s: writer %d's session serves %d messages: never acknowledged %v, acknowledged but missing %v (acknowledged %v after the abort; %d acknowledged)",
					when, w, len(ms), unacked, missing, ackedSince(acked[w], missing, abortAt), len(acked[w]))
			}
		}
		return doubtful
	}
	served("filesystem aborted", c, false)
	total := 0
	for _, a := range acked {
		total += len(a)
	}
	d.kill(t)
	remountExt4(t, mnt, dev)
	d = restartDaemon(t, d)
	doubtful := served("after repair and restart", d.client(t), true)
	t.Logf("%d appends acknowledged, all kept; after repair and restart, %d failed appends were there (in doubt)", total, doubtful)
	d.kill(t)
}

// ackedSince returns how long after abortAt each of ids was acknowledged.
func ackedSince(acked map[string]time.Time, ids []string, abortAt time.Time) []time.Duration {
	out := make([]time.Duration, len(ids))
	for i, id := range ids {
		out[i] = acked[id].Sub(abortAt).Round(100 * time.Microsecond)
	}
	return out
}
