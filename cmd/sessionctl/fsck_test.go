package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

type finding struct {
	Path     string `json:"path"`
	Kind     string `json:"kind"`
	Detail   string `json:"detail"`
	Repaired bool   `json:"repaired"`
}

// fsckSummary is the last line of fsck --json.
type fsckSummary struct {
	DataDir  string `json:"data_dir"`
	Sessions int    `json:"sessions"`
	Problems int    `json:"problems"`
	Repaired int    `json:"repaired"`
	ExitCode int    `json:"exit_code"`
}

// fsckJSON runs fsck --json and returns its exit code and findings. It
// checks that the output is JSON lines ending with a summary that agrees
// with the findings and the exit code.
func fsckJSON(t *testing.T, args ...string) (int, []finding, result) {
	t.Helper()
	r := ctlIn(t, strings.NewReader(""), append([]string{"--json", "fsck"}, args...)...)
	var fs []finding
	var sum *fsckSummary
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if sum != nil {
			t.Fatalf("fsck --json: line after the summary: %q", line)
		}
		var l struct {
			finding
			Summary *fsckSummary `json:"summary"`
		}
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("fsck --json line %q: %v", line, err)
		}
		if l.Summary != nil {
			sum = l.Summary
			continue
		}
		fs = append(fs, l.finding)
	}
	if r.code <= exitFsckLeft {
		repaired := 0
		for _, f := range fs {
			if f.Repaired {
				repaired++
			}
		}
		if sum == nil || sum.Problems != len(fs) || sum.Repaired != repaired || sum.ExitCode != r.code {
			t.Fatalf("fsck --json: summary %+v does not match %d findings (%d repaired) and exit %d\n%v", sum, len(fs), repaired, r.code, r)
		}
	}
	return r.code, fs, r
}

// sessionFiles lists the regular files in a session's folder, found by its
// id anywhere under the data dir, so the test does not depend on more of
// the layout than "one folder per session, named by its id".
func sessionFiles(t *testing.T, dataDir, id string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(dataDir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && filepath.Base(filepath.Dir(path)) == id {
			files = append(files, path)
		}
		return nil
	})
	if err != nil || len(files) == 0 {
		t.Fatalf("no files of session %s under %s: %v", id, dataDir, err)
	}
	return files
}

// corruptMiddle flips bytes in the middle of the session's biggest file:
// damage a checksum must catch.
func corruptMiddle(t *testing.T, dataDir, id string) string {
	t.Helper()
	files := sessionFiles(t, dataDir, id)
	sort.Slice(files, func(i, j int) bool { return fileSize(t, files[i]) > fileSize(t, files[j]) })
	path := files[0]
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	mid := len(data) / 2
	for i := mid; i < mid+8 && i < len(data); i++ {
		data[i] ^= 0xa5
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// journalOf returns the path of the session's journal.
func journalOf(t *testing.T, dataDir, id string) string {
	t.Helper()
	for _, f := range sessionFiles(t, dataDir, id) {
		if strings.HasPrefix(filepath.Base(f), "journal") {
			return f
		}
	}
	t.Fatalf("session %s has no journal file", id)
	return ""
}

// corruptJournalFrame flips a byte inside the payload of the journal's
// frame number n (0 is its header), with valid frames after it: damage,
// not a torn tail. The package doc of storage/file gives the framing.
func corruptJournalFrame(t *testing.T, dataDir, id string, n int) string {
	t.Helper()
	path := journalOf(t, dataDir, id)
	data := readFile(t, path)
	off := 0
	for range n {
		off += (8 + int(binary.LittleEndian.Uint32(data[off:])) + 7) &^ 7
	}
	if size := int(binary.LittleEndian.Uint32(data[off:])); size < 16 {
		t.Fatalf("journal %s: frame %d is %d bytes; the layout is not what the test expects", path, n, size)
	}
	data[off+8+12] ^= 0x5a
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// tearJournal writes half a record after the last record of the session's
// journal, as a crash in the middle of an append would: a frame header
// announcing more bytes than follow, then some of them. The package doc of
// storage/file gives the framing (length, CRC, payload, padding to 8; zeros
// after the data, where space was reserved ahead).
func tearJournal(t *testing.T, dataDir, id string) string {
	t.Helper()
	var path string
	for _, f := range sessionFiles(t, dataDir, id) {
		if strings.HasPrefix(filepath.Base(f), "journal") {
			path = f
		}
	}
	if path == "" {
		t.Fatalf("session %s has no journal file", id)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Walk the frames to the end of the data.
	off := 0
	for off+8 <= len(data) {
		n := int(binary.LittleEndian.Uint32(data[off:]))
		if n == 0 {
			break
		}
		off += (8 + n + 7) &^ 7
	}
	if off > len(data) {
		t.Fatalf("journal %s: frames run past its end; the layout is not what the test expects", path)
	}
	half := make([]byte, 8+40)
	binary.LittleEndian.PutUint32(half[0:], 4000)       // announces 4000 bytes...
	binary.LittleEndian.PutUint32(half[4:], 0xdeadbeef) // ...with a checksum they will not have
	half[8] = 5                                         // a commit frame's type
	for i := 9; i < len(half); i++ {
		half[i] = byte(i * 7)
	}
	// ...of which only 40 arrive before the crash.
	if off+len(half) > len(data) {
		data = append(data[:off], half...)
	} else {
		copy(data[off:], half)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestFsck(t *testing.T) {
	dir := t.TempDir()
	d := startDaemon(t, dir, "")
	ctx := t.Context()
	ref := func(ns, id string) *sessiondv1.SessionRef {
		return &sessiondv1.SessionRef{Namespace: ns, Key: &sessiondv1.SessionRef_Id{Id: id}}
	}
	appendSome := func(ns, id string, n int) {
		t.Helper()
		for i := range n {
			if _, err := d.client.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: ref(ns, id),
				Messages: []*sessiondv1.Message{text(user, id[:8]+"-appended-"+string(rune('a'+i)), strings.Repeat("appended text ", 20))}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	type sess struct{ ns, id string }
	var healthy []sess
	h1 := d.create(&sessiondv1.CreateSessionRequest{Alias: "healthy-1", Messages: richMessages()})
	h2 := d.create(&sessiondv1.CreateSessionRequest{Alias: "healthy-2"})
	appendSome("", h2.GetId(), 3)
	h3 := d.create(&sessiondv1.CreateSessionRequest{Namespace: "team", Alias: "healthy-3", Messages: richMessages()})
	appendSome("team", h3.GetId(), 2)
	healthy = append(healthy, sess{"", h1.GetId()}, sess{"", h2.GetId()}, sess{"team", h3.GetId()})
	torn := d.create(&sessiondv1.CreateSessionRequest{Alias: "torn", Messages: richMessages()})
	appendSome("", torn.GetId(), 3)
	corrupt := d.create(&sessiondv1.CreateSessionRequest{Alias: "corrupt", Messages: richMessages()})
	// Appends of their own, bigger than the snapshot: the damage lands in
	// one of them, and repair keeps the rest.
	appendSome("", corrupt.GetId(), 8)
	corruptBefore, err := d.load("", corrupt.GetId())
	if err != nil {
		t.Fatal(err)
	}

	originals := map[string]*sessiondv1.Session{}
	for _, s := range append(healthy, sess{"", torn.GetId()}) {
		got, err := d.load(s.ns, s.id)
		if err != nil {
			t.Fatal(err)
		}
		originals[s.id] = got
	}

	// While the daemon holds the dir, fsck refuses and says why.
	r := ctlIn(t, strings.NewReader(""), "fsck", dir)
	// 8, as e2fsck's operational error: 1 would read as "damage repaired".
	if r.code != exitFsckOperational || !strings.Contains(r.stderr, "running sessiond") || !strings.Contains(r.stderr, "stop") {
		t.Fatalf("fsck on a dir in use: want exit 8 saying to stop the daemon, got %v", r)
	}
	checkOneLineError(t, r)
	d.stop()

	r = ctlIn(t, strings.NewReader(""), "fsck", dir)
	if r.code != 0 || !strings.Contains(r.stdout, "5 sessions checked, no damage found") {
		t.Fatalf("fsck of a clean dir: %v", r)
	}
	// A clean check in JSON is one summary line, exit 0.
	if code, findings, r := fsckJSON(t, dir); code != exitFsckClean || len(findings) != 0 || !strings.Contains(r.stdout, `"sessions":5`) {
		t.Fatalf("fsck --json of a clean dir: %v", r)
	}

	corruptPath := corruptJournalFrame(t, dir, corrupt.GetId(), 3)
	corruptedBytes := readFile(t, corruptPath)
	tornPath := tearJournal(t, dir, torn.GetId())
	rel := func(p string) string { r, _ := filepath.Rel(dir, p); return r }

	// Found, not yet repaired: exit 4, both files named with their kind.
	code, findings, r := fsckJSON(t, dir)
	if code != exitFsckLeft {
		t.Fatalf("fsck after damage: want exit 4, got %v", r)
	}
	wantKinds := map[string]string{rel(corruptPath): "corrupt", rel(tornPath): "truncated"}
	got := map[string]string{}
	for _, f := range findings {
		got[f.Path] = f.Kind
		if f.Repaired {
			t.Errorf("fsck without --repair repaired %v", f)
		}
		for _, h := range healthy {
			if strings.Contains(f.Path, h.id) {
				t.Errorf("fsck blames a healthy session: %v", f)
			}
		}
	}
	if diff := cmp.Diff(wantKinds, got); diff != "" {
		t.Errorf("fsck findings by path (-want +got):\n%s\n%v", diff, r)
	}
	// The table for people names them too, and the hint says what to do.
	r = ctlIn(t, strings.NewReader(""), "fsck", dir)
	if r.code != exitFsckLeft || !strings.Contains(r.stdout, "corrupt") || !strings.Contains(r.stdout, rel(tornPath)) || !strings.Contains(r.stderr, "--repair") {
		t.Errorf("fsck table: %v", r)
	}

	code, findings, r = fsckJSON(t, dir, "--repair")
	if code != exitFsckCorrected || len(findings) != 2 {
		t.Fatalf("fsck --repair: want exit 1 (errors corrected) and the 2 findings, got %v", r)
	}
	for _, f := range findings {
		if !f.Repaired {
			t.Errorf("fsck --repair left %v", f)
		}
	}
	if r := ctlIn(t, strings.NewReader(""), "fsck", dir); r.code != 0 {
		t.Errorf("fsck after --repair: want a clean dir, got %v", r)
	}

	// The daemon starts and serves every other session as it was; the torn
	// session keeps everything before its torn tail, which was all of it.
	d = startDaemon(t, dir, "")
	for id, want := range originals {
		got, err := d.load(want.GetNamespace(), id)
		if err != nil {
			t.Errorf("session %s after repair: %v", id, err)
			continue
		}
		if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
			t.Errorf("session %s after repair (-before +after):\n%s", id, diff)
		}
	}
	// The damaged session keeps every intact message, in order, at a
	// revision above the one it had; the damaged files are in quarantine.
	salvaged, err := d.load("", corrupt.GetId())
	if err != nil {
		t.Fatalf("the damaged session after repair: %v", err)
	}
	if salvaged.GetAlias() != "corrupt" || salvaged.GetRevision() <= corruptBefore.GetRevision() ||
		len(salvaged.GetMessages()) == 0 || len(salvaged.GetMessages()) >= len(corruptBefore.GetMessages()) {
		t.Errorf("salvaged session: alias %q, revision %d (was %d), %d of %d messages", salvaged.GetAlias(), salvaged.GetRevision(),
			corruptBefore.GetRevision(), len(salvaged.GetMessages()), len(corruptBefore.GetMessages()))
	}
	j := 0
	for _, m := range salvaged.GetMessages() {
		for j < len(corruptBefore.GetMessages()) && !proto.Equal(corruptBefore.GetMessages()[j], m) {
			j++
		}
		if j == len(corruptBefore.GetMessages()) {
			t.Errorf("salvaged message %v was not in the session, or is out of order", m)
			break
		}
	}
	quarantined, _ := filepath.Glob(filepath.Join(dir, "quarantine", "*", rel(corruptPath)))
	if len(quarantined) != 1 {
		t.Fatalf("no copy of the damaged %s in quarantine/: %v", rel(corruptPath), quarantined)
	}
	if !bytes.Equal(readFile(t, quarantined[0]), corruptedBytes) {
		t.Errorf("the quarantined copy is not the damaged original")
	}
	r = must(t, d.ctl("ls"))
	for _, alias := range []string{"healthy-1", "healthy-2", "torn"} {
		if !strings.Contains(r.stdout, alias) {
			t.Errorf("ls after repair lacks %s:\n%s", alias, r.stdout)
		}
	}
}

func TestFsckNotADataDir(t *testing.T) {
	for name, dir := range map[string]string{"missing": filepath.Join(t.TempDir(), "nope"), "empty": t.TempDir()} {
		r := ctlIn(t, strings.NewReader(""), "fsck", dir)
		if r.code != exitFsckOperational {
			t.Errorf("%s: want exit 8 (not checked), got %v", name, r)
		}
		checkOneLineError(t, r)
	}
}

// TestFsckRestore: a session that --repair moved to quarantine/ whole (its
// snapshot header damaged after a crash, so nothing names its metadata)
// comes back with --restore: every message, under its id. fsck refuses
// while the daemon holds the dir, and says what it restored.
func TestFsckRestore(t *testing.T) {
	dir := t.TempDir()
	d := startDaemon(t, dir, "")
	lost := d.create(&sessiondv1.CreateSessionRequest{Alias: "lost", Messages: richMessages()})
	if _, err := d.client.AppendMessages(t.Context(), &sessiondv1.AppendMessagesRequest{Ref: &sessiondv1.SessionRef{Key: &sessiondv1.SessionRef_Id{Id: lost.GetId()}},
		Messages: []*sessiondv1.Message{text(user, "appended", "in the journal, with its revision")}}); err != nil {
		t.Fatal(err)
	}
	before, err := d.load("", lost.GetId())
	if err != nil {
		t.Fatal(err)
	}
	d.stop()
	snap := filepath.Join(dir, "sessions", lost.GetId(), "snapshot")
	data := readFile(t, snap)
	data[20] ^= 0x5a // in the header frame
	if err := os.WriteFile(snap, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "index", "clean")); err != nil { // as after a crash
		t.Fatal(err)
	}
	if code, findings, r := fsckJSON(t, dir, "--repair"); code != exitFsckCorrected || len(findings) != 1 || !strings.Contains(findings[0].Detail, "moved to quarantine/") {
		t.Fatalf("fsck --repair of a session nothing names: want it moved to quarantine/, got %v", r)
	}

	d = startDaemon(t, dir, "")
	if _, err := d.load("", lost.GetId()); status.Code(err) != codes.NotFound {
		t.Fatalf("quarantined session: load = %v, want NOT_FOUND", err)
	}
	r := ctlIn(t, strings.NewReader(""), "fsck", "--restore", lost.GetId(), dir)
	if r.code != exitFsckOperational || !strings.Contains(r.stderr, "running sessiond") {
		t.Fatalf("fsck --restore on a dir in use: want exit 8 saying to stop the daemon, got %v", r)
	}
	checkOneLineError(t, r)
	d.stop()

	r = ctlIn(t, strings.NewReader(""), "fsck", "--restore", lost.GetId(), dir)
	if r.code != 0 || !strings.Contains(r.stdout, "restored session "+lost.GetId()+" from quarantine/") ||
		!strings.Contains(r.stdout, fmt.Sprintf("salvaged %d messages", len(before.GetMessages()))) {
		t.Fatalf("fsck --restore: %v", r)
	}
	if r := ctlIn(t, strings.NewReader(""), "fsck", dir); r.code != 0 {
		t.Errorf("fsck after --restore: want a clean dir, got %v", r)
	}
	r = ctlIn(t, strings.NewReader(""), "fsck", "--restore", lost.GetId(), dir)
	if r.code != exitFsckOperational || !strings.Contains(r.stderr, "in service") {
		t.Errorf("fsck --restore of a session in service: want exit 8 saying so, got %v", r)
	}

	d = startDaemon(t, dir, "")
	got, err := d.load("", lost.GetId())
	if err != nil {
		t.Fatalf("restored session: %v", err)
	}
	if got.GetRevision() <= before.GetRevision() {
		t.Errorf("restored session at revision %d; want above %d", got.GetRevision(), before.GetRevision())
	}
	if diff := cmp.Diff(before.GetMessages(), got.GetMessages(), protocmp.Transform()); diff != "" {
		t.Errorf("restored messages (-before +after):\n%s", diff)
	}
}
