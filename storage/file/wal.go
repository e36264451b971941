package file

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/sessiond/sessiond/storage"
)

// The write-ahead log (WAL), shared by all sessions, makes every change
// durable: its commit pipeline (walCommit) lets concurrent writers share one
// flush, and its full segments are sealed, retired and recycled in the
// background (sealer). The package doc ("Writes", "Damage and recovery")
// describes both, and the segment format.
const (
	walDir        = "wal"
	walPref       = "wal-"
	walFreePref   = "free-"
	walDamagedExt = ".damaged"
	// walMaxSpares bounds the retired segments kept for reuse.
	walMaxSpares = 2
	// walBatchHead is the bytes of a batch's payload before its records:
	// type, segment sequence number, salt. The records start one byte past
	// an 8-byte boundary (see walScan).
	walBatchHead = 1 + 8 + 8
	// walEndMark is the zero frame header written after each flush.
	walEndMark = 8
	// walSegmentBytes is the WAL segment size past which a new segment is
	// started. While checkpoints keep up, start-up replays at most about
	// 1+walMaxSealing+walMaxUncovered segments, so this bounds the work of
	// an open after a crash; a smaller segment means more frequent journal
	// syncs in the background.
	walSegmentBytes = 32 << 20
	// walMaxSealing is how many full segments may wait for the sealer
	// before the leader waits for it.
	walMaxSealing      = 2
	walRecHeader       = 40
	walKindFrame  byte = 1 // a journal commit frame at an offset
	walKindDrop   byte = 2 // the session was deleted: its earlier records are void
	walKindTouch  byte = 3 // the session's files change without a journal frame (a save, a rewind)
	// walMaxUncovered is how many synced segments may wait for a
	// checkpoint to cover them before one is asked for.
	walMaxUncovered = 2
	// walBufKeep bounds the encode buffer the leader keeps between flushes.
	walBufKeep = 4 << 20
)

// walRec is one WAL record. Its encoding:
//
//	kind (1) | 3 zero bytes | CRC-32C of the other 36 bytes (4) | session id (16) | generation (8) | offset (8)
//	kind 1: followed by the journal frame (self-delimiting: its own length and checksum)
//	kinds 2 (drop) and 3 (touch): the header alone; generation and offset are zero
//
// The header has its own checksum so that a damaged frame can still be
// attributed to its session.
type walRec struct {
	kind  byte
	id    string
	gen   uint64
	off   int64
	frame []byte
}

func walHeadCRC(h []byte) uint32 {
	return crc32.Update(crc32.Checksum(h[0:4], castagnoli), castagnoli, h[8:walRecHeader])
}

// appendWALRec encodes r at the end of dst, the header in place.
func appendWALRec(dst []byte, r walRec) []byte {
	n := len(dst)
	dst = append(dst, make([]byte, walRecHeader)...)
	h := dst[n:]
	h[0] = r.kind
	u := uuid.MustParse(r.id)
	copy(h[8:24], u[:])
	binary.LittleEndian.PutUint64(h[24:], r.gen)
	binary.LittleEndian.PutUint64(h[32:], uint64(r.off))
	binary.LittleEndian.PutUint32(h[4:], walHeadCRC(h))
	return append(dst, r.frame...)
}

// parseWALRecs decodes the records of a WAL batch (its payload after the
// type byte). good are the records whose header and frame pass their
// checksums; lost are records whose header does but whose frame does not
// (the session is known, its change is not). clean is false when the
// decoding had to stop before the end (a damaged header: what follows
// cannot be attributed).
func parseWALRecs(b []byte) (good, lost []walRec, clean bool) {
	for len(b) > 0 {
		if len(b) < walRecHeader {
			return good, lost, false
		}
		h := b[:walRecHeader]
		if walHeadCRC(h) != binary.LittleEndian.Uint32(h[4:]) || (h[0] != walKindFrame && h[0] != walKindDrop && h[0] != walKindTouch) {
			return good, lost, false
		}
		r := walRec{kind: h[0], id: idString(h[8:24]), gen: binary.LittleEndian.Uint64(h[24:]), off: int64(binary.LittleEndian.Uint64(h[32:]))}
		b = b[walRecHeader:]
		if r.kind == walKindFrame {
			if len(b) < frameHeader {
				return good, append(lost, r), false
			}
			p, next, ok := readFrame(b, 0)
			if !ok || p[0] != typeCommit {
				lost = append(lost, r)
				n := framedLen(int(binary.LittleEndian.Uint32(b)))
				if n > len(b) || n <= frameHeader {
					return good, lost, false
				}
				b = b[n:]
				continue
			}
			r.frame = b[:next:next]
			b = b[next:]
		}
		good = append(good, r)
	}
	return good, lost, true
}

// encodeWALHead encodes a segment's header frame: its sequence number and
// salt, which its batches repeat.
func encodeWALHead(seq, salt uint64) []byte {
	return appendFrame(nil, putU64(putU64([]byte{typeWALHead}, seq), salt))
}

// walHeadLen is the length of a segment's header frame.
var walHeadLen = len(encodeWALHead(0, 0))

// walIdent is what a segment's batches carry to be its own: the segment's
// sequence number and salt, as its header states them.
type walIdent struct {
	seq, salt uint64
}

// batchAt returns the batch of this segment at offset at of data, if there
// is one. The segment's identity is tested before the checksum, so that a
// reused segment's stale bytes cost little to pass over.
func (id walIdent) batchAt(data []byte, at int) ([]byte, int, bool) {
	h := at + frameHeader
	if h+walBatchHead > len(data) || data[h] != typeWALSegBatch ||
		binary.LittleEndian.Uint64(data[h+1:]) != id.seq || binary.LittleEndian.Uint64(data[h+9:]) != id.salt {
		return nil, 0, false
	}
	p, next, ok := readFrame(data, at)
	if !ok || p[0] != typeWALSegBatch || len(p) < walBatchHead {
		return nil, 0, false
	}
	return p, next, true
}

// nextBatch returns the offset of the first batch of this segment past off
// at a multiple of 8 bytes from it, or -1 if there is none. It looks for
// the bytes every batch of the segment starts its payload with (type,
// sequence number, salt), which a vectorised search passes over stale or
// zero bytes far faster than a test at every 8 bytes.
func (id walIdent) nextBatch(data []byte, off int) int {
	var sig [walBatchHead]byte
	sig[0] = typeWALSegBatch
	binary.LittleEndian.PutUint64(sig[1:], id.seq)
	binary.LittleEndian.PutUint64(sig[9:], id.salt)
	for from := off + 8 + frameHeader; from <= len(data); {
		i := bytes.Index(data[from:], sig[:])
		if i < 0 {
			return -1
		}
		y := from + i - frameHeader
		if (y-off)%8 == 0 {
			if _, _, ok := id.batchAt(data, y); ok {
				return y
			}
		}
		from += i + 1
	}
	return -1
}

// walRegion is a damaged byte range of a segment.
type walRegion struct{ off, end int }

// walScan splits a segment into its header and batches like scanFrames,
// but goes on past damage. A frame that is not a batch of this segment,
// followed (at an 8-byte boundary) by a batch of this segment, is a
// damaged region, and scanning resumes at that batch; with no batch of
// this segment after it, it is the end of the log. Records inside a batch
// start one byte past an 8-byte boundary, so an embedded journal frame is
// never taken for a batch.
//
// At the end of the log, a segment holds the end mark (8 zero bytes) that
// its last flush wrote, and past it zeros (a new file) or the batches of
// the file's earlier segment (a reused one), which are not this segment's.
// Anything but the end mark there is the start of a flush that did not land
// whole (torn: never acknowledged). A segment whose header is damaged takes
// the identity of the first batch found that names its sequence number seq.
//
// offs holds each frame's offset in data: a batch's offset is its
// records' position in the log.
func walScan(data []byte, seq uint64) (frames [][]byte, offs []int, bad []walRegion, end int, torn bool) {
	var id walIdent
	off := 0
	if p, next, ok := readFrame(data, 0); ok && p[0] == typeWALHead && len(p) == 1+8+8 {
		r := reader{b: p[1:]}
		id.seq = r.u64("segment sequence")
		id.salt = r.u64("segment salt")
		frames, offs = append(frames, p), append(offs, 0)
		off = next
	} else {
		id = identify(data, seq)
	}
	for off < len(data) {
		if allZero(data[off:]) {
			return frames, offs, bad, off, false
		}
		if p, next, ok := id.batchAt(data, off); ok {
			frames, offs = append(frames, p), append(offs, off)
			off = next
			continue
		}
		y := id.nextBatch(data, off)
		if y < 0 {
			return frames, offs, bad, off, off+walEndMark > len(data) || !allZero(data[off:off+walEndMark])
		}
		bad = append(bad, walRegion{off, y})
		off = y
	}
	return frames, offs, bad, off, false
}

// identify finds the identity of a segment whose header is damaged: the
// salt of the first batch that names the segment's sequence number.
func identify(data []byte, seq uint64) walIdent {
	for at := 0; at+frameHeader <= len(data); at += 8 {
		p, _, ok := readFrame(data, at)
		if ok && p[0] == typeWALSegBatch && len(p) >= walBatchHead && binary.LittleEndian.Uint64(p[1:]) == seq {
			return walIdent{seq: seq, salt: binary.LittleEndian.Uint64(p[9:])}
		}
	}
	return walIdent{seq: seq}
}

// walReq is one record waiting for the commit pipeline.
type walReq struct {
	rec     walRec
	j       *journal // the session journal a frame record's frame goes to
	appends int      // appends it makes durable, for the flush record
	// wake is signalled once per commit: when the flush covering the
	// request is done (done and err are set before), or to hand it the
	// lead. The leader touches a request no more once it signalled it.
	wake chan struct{}
	done bool
	err  error
}

// wal is the commit pipeline and the current segment.
type wal struct {
	// mu guards queue, spare, flushing and closed; cond signals that flushing
	// ended. A request's done and err are written by the leader before it
	// signals the request's wake channel.
	mu       sync.Mutex
	cond     *sync.Cond
	queue    []*walReq
	spare    []*walReq // the last batch's array, emptied: the next queue
	flushing bool
	closed   bool
	gather   walGatherState // see gather.go

	// Owned by the leader (the one that set flushing), and by Open and
	// Close when no flush can run.
	j       *journal              // the current segment; nil until the first flush needs one
	seq     uint64                // its sequence number (the last one used when j is nil)
	salt    uint64                // its salt
	touched map[*journal]struct{} // the session journals the segment has frames for
	buf     []byte

	// endMu guards end: where the next flush writes, every flush before
	// it durable. A checkpoint's position (see checkpoint.go).
	endMu sync.Mutex
	end   walPos

	// sealMu guards pending, synced, covered, stop and spares; sealCond
	// signals changes to pending, synced and covered.
	sealMu   sync.Mutex
	sealCond *sync.Cond
	pending  []sealJob // full segments whose journals are to be synced
	synced   []sealJob // segments whose journals are synced, waiting for a checkpoint to cover them
	// covered: the segments numbered below it are before a durable
	// checkpoint's position, and may be retired once synced.
	covered  uint64
	stop     bool
	sealDone chan struct{}
	// spares are the paths of retired segments kept for reuse, oldest
	// first: the sealer adds them, the leader takes them.
	spares []string
}

// walPos is a position in the log: offset off of segment seq. A record's
// position is its batch's offset.
type walPos struct {
	seq uint64
	off int64
}

// atOrAfter reports whether the record of segment seq at offset off comes
// at or after p.
func (p walPos) atOrAfter(seq uint64, off int64) bool {
	return seq > p.seq || (seq == p.seq && off >= p.off)
}

// logEnd returns where the next flush writes: every record already
// flushed, or being flushed, comes before it or at it.
func (s *Store) logEnd() walPos {
	w := &s.wal
	w.endMu.Lock()
	defer w.endMu.Unlock()
	return w.end
}

func (s *Store) setLogEnd(p walPos) {
	w := &s.wal
	w.endMu.Lock()
	w.end = p
	w.endMu.Unlock()
}

// sealJob is a full segment to retire: sync its journals, wait for a
// checkpoint to cover it, then keep path as a spare or remove it.
type sealJob struct {
	path     string
	seq      uint64
	journals []*journal
}

func (s *Store) walPath(seq uint64) string {
	return filepath.Join(s.dir, walDir, seqName(walPref, seq))
}

// walCommit makes req durable through the commit pipeline and returns the
// flush's error. See the comment at the top of this file. A writer that
// finds a flush running queues and sleeps on its own channel; the leader
// wakes exactly the writers its flush covered, and hands the lead to the
// first writer queued meanwhile (no thundering herd).
func (s *Store) walCommit(req *walReq) error {
	w := &s.wal
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return fmt.Errorf("file: %w", storage.ErrClosed)
	}
	w.queue = append(w.queue, req)
	w.gather.queued(len(w.queue))
	lead := !w.flushing
	if !lead && req.wake == nil {
		// Only a writer that waits is woken: set before it can be. Each
		// wait takes the one signal sent, so a reused request's channel
		// is empty here.
		req.wake = make(chan struct{}, 1)
	}
	w.flushing = true
	w.mu.Unlock()
	if !lead {
		<-req.wake
		if req.done {
			return req.err
		}
		// Handed the lead: req is still queued, first.
	}
	// Let writers that are running already reach the queue first: a synced
	// write costs about the same whatever it holds, so a bigger batch is
	// cheaper per append, and the yield costs nothing when none are.
	runtime.Gosched()
	w.mu.Lock()
	w.walGather()
	batch := w.queue
	w.queue, w.spare = w.spare, nil
	w.mu.Unlock()
	err := s.walFlush(batch)
	for _, r := range batch {
		r.done, r.err = true, err
		if r != req {
			r.wake <- struct{}{}
		}
	}
	w.mu.Lock()
	w.gather.expect = len(batch) + len(w.queue)
	clear(batch)
	w.spare = batch[:0]
	if len(w.queue) > 0 {
		next := w.queue[0]
		w.mu.Unlock()
		next.wake <- struct{}{}
	} else {
		w.flushing = false
		w.cond.Broadcast() // closeWAL waits for the last flush
		w.mu.Unlock()
	}
	return req.err
}

// walFlush writes batch as one WAL frame with one fdatasync. Caller is the
// leader.
func (s *Store) walFlush(batch []*walReq) error {
	w := &s.wal
	// The batch's header and segment identity are filled in once the
	// segment is known.
	buf := append(w.buf[:0], make([]byte, frameHeader+walBatchHead)...)
	appends := 0
	for _, r := range batch {
		buf = appendWALRec(buf, r.rec)
		appends += r.appends
	}
	size := int64(framedLen(len(buf)-frameHeader) + walEndMark)
	if w.j == nil || (w.j.tail+size > s.opts.walSegment && w.j.tail > int64(walHeadLen)) {
		if err := s.walRotate(); err != nil {
			return fmt.Errorf("file: write-ahead log: %w", err)
		}
	}
	buf[frameHeader] = typeWALSegBatch
	binary.LittleEndian.PutUint64(buf[frameHeader+1:], w.seq)
	binary.LittleEndian.PutUint64(buf[frameHeader+9:], w.salt)
	buf = finishFrame(buf)
	n := int64(len(buf))
	buf = append(buf, make([]byte, walEndMark)...)
	if cap(buf) <= walBufKeep {
		w.buf = buf
	} else {
		w.buf = nil
	}
	t0 := time.Now()
	if err := s.journalWrite(w.j, buf); err != nil {
		return fmt.Errorf("file: write-ahead log: %w", err)
	}
	took := time.Since(t0)
	w.gather.noteSync(took)
	w.j.tail -= walEndMark // the next flush overwrites the end mark
	s.setLogEnd(walPos{seq: w.seq, off: w.j.tail})
	// Durable now: the frames wait for their journals' files, and the
	// sealer of this segment finds them there.
	for _, r := range batch {
		if r.j != nil {
			s.addPending(r.j, r.rec.frame)
			w.touched[r.j] = struct{}{}
		}
	}
	if appends > 0 {
		s.observeFlush(appends, n, took)
	}
	return nil
}

// finishFrame fills in the header and padding of a frame built in place:
// buf holds 8 bytes of room for the header, then the payload.
func finishFrame(buf []byte) []byte {
	n := len(buf) - frameHeader
	binary.LittleEndian.PutUint32(buf[0:], uint32(n))
	binary.LittleEndian.PutUint32(buf[4:], crc32.Checksum(buf[frameHeader:], castagnoli))
	for pad := framedLen(n) - frameHeader - n; pad > 0; pad-- {
		buf = append(buf, 0)
	}
	return buf
}

// walRotate starts the next segment and hands the current one to the
// sealer, waiting while walMaxSealing segments are already waiting. Caller
// is the leader (or Close).
func (s *Store) walRotate() error {
	w := &s.wal
	w.sealMu.Lock()
	for len(w.pending) >= walMaxSealing && !w.stop {
		w.sealCond.Wait()
	}
	w.sealMu.Unlock()
	seq := w.seq + 1
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return fmt.Errorf("salt: %w", err)
	}
	salt := binary.LittleEndian.Uint64(b[:])
	path := s.walPath(seq)
	head := encodeWALHead(seq, salt)
	j := s.reuseSpare(path, head)
	if j == nil {
		var err error
		if j, err = s.createSegment(path, head); err != nil {
			return err
		}
	}
	old, touched := w.j, w.touched
	w.j = j
	w.seq, w.salt, w.touched = seq, salt, make(map[*journal]struct{})
	s.setLogEnd(walPos{seq: seq, off: j.tail})
	if old != nil {
		_ = old.f.Close()
		s.walSeal(sealJob{path: old.path, seq: seq - 1, journals: slices.Collect(maps.Keys(touched))})
	}
	return nil
}

// createSegment starts a segment in a new file.
func (s *Store) createSegment(path string, head []byte) (*journal, error) {
	if err := writeFileSync(&s.stats, path, head); err != nil {
		return nil, err
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		_ = os.Remove(path)
		return nil, ioErr(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, filePerm)
	if err != nil {
		_ = os.Remove(path)
		return nil, ioErr(err)
	}
	s.stats.walCreated.Add(1)
	return &journal{f: f, path: path, tail: int64(len(head)), alloc: int64(len(head)), zeroFill: true}, nil
}

// reuseSpare starts a segment in a spare, if there is one: it writes the
// header and an end mark over the spare's start and fdatasyncs them, then
// renames the spare to path and syncs the folder. A crash before the
// rename leaves a spare (whose header no one reads); after it, a segment
// whose header is its own. A spare that cannot be reused is removed, and
// the next one tried.
func (s *Store) reuseSpare(path string, head []byte) *journal {
	w := &s.wal
	for {
		w.sealMu.Lock()
		if len(w.spares) == 0 {
			w.sealMu.Unlock()
			return nil
		}
		spare := w.spares[0]
		w.spares = w.spares[1:]
		w.sealMu.Unlock()
		j, err := s.reuseFile(spare, path, head)
		if err == nil {
			s.stats.walRecycled.Add(1)
			return j
		}
		s.log.Warn("could not reuse a spare write-ahead log segment; removing it", zap.String("spare", spare), zap.Error(err))
		_ = os.Remove(spare)
	}
}

func (s *Store) reuseFile(spare, path string, head []byte) (*journal, error) {
	f, err := os.OpenFile(spare, os.O_RDWR, filePerm)
	if err != nil {
		return nil, ioErr(err)
	}
	fi, err := f.Stat()
	if err == nil {
		start := append(slices.Clip(head), make([]byte, walEndMark)...)
		var n int
		n, err = f.WriteAt(start, 0)
		s.stats.bytesWritten.Add(int64(n))
		if err == nil {
			err = fdatasync(f)
		}
	}
	if err == nil {
		s.walStep("header")
		if err = os.Rename(spare, path); err == nil {
			s.walStep("renamed")
			if err = syncDir(filepath.Dir(path)); err != nil {
				_ = os.Rename(path, spare)
			}
		}
	}
	if err != nil {
		_ = f.Close()
		return nil, ioErr(err)
	}
	return &journal{f: f, path: path, tail: int64(len(head)), alloc: max(fi.Size(), int64(len(head)+walEndMark)), zeroFill: true}, nil
}

// walSeal queues a segment for the sealer.
func (s *Store) walSeal(job sealJob) {
	w := &s.wal
	w.sealMu.Lock()
	w.pending = append(w.pending, job)
	w.sealCond.Broadcast()
	w.sealMu.Unlock()
}

// walCover lets the sealer retire the segments numbered below seq once
// their journals are synced: a durable checkpoint's position is past them.
func (s *Store) walCover(seq uint64) {
	w := &s.wal
	w.sealMu.Lock()
	if seq > w.covered {
		w.covered = seq
		w.sealCond.Broadcast()
	}
	w.sealMu.Unlock()
}

// walUncovered reports whether synced segments wait for a checkpoint.
func (s *Store) walUncovered() bool {
	w := &s.wal
	w.sealMu.Lock()
	defer w.sealMu.Unlock()
	return len(w.synced) > 0
}

// sealLoop syncs the journals of full segments, oldest first, and retires
// each segment once a checkpoint covers it, until Close stops it and
// nothing is pending. It asks for a checkpoint when walMaxUncovered
// segments wait for one, so that the log stays bounded.
func (s *Store) sealLoop() {
	w := &s.wal
	defer close(w.sealDone)
	for {
		w.sealMu.Lock()
		for len(w.pending) == 0 && !(len(w.synced) > 0 && w.synced[0].seq < w.covered) && !w.stop {
			w.sealCond.Wait()
		}
		stopping := w.stop
		if len(w.pending) > 0 {
			job := w.pending[0]
			w.sealMu.Unlock()
			err := s.syncJournals(job)
			if err != nil {
				s.cond.Log(s.log, zapcore.WarnLevel, "seal", "could not sync the journals of a write-ahead log segment; keeping it and retrying",
					zap.String("segment", job.path), zap.Error(err))
				if !stopping {
					time.Sleep(time.Second)
					continue
				}
			}
			w.sealMu.Lock()
			w.pending = w.pending[1:]
			if err == nil {
				w.synced = append(w.synced, job)
			} // else Close: the segment stays, and the next Open replays it
			w.sealCond.Broadcast()
			waiting := len(w.synced)
			w.sealMu.Unlock()
			if waiting >= walMaxUncovered && !stopping {
				s.kickCheckpoint()
			}
			continue
		}
		if len(w.synced) == 0 || w.synced[0].seq >= w.covered {
			// Stopping with nothing left to retire: a segment no
			// checkpoint covers stays, and the next Open replays it.
			w.sealMu.Unlock()
			return
		}
		job := w.synced[0]
		w.sealMu.Unlock()
		if err := s.retireSegment(job); err != nil {
			s.cond.Log(s.log, zapcore.WarnLevel, "seal", "could not retire a write-ahead log segment; keeping it and retrying",
				zap.String("segment", job.path), zap.Error(err))
			if !stopping {
				time.Sleep(time.Second)
				continue
			}
		}
		w.sealMu.Lock()
		w.synced = w.synced[1:]
		w.sealCond.Broadcast()
		w.sealMu.Unlock()
	}
}

// syncJournals makes every journal the segment has records for durable,
// writing its pending frames first. A journal that is gone was folded into
// a durable snapshot, or deleted with its session.
func (s *Store) syncJournals(job sealJob) error {
	for _, j := range job.journals {
		if err := s.writePendingPath(j); err != nil {
			return err
		}
		if err := syncFile(j.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	s.walStep("sealed")
	return nil
}

// retireSegment keeps a segment whose journals are synced and which a
// checkpoint covers as a spare (renamed free-<seq>, the folder synced, so
// that no crash can bring back its old name once the leader writes a new
// header into it), or removes it when walMaxSpares are kept already.
func (s *Store) retireSegment(job sealJob) error {
	w := &s.wal
	w.sealMu.Lock()
	keep := len(w.spares) < s.opts.walSpares
	w.sealMu.Unlock()
	if keep {
		spare := filepath.Join(filepath.Dir(job.path), seqName(walFreePref, job.seq))
		err := os.Rename(job.path, spare)
		if err == nil {
			s.walStep("kept")
			err = syncDir(filepath.Dir(spare))
			if err == nil {
				w.sealMu.Lock()
				w.spares = append(w.spares, spare)
				w.sealMu.Unlock()
				return nil
			}
			// Not known durable: do not reuse it in this run. The next
			// Open finds it as a spare or, under its old name, as a
			// segment whose records the journals hold.
			return nil
		}
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
	}
	if err := os.Remove(job.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// syncFile fdatasyncs the file at path.
func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return fdatasync(f)
}

// closeWAL stops the pipeline and hands the current segment to the
// sealer; Close's last checkpoint then covers every segment, and stopWAL
// waits for the sealer to retire them: after a clean Close no segment is
// left to replay, only spares. Caller is Close, after every write ended.
func (s *Store) closeWAL() {
	w := &s.wal
	w.mu.Lock()
	w.closed = true
	for w.flushing {
		w.cond.Wait()
	}
	w.mu.Unlock()
	if w.j != nil {
		_ = w.j.f.Close()
		s.walSeal(sealJob{path: w.j.path, seq: w.seq, journals: slices.Collect(maps.Keys(w.touched))})
		w.j = nil
	}
}

// stopWAL ends the sealer once it has synced the segments queued for it
// and retired those a checkpoint covers.
func (s *Store) stopWAL() {
	w := &s.wal
	w.sealMu.Lock()
	w.stop = true
	w.sealCond.Broadcast()
	w.sealMu.Unlock()
	<-w.sealDone
}

// walSegment is a segment file found at Open (or by Check).
type walSegment struct {
	seq     uint64
	path    string
	damaged bool // kept as wal-<seq>.damaged: replayed once already
}

// walPlan is what the WAL holds beyond the journals: the records to put
// back into journals, the sessions whose change the WAL lost, and the
// damage found.
type walPlan struct {
	segs     []walSegment
	byPath   map[string][]walRec // journal path -> records in log order
	segPaths map[string][]string // segment path -> journal paths it names
	lost     map[string][]walRec // session id -> records whose bytes are damaged
	damaged  map[string]string   // segment path -> what is wrong with it
	torn     map[string]int      // segment path -> where its torn tail starts
	spares   []walSegment        // retired segments kept for reuse, oldest first
	maxSeq   uint64              // the highest sequence number of a segment or spare
	last     map[string]walPos   // session id -> position of the last record naming it
	drops    map[string]walPos   // session id -> position of its last drop record
	unnamed  []walPos            // positions of damaged records that name no session
	unmaps   []func()            // the segments mapped (see mapWAL), for release
}

// changedSince returns the sessions the log names at or after pos, each
// with whether a drop at or after pos says it was deleted since (reset).
// ok is false when damage at or after pos may hide a session: no
// checkpoint at pos can then be trusted.
func (p *walPlan) changedSince(pos walPos) (changed map[string]bool, ok bool) {
	for _, u := range p.unnamed {
		if pos.atOrAfter(u.seq, u.off) {
			return nil, false
		}
	}
	changed = map[string]bool{}
	for id, at := range p.last {
		if pos.atOrAfter(at.seq, at.off) {
			d, dropped := p.drops[id]
			changed[id] = dropped && pos.atOrAfter(d.seq, d.off)
		}
	}
	return changed, true
}

// readWAL reads every segment of dir's WAL into the heap and plans its
// replay. It writes nothing.
func readWAL(dir string, log *zap.Logger) (*walPlan, error) {
	return planWAL(dir, log, readWALSegment)
}

// mapWAL is readWAL with the segments mapped rather than copied (see
// walmap.go): the plan's records are parts of the mappings, so the caller
// calls release once nothing reads them.
func mapWAL(dir string, log *zap.Logger) (*walPlan, error) {
	return planWAL(dir, log, mapSegment)
}

// readWALSegment reads the file at path into the heap: nothing to unmap.
func readWALSegment(path string) ([]byte, func(), error) {
	data, err := os.ReadFile(path)
	return data, nil, err
}

// planWAL is readWAL with load giving a segment's bytes and, if they are
// mapped, the function that unmaps them.
func planWAL(dir string, log *zap.Logger, load func(path string) ([]byte, func(), error)) (_ *walPlan, err error) {
	p := &walPlan{byPath: map[string][]walRec{}, segPaths: map[string][]string{}, lost: map[string][]walRec{},
		damaged: map[string]string{}, torn: map[string]int{}, last: map[string]walPos{}, drops: map[string]walPos{}}
	defer func() {
		if err != nil {
			p.release()
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer recoverFault(&err)
	des, err := os.ReadDir(filepath.Join(dir, walDir))
	if errors.Is(err, os.ErrNotExist) {
		return p, nil
	}
	if err != nil {
		return nil, ioErr(err)
	}
	for _, de := range des {
		name := de.Name()
		if seq, ok := parseSeqName(name, walFreePref); ok && de.Type().IsRegular() {
			p.spares = append(p.spares, walSegment{seq: seq, path: filepath.Join(dir, walDir, name)})
			p.maxSeq = max(p.maxSeq, seq)
			continue
		}
		dmg := strings.HasSuffix(name, walDamagedExt)
		seq, ok := parseSeqName(strings.TrimSuffix(name, walDamagedExt), walPref)
		if !ok || de.IsDir() {
			log.Warn("ignoring unknown entry in the write-ahead log folder", zap.String("path", filepath.Join(dir, walDir, name)))
			continue
		}
		p.segs = append(p.segs, walSegment{seq: seq, path: filepath.Join(dir, walDir, name), damaged: dmg})
		p.maxSeq = max(p.maxSeq, seq)
	}
	bySeq := func(a, b walSegment) int { return cmpU64(a.seq, b.seq) }
	slices.SortFunc(p.segs, bySeq)
	slices.SortFunc(p.spares, bySeq)
	recsByID := map[string][]walRec{}
	// A session's records mostly name one journal: its path is made once.
	type journalKey struct {
		id  string
		gen uint64
	}
	paths := map[journalKey]string{}
	pathOf := func(id string, gen uint64) string {
		k := journalKey{id, gen}
		jp, ok := paths[k]
		if !ok {
			jp = journalPathOf(dir, id, gen)
			paths[k] = jp
		}
		return jp
	}
	for _, seg := range p.segs {
		data, unmap, err := load(seg.path)
		if err != nil {
			return nil, ioErr(err)
		}
		if unmap != nil {
			p.unmaps = append(p.unmaps, unmap)
		}
		frames, offs, bad, end, torn := walScan(data, seg.seq)
		var problems []string
		if len(frames) == 0 || frames[0][0] != typeWALHead {
			if len(bad) == 0 && !torn && end == 0 {
				continue // an empty segment: a crash right after it was created
			}
			if !torn || end != 0 {
				problems = append(problems, "its header is damaged")
			}
		} else if r := (reader{b: frames[0][1:]}); r.u64("segment sequence") != seg.seq {
			problems = append(problems, "its header names another segment")
		}
		if len(frames) > 0 && frames[0][0] == typeWALHead {
			frames, offs = frames[1:], offs[1:]
		}
		if torn {
			p.torn[seg.path] = end
		}
		// Each record is planned as it is parsed, in log order.
		seen := map[string]bool{}
		plan := func(r walRec, lost bool) {
			switch {
			case r.kind == walKindTouch:
				// Names its session; nothing to put into a journal.
			case r.kind == walKindDrop:
				delete(recsByID, r.id)
				delete(p.lost, r.id)
			case lost:
				p.lost[r.id] = append(p.lost[r.id], r)
			case !seg.damaged:
				// A .damaged segment was replayed and synced when it was
				// found; only its lost records still matter.
				recsByID[r.id] = append(recsByID[r.id], r)
				jp := pathOf(r.id, r.gen)
				if !seen[jp] {
					seen[jp] = true
					p.segPaths[seg.path] = append(p.segPaths[seg.path], jp)
				}
			}
		}
		add := func(at int, good, lost []walRec, clean bool) {
			pos := walPos{seq: seg.seq, off: int64(at)}
			for _, r := range good {
				plan(r, false)
				p.last[r.id] = pos
				if r.kind == walKindDrop {
					p.drops[r.id] = pos
				}
			}
			for _, r := range lost {
				plan(r, true)
				p.last[r.id] = pos
			}
			if !clean {
				p.unnamed = append(p.unnamed, pos)
			}
		}
		for i, f := range frames {
			good, lost, clean := parseWALRecs(f[walBatchHead:])
			add(offs[i], good, lost, clean)
			if !clean || len(lost) > 0 {
				problems = append(problems, "a flush's records do not decode")
			}
		}
		for _, rg := range bad {
			// The frame's own checksum failed: salvage what the records'
			// checksums vouch for, and name the sessions of the rest.
			var good, lost []walRec
			clean := false
			if rg.off+frameHeader+walBatchHead <= rg.end {
				good, lost, clean = parseWALRecs(trimZeros(data[rg.off+frameHeader+walBatchHead : rg.end]))
			}
			add(rg.off, good, lost, clean)
			what := fmt.Sprintf("bytes %d-%d are damaged", rg.off, rg.end)
			if len(lost) > 0 {
				ids := make([]string, 0, len(lost))
				for _, r := range lost {
					ids = append(ids, r.id)
				}
				what += fmt.Sprintf(" (changes of sessions %s)", strings.Join(ids, ", "))
			}
			if !clean {
				what += "; some of them cannot be attributed to a session"
			}
			problems = append(problems, what)
		}
		if len(problems) > 0 {
			p.damaged[seg.path] = strings.Join(problems, "; ")
		}
	}
	for id, recs := range recsByID {
		// Runs of one generation, in log order: mostly the whole list.
		for len(recs) > 0 {
			n := 1
			for n < len(recs) && recs[n].gen == recs[0].gen {
				n++
			}
			jp := pathOf(id, recs[0].gen)
			if p.byPath[jp] == nil {
				p.byPath[jp] = recs[:n:n]
			} else {
				p.byPath[jp] = append(p.byPath[jp], recs[:n]...)
			}
			recs = recs[n:]
		}
	}
	return p, nil
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// trimZeros drops the zero bytes at the end of b (the padding before the
// next frame).
func trimZeros(b []byte) []byte {
	return bytes.TrimRight(b, "\x00")
}

func journalPathOf(dir, id string, gen uint64) string {
	return filepath.Join(dir, "sessions", id, journalName(gen))
}

// patchJournal puts recs into data (a journal's bytes) where they differ,
// and returns the result and whether anything changed.
func patchJournal(data []byte, recs []walRec) ([]byte, bool) {
	changed := false
	for _, r := range recs {
		end := r.off + int64(len(r.frame))
		if end <= int64(len(data)) && bytes.Equal(data[r.off:end], r.frame) {
			continue
		}
		if end > int64(len(data)) {
			data = append(data, make([]byte, end-int64(len(data)))...)
		}
		copy(data[r.off:end], r.frame)
		changed = true
	}
	return data, changed
}

// applyWAL writes the plan's records into the journals that lack them,
// reading only the records' byte ranges, so that its work is bounded by
// the WAL's size, not the journals'. A journal that is gone belongs to a
// session deleted or rewritten since (its snapshot holds the change). It
// returns the sessions whose journal lacks a change the WAL lost.
//
// The journals are independent: several workers replay them at once (after
// kill -9 this is all reading and comparing, nothing to write), each journal
// in one goroutine, its records in log order.
func applyWAL(p *walPlan, dir string, st *ioStats) (map[string]error, error) {
	paths := make([]string, 0, len(p.byPath))
	for path := range p.byPath {
		paths = append(paths, path)
	}
	var first atomic.Pointer[error]
	parallel(len(paths), 4*runtime.GOMAXPROCS(0), func(buf *[]byte, i int) bool {
		if first.Load() != nil {
			return false
		}
		var err error
		if *buf, err = applyJournal(paths[i], p.byPath[paths[i]], *buf, st); err != nil {
			first.CompareAndSwap(nil, &err)
			return false
		}
		return true
	})
	if err := first.Load(); err != nil {
		return nil, *err
	}
	return lostChanges(p, dir), nil
}

// walReadAhead is how much of a journal applyJournal reads at once: the
// records of one journal are mostly back to back, so one read covers many.
const walReadAhead = 1 << 20

// applyJournal writes into the journal at path those of recs (in log order)
// whose bytes it lacks. buf is scratch space, returned for reuse.
func applyJournal(path string, recs []walRec, buf []byte, st *ioStats) (_ []byte, err error) {
	// The records' bytes may be parts of mapped segments.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer recoverFault(&err)
	f, err := os.OpenFile(path, os.O_RDWR, filePerm)
	if errors.Is(err, os.ErrNotExist) {
		return buf, nil
	}
	if err != nil {
		return buf, ioErr(fmt.Errorf("replay the write-ahead log into %s: %w", path, err))
	}
	defer func() { // also when a fault in a mapped segment unwinds
		if cerr := f.Close(); cerr != nil && err == nil {
			err = ioErr(fmt.Errorf("replay the write-ahead log into %s: %w", path, cerr))
		}
	}()
	// win holds the journal's bytes from winOff on, as read (and as
	// written since); a short read leaves it shorter.
	// A window reaches no further than the records do: a small journal
	// costs a small read.
	var last int64
	for _, r := range recs {
		last = max(last, r.off+int64(len(r.frame)))
	}
	var win []byte
	winOff := int64(-1)
	for _, r := range recs {
		end := r.off + int64(len(r.frame))
		if winOff < 0 || r.off < winOff || end > winOff+int64(len(win)) {
			buf = slices.Grow(buf[:0], int(max(end, min(last, r.off+walReadAhead))-r.off))
			buf = buf[:cap(buf)]
			n, _ := f.ReadAt(buf, r.off)
			win, winOff = buf[:n], r.off
		}
		at := r.off - winOff
		if end <= winOff+int64(len(win)) && bytes.Equal(win[at:at+int64(len(r.frame))], r.frame) {
			continue
		}
		n, err := f.WriteAt(r.frame, r.off)
		st.bytesWritten.Add(int64(n))
		if err != nil {
			return buf, ioErr(fmt.Errorf("replay the write-ahead log into %s: %w", path, err))
		}
		// The window must show what the file now holds: drop it (a
		// later record is compared with a fresh read).
		winOff = -1
	}
	return buf, nil
}

// lostChanges names the sessions whose journal lacks a change whose WAL
// record is damaged. A journal that holds an intact frame where the record
// points got it before the crash, and lost nothing.
func lostChanges(p *walPlan, dir string) map[string]error {
	out := map[string]error{}
	for id, recs := range p.lost {
		for _, r := range recs {
			ok, err := frameAt(journalPathOf(dir, id, r.gen), r.off)
			if errors.Is(err, os.ErrNotExist) || ok {
				continue // deleted or rewritten since, or the journal has it
			}
			out[id] = fmt.Errorf("a change at byte %d of journal generation %d is damaged in the write-ahead log and missing from the journal: %w", r.off, r.gen, errCorrupt)
			break
		}
	}
	return out
}

// frameAt reports whether the file at path holds an intact commit frame at
// off.
func frameAt(path string, off int64) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	var h [frameHeader]byte
	if n, _ := f.ReadAt(h[:], off); n < frameHeader {
		return false, nil
	}
	n := int(binary.LittleEndian.Uint32(h[:]))
	if n < 1 || n > maxPayload {
		return false, nil
	}
	b := make([]byte, framedLen(n))
	if m, _ := f.ReadAt(b, off); m < len(b) {
		return false, nil
	}
	p, _, ok := readFrame(b, 0)
	return ok && p[0] == typeCommit, nil
}

// replayWAL brings the journals up to date with the WAL at Open, before
// sessions are scanned, and hands the replayed segments to the sealer.
// A segment with damage is kept, renamed wal-<seq>.damaged, so that the
// sessions it lost stay marked damaged at every Open until sessionctl fsck
// repairs them; the damage is logged. It returns the plan read and the
// sessions marked.
func (s *Store) replayWAL() (*walPlan, map[string]error, error) {
	w := &s.wal
	w.cond = sync.NewCond(&w.mu)
	w.sealCond = sync.NewCond(&w.sealMu)
	w.sealDone = make(chan struct{})
	w.touched = make(map[*journal]struct{})
	if err := os.Mkdir(filepath.Join(s.dir, walDir), dirPerm); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, nil, fmt.Errorf("file: create %s: %w", walDir, ioErr(err))
	}
	p, err := mapWAL(s.dir, s.log)
	if err != nil {
		return nil, nil, fmt.Errorf("file: read the write-ahead log: %w", err)
	}
	// New segments are numbered past every spare too: a reused file's
	// batches then never name the segment it becomes.
	w.seq = p.maxSeq
	w.end = walPos{seq: p.maxSeq + 1} // the next segment's start: past every record there is
	for i, sp := range p.spares {
		if i < len(p.spares)-s.opts.walSpares {
			_ = os.Remove(sp.path) // kept by a run with a higher bound
			continue
		}
		w.spares = append(w.spares, sp.path)
	}
	lost, err := applyWAL(p, s.dir, &s.stats)
	p.release()
	if err != nil {
		return nil, nil, fmt.Errorf("file: %w", err)
	}
	replayed := 0
	for _, recs := range p.byPath {
		replayed += len(recs)
	}
	if replayed > 0 || len(p.segs) > 0 {
		s.log.Info("replayed the write-ahead log", zap.Int("segments", len(p.segs)), zap.Int("records", replayed), zap.Int("journals", len(p.byPath)))
	}
	for path, end := range p.torn {
		s.log.Warn("ignoring an incomplete last write-ahead log flush (never acknowledged)", zap.String("segment", path), zap.Int("valid_bytes", end))
	}
	for _, seg := range p.segs {
		why, bad := p.damaged[seg.path]
		switch {
		case bad && !seg.damaged:
			s.log.Error("write-ahead log segment is damaged; kept for sessionctl fsck", zap.String("segment", seg.path), zap.String("damage", why))
			// Its intact records are in the journals now: make them
			// durable before the segment stops being replayed.
			for _, jp := range p.segPaths[seg.path] {
				if err := syncFile(jp); err != nil && !errors.Is(err, os.ErrNotExist) {
					return nil, nil, fmt.Errorf("file: sync journal %s: %w", jp, ioErr(err))
				}
			}
			if err := os.Rename(seg.path, seg.path+walDamagedExt); err != nil {
				return nil, nil, fmt.Errorf("file: keep damaged write-ahead log segment: %w", ioErr(err))
			}
			if err := syncDir(filepath.Dir(seg.path)); err != nil {
				return nil, nil, fmt.Errorf("file: %w", err)
			}
		case seg.damaged:
			s.log.Error("damaged write-ahead log segment from an earlier run; run sessionctl fsck --repair", zap.String("segment", seg.path), zap.String("damage", why))
		default:
			var js []*journal
			for _, jp := range p.segPaths[seg.path] {
				js = append(js, &journal{path: jp}) // replayed: nothing pending
			}
			s.walSeal(sealJob{path: seg.path, seq: seg.seq, journals: js})
		}
	}
	for id, err := range lost {
		s.log.Error("session lost a change in the write-ahead log", zap.String("session", id), zap.Error(err))
	}
	go s.sealLoop()
	return p, lost, nil
}
