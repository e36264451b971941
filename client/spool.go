package client

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// A spool file keeps what one handle has not saved yet (WithSpool); its
// format is in the package documentation.
const (
	spoolMagic  = "SDSPOOL1"
	spoolHeader = len(spoolMagic) + 8
	spoolExt    = ".spool"
	// spoolTempAge: a temporary file older than this is left from a crashed
	// write (a live write renames its file within milliseconds) and is
	// removed by the next Open. It never holds anything the spool lacks: the
	// write it belonged to had not returned.
	spoolTempAge = time.Minute
)

// Spool flags.
const (
	// spoolReplace: the messages replace the stored ones. No handle writes
	// it; Open keeps such a file aside (".conflict") rather than append its
	// messages.
	spoolReplace  = 1 << iota
	spoolSummary  // the summary is unsaved
	spoolMetadata // the metadata is unsaved
)

var spoolCRC = crc32.MakeTable(crc32.Castagnoli)

// spoolState is what a spool file holds.
type spoolState struct {
	session *sessiondv1.Session // id, namespace, revision, summary, metadata, messages
	flags   uint64
}

func encodeSpool(st spoolState) ([]byte, error) {
	sess, err := proto.MarshalOptions{Deterministic: true}.Marshal(st.session)
	if err != nil {
		return nil, errorf("encode spool: %w", err)
	}
	var payload []byte
	payload = protowire.AppendTag(payload, 1, protowire.BytesType)
	payload = protowire.AppendBytes(payload, sess)
	payload = protowire.AppendTag(payload, 2, protowire.VarintType)
	payload = protowire.AppendVarint(payload, st.flags)
	if uint64(len(payload)) > 1<<32-1 {
		return nil, errorf("encode spool: %d bytes is over the 4 GiB a spool file holds", len(payload))
	}
	out := make([]byte, 0, spoolHeader+len(payload))
	out = append(out, spoolMagic...)
	out = binary.LittleEndian.AppendUint32(out, uint32(len(payload)))
	out = binary.LittleEndian.AppendUint32(out, crc32.Checksum(payload, spoolCRC))
	return append(out, payload...), nil
}

// errSpoolDamaged marks a spool file that fails its checks.
var errSpoolDamaged = errors.New("damaged")

// decodeSpool checks and decodes a spool file. Anything short, torn, or with
// a wrong checksum is errSpoolDamaged; it never panics.
func decodeSpool(b []byte) (spoolState, error) {
	var st spoolState
	if len(b) < spoolHeader || string(b[:len(spoolMagic)]) != spoolMagic {
		return st, errorf("%w: not a spool file (bad header)", errSpoolDamaged)
	}
	n := binary.LittleEndian.Uint32(b[len(spoolMagic):])
	sum := binary.LittleEndian.Uint32(b[len(spoolMagic)+4:])
	payload := b[spoolHeader:]
	if uint64(len(payload)) != uint64(n) {
		return st, errorf("%w: %d payload bytes, header says %d (torn write)", errSpoolDamaged, len(payload), n)
	}
	if crc32.Checksum(payload, spoolCRC) != sum {
		return st, errorf("%w: checksum mismatch", errSpoolDamaged)
	}
	var sess []byte
	seen := false
	for len(payload) > 0 {
		// ConsumeField checks the whole field, so the reads of its value
		// below cannot fail; a field from a newer SDK is skipped.
		num, typ, n := protowire.ConsumeField(payload)
		if n < 0 {
			return st, errorf("%w: %w", errSpoolDamaged, protowire.ParseError(n))
		}
		_, _, tag := protowire.ConsumeTag(payload)
		switch value := payload[tag:n]; {
		case num == 1 && typ == protowire.BytesType:
			sess, _ = protowire.ConsumeBytes(value)
			seen = true
		case num == 2 && typ == protowire.VarintType:
			st.flags, _ = protowire.ConsumeVarint(value)
		}
		payload = payload[n:]
	}
	if !seen {
		return st, errorf("%w: no session", errSpoolDamaged)
	}
	st.session = &sessiondv1.Session{}
	if err := proto.Unmarshal(sess, st.session); err != nil {
		return st, errorf("%w: %w", errSpoolDamaged, err)
	}
	ids := make(map[string]struct{}, len(st.session.GetMessages()))
	for i, m := range st.session.GetMessages() {
		if m.GetId() == "" || m.GetRole() == sessiondv1.Role_ROLE_UNSPECIFIED {
			return st, errorf("%w: message %d has no id or role", errSpoolDamaged, i)
		}
		if _, dup := ids[m.GetId()]; dup {
			return st, errorf("%w: message id %q repeats", errSpoolDamaged, m.GetId())
		}
		ids[m.GetId()] = struct{}{}
	}
	return st, nil
}

// spoolPrefix is the start of the names of every spool file of one session.
func spoolPrefix(ns, id string) string {
	name := id
	if !looksLikeUUID(id) {
		name = fmt.Sprintf("id-%x", id) // keep path separators out of the name
	}
	return fmt.Sprintf("%s.ns-%x.", name, ns)
}

// spoolFiles lists the spool files of one session in dir, oldest first, and
// removes temporary files left by crashed writes.
func spoolFiles(dir, ns, id string) ([]string, error) {
	prefix := spoolPrefix(ns, id)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	type file struct {
		path string
		mod  time.Time
	}
	var files []file
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, prefix) || !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		p := filepath.Join(dir, name)
		switch {
		case strings.HasSuffix(name, spoolExt):
			files = append(files, file{p, info.ModTime()})
		case strings.HasSuffix(name, ".tmp") && time.Since(info.ModTime()) > spoolTempAge:
			_ = os.Remove(p)
		}
	}
	slices.SortFunc(files, func(a, b file) int { return a.mod.Compare(b.mod) })
	out := make([]string, len(files))
	for i, f := range files {
		out[i] = f.path
	}
	return out, nil
}

// writeFileAtomic replaces path with data: a temporary file in the same
// folder is written, fsync'd and renamed over path, then the folder is
// fsync'd so that the rename survives a crash.
func writeFileAtomic(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	if err := f.Chmod(0o600); err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	return syncDir(dir)
}

// removeDurably removes path (a missing file is fine) and fsyncs its folder.
func removeDurably(path string) error {
	if err := os.Remove(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	return syncDir(filepath.Dir(path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// handleState is the part of a Handle that Append and the Set* methods
// change, so that they can undo a change the spool could not record.
type handleState struct {
	entries                     []entry
	ids                         map[string]struct{}
	synced                      int
	summary                     string
	metadata                    map[string]string
	summaryDirty, metadataDirty bool
}

// snapshotLocked returns the fields restoreLocked puts back. Called with mu
// held.
func (h *Handle) snapshotLocked() handleState {
	return handleState{h.entries, h.ids, h.synced,
		h.summary, h.metadata, h.summaryDirty, h.metadataDirty}
}

func (h *Handle) restoreLocked(s handleState) {
	h.entries, h.ids, h.synced = s.entries, s.ids, s.synced
	h.summary, h.metadata, h.summaryDirty, h.metadataDirty = s.summary, s.metadata, s.summaryDirty, s.metadataDirty
}

// spoolStateLocked returns what the handle's spool must hold, or nil when
// nothing is unsaved. Called with mu held.
func (h *Handle) spoolStateLocked() *spoolState {
	var flags uint64
	sess := &sessiondv1.Session{Id: h.id, Namespace: h.c.namespace, Revision: h.revision}
	sess.Messages = savedOf(h.entries[h.synced:])
	if h.summaryDirty {
		flags |= spoolSummary
		sess.Summary = h.summary
	}
	if h.metadataDirty {
		flags |= spoolMetadata
		sess.Metadata = h.metadata
	}
	if len(sess.Messages) == 0 && flags == 0 {
		return nil
	}
	return &spoolState{session: sess, flags: flags}
}

// syncSpoolLocked makes the handle's spool file hold what is unsaved, or
// removes it when nothing is. Called with mu held.
func (h *Handle) syncSpoolLocked() error {
	if h.spoolPath == "" {
		return nil
	}
	st := h.spoolStateLocked()
	if st == nil {
		if !h.spooled {
			return nil
		}
		if err := removeDurably(h.spoolPath); err != nil {
			return errorf("%w: remove %s: %w", ErrSpool, h.spoolPath, err)
		}
		h.spooled = false
		return nil
	}
	data, err := encodeSpool(*st)
	if err == nil {
		err = writeFileAtomic(h.spoolPath, data)
	}
	if err != nil {
		return errorf("%w: write %s: %w", ErrSpool, h.spoolPath, err)
	}
	h.spooled = true
	return nil
}

// refreshSpoolLocked is syncSpoolLocked after a save, a Reload or a Rewind:
// a failure leaves the file holding more than is unsaved (messages the
// daemon has, which the next Open skips), never less, so it is logged, not
// returned. Called with mu held.
func (h *Handle) refreshSpoolLocked() {
	if err := h.syncSpoolLocked(); err != nil {
		h.c.conn.log.Warn("sessiond spool not updated", "session", h.id, "err", err)
	}
}

// SpoolPath returns the file that holds the handle's unsaved changes
// (WithSpool), or "" when there is none: no spool, or nothing unsaved.
func (h *Handle) SpoolPath() string {
	return locked(h, func() string {
		if !h.spooled {
			return ""
		}
		return h.spoolPath
	})
}

// replaySpools takes in the spool files that earlier handles on this
// session left in the spool folder, records them in this handle's own spool,
// removes them, and saves. Damaged or conflicting files are renamed aside
// and reported in the error, after the good ones are saved.
func (h *Handle) replaySpools(ctx context.Context) error {
	files, err := spoolFiles(h.opts.spoolDir, h.c.namespace, h.id)
	if err != nil {
		return errorf("client: open %s: %w: %w", h.id, ErrSpool, err)
	}
	if len(files) == 0 {
		return nil
	}
	h.saveMu.Lock()
	defer h.saveMu.Unlock()
	var problems, used []string
	h.mu.Lock()
	for _, f := range files {
		if f == h.spoolPath {
			continue
		}
		st, err := readSpool(f)
		if err == nil && (st.session.GetId() != h.id || st.session.GetNamespace() != h.c.namespace) {
			err = errorf("%w: it holds session %q of namespace %q", errSpoolDamaged,
				st.session.GetId(), st.session.GetNamespace())
		}
		if err == nil && st.flags&spoolReplace != 0 {
			problems = append(problems, quarantine(f, ".conflict", errorf(
				"%w: it replaces the messages of revision %d, which no save sends", ErrConflict, st.session.GetRevision())))
			continue
		}
		if errors.Is(err, errSpoolDamaged) {
			problems = append(problems, quarantine(f, ".damaged", err))
			continue
		}
		if err != nil {
			// Unreadable now (permissions, I/O): leave it for a later Open.
			problems = append(problems, err.Error())
			continue
		}
		h.takeSpoolLocked(st)
		used = append(used, f)
	}
	err = h.syncSpoolLocked()
	h.mu.Unlock()
	if err != nil {
		return errorf("client: open %s: %w", h.id, err)
	}
	for _, f := range used {
		if err := removeDurably(f); err != nil {
			// Left in place, it is sent again next time: a no-op then.
			h.c.conn.log.Warn("sessiond spool file not removed", "session", h.id, "file", f, "err", err)
		}
	}
	if err := h.saveLocked(ctx, false); err != nil {
		return errorf("client: open %s: send spooled messages (kept in %s): %w", h.id, h.spoolPath, err)
	}
	if len(problems) > 0 {
		return errorf("client: open %s: %w: %s", h.id, ErrSpool, strings.Join(problems, "; "))
	}
	return nil
}

// takeSpoolLocked adds a spool file's contents to the handle as unsaved
// changes: messages the handle holds already (by id) are left out. Called
// with mu held.
func (h *Handle) takeSpoolLocked(st spoolState) {
	for _, m := range st.session.GetMessages() {
		if _, ok := h.ids[m.GetId()]; ok {
			continue
		}
		h.entries = append(h.entries, entry{m: m})
		h.ids[m.GetId()] = struct{}{}
	}
	if st.flags&spoolSummary != 0 {
		h.summary, h.summaryDirty = st.session.GetSummary(), true
	}
	if st.flags&spoolMetadata != 0 {
		h.metadata, h.metadataDirty = st.session.GetMetadata(), true
	}
}

func readSpool(path string) (spoolState, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return spoolState{}, errorf("read spool %s: %w", path, err)
	}
	return decodeSpool(b)
}

// quarantine renames a spool file that must not be sent to path+suffix, so
// that it is kept for a person to inspect and no longer blocks Open, and
// describes what happened.
func quarantine(path, suffix string, cause error) string {
	if err := os.Rename(path, path+suffix); err != nil {
		return fmt.Sprintf("spool file %s: %v; not sent, and not renamed aside: %v", path, cause, err)
	}
	_ = syncDir(filepath.Dir(path))
	return fmt.Sprintf("spool file %s: %v; not sent, kept as %s", path, cause, path+suffix)
}
