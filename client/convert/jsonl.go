package convert

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// JSONLVersion is the version of the JSON lines format. A reader refuses a
// newer one rather than guess.
//
// The format: one JSON object per line. A header line
// {"type":"sessiond-export","version":1,"namespace":...,"exported_at":...,"sessionctl":...};
// per session a "session" line (the session without its messages), one
// "message" line per message with its index, for a compacted session a
// "summary" line with its latest compaction's summary message, and an
// "end" line with the message count; a "trailer" line with the session
// count. Session, message and summary lines carry the object twice: as proto3 JSON for people and
// tools ("session", "message"), and as its protobuf encoding in base64
// ("proto"), which a reader prefers, so that fields unknown to this
// version survive. A line without "proto" is read from its JSON.
const JSONLVersion = 1

// The line types of the JSON lines format.
const (
	lineHeader  = "sessiond-export"
	lineSession = "session"
	lineMessage = "message"
	lineSummary = "summary"
	lineEnd     = "end"
	lineTrailer = "trailer"
)

type headerLine struct {
	Type       string `json:"type"`
	Version    int    `json:"version"`
	Namespace  string `json:"namespace"`
	ExportedAt string `json:"exported_at"`
	Sessionctl string `json:"sessionctl"`
}

type sessionLine struct {
	Type    string          `json:"type"`
	Session json.RawMessage `json:"session"`
	Proto   []byte          `json:"proto"` // encoding/json writes standard base64
}

type messageLine struct {
	Type      string          `json:"type"`
	SessionID string          `json:"session_id"`
	Index     int64           `json:"index"`
	Message   json.RawMessage `json:"message"`
	Proto     []byte          `json:"proto"`
}

type summaryLine struct {
	Type      string          `json:"type"`
	SessionID string          `json:"session_id"`
	Message   json.RawMessage `json:"message"`
	Proto     []byte          `json:"proto"`
}

type endLine struct {
	Type         string `json:"type"`
	SessionID    string `json:"session_id"`
	MessageCount int64  `json:"message_count"`
}

type trailerLine struct {
	Type     string `json:"type"`
	Sessions int64  `json:"sessions"`
}

// anyLine is any line of the format, for reading.
type anyLine struct {
	Type         string          `json:"type"`
	Version      int             `json:"version"`
	Session      json.RawMessage `json:"session"`
	Message      json.RawMessage `json:"message"`
	Proto        []byte          `json:"proto"`
	SessionID    string          `json:"session_id"`
	Index        *int64          `json:"index"`
	MessageCount *int64          `json:"message_count"`
	Sessions     *int64          `json:"sessions"`
}

// JSONLWriter writes the JSON lines format line by line, so that a session
// bigger than memory can be streamed. It does not buffer: give it a
// buffered writer.
type JSONLWriter struct {
	w io.Writer
}

// NewJSONLWriter writes to w.
func NewJSONLWriter(w io.Writer) *JSONLWriter { return &JSONLWriter{w: w} }

func (x *JSONLWriter) line(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode line: %w", err)
	}
	if _, err := x.w.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	return nil
}

// Header writes the first line; producer is the writing program's version.
func (x *JSONLWriter) Header(namespace, producer string, at time.Time) error {
	return x.line(headerLine{Type: lineHeader, Version: JSONLVersion, Namespace: namespace,
		ExportedAt: at.UTC().Format(time.RFC3339), Sessionctl: producer})
}

// Session starts a session: s without its messages.
func (x *JSONLWriter) Session(s *sessiondv1.Session) error {
	s = proto.CloneOf(s)
	s.Messages = nil
	js, pb, err := halves(s)
	if err != nil {
		return err
	}
	return x.line(sessionLine{Type: lineSession, Session: js, Proto: pb})
}

// Message writes message i of the session being written.
func (x *JSONLWriter) Message(sessionID string, i int64, m *sessiondv1.Message) error {
	js, pb, err := halves(m)
	if err != nil {
		return err
	}
	return x.line(messageLine{Type: lineMessage, SessionID: sessionID, Index: i, Message: js, Proto: pb})
}

// Summary writes the summary message of the latest compaction of the
// session being written (its Session.compaction), after its messages, so
// that an import can store the compaction again.
func (x *JSONLWriter) Summary(sessionID string, m *sessiondv1.Message) error {
	js, pb, err := halves(m)
	if err != nil {
		return err
	}
	return x.line(summaryLine{Type: lineSummary, SessionID: sessionID, Message: js, Proto: pb})
}

// End closes the session being written, which had n messages.
func (x *JSONLWriter) End(sessionID string, n int64) error {
	return x.line(endLine{Type: lineEnd, SessionID: sessionID, MessageCount: n})
}

// Trailer writes the last line: how many sessions the file holds.
func (x *JSONLWriter) Trailer(sessions int64) error {
	return x.line(trailerLine{Type: lineTrailer, Sessions: sessions})
}

// WriteJSONL writes one whole session (with its messages) as a complete
// file.
func WriteJSONL(w io.Writer, s *sessiondv1.Session, producer string) error {
	x := NewJSONLWriter(w)
	if err := x.Header(s.GetNamespace(), producer, time.Now()); err != nil {
		return err
	}
	if err := x.Session(s); err != nil {
		return err
	}
	for i, m := range s.GetMessages() {
		if err := x.Message(s.GetId(), int64(i), m); err != nil {
			return err
		}
	}
	if err := x.End(s.GetId(), int64(len(s.GetMessages()))); err != nil {
		return err
	}
	return x.Trailer(1)
}

// halves encodes m as the two halves of a line: compact proto3 JSON (one
// line whatever protojson's whitespace does) and the lossless protobuf
// encoding, unknown fields included.
func halves(m proto.Message) (json.RawMessage, []byte, error) {
	b, err := protojson.Marshal(m)
	if err != nil {
		return nil, nil, fmt.Errorf("encode %T as JSON: %w", m, err)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return nil, nil, fmt.Errorf("compact JSON: %w", err)
	}
	pb, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, nil, fmt.Errorf("encode %T: %w", m, err)
	}
	return buf.Bytes(), pb, nil
}

// JSONLReader reads the JSON lines format session by session, checking
// every line: a session is returned only once its end line has arrived,
// so that a file cut short never yields half a session.
type JSONLReader struct {
	r                       *bufio.Reader
	lineNo, sessions        int64
	seenHeader, seenTrailer bool
	cur                     *sessiondv1.Session
	curSummary, summary     *sessiondv1.Message
}

// NewJSONLReader reads from r.
func NewJSONLReader(r io.Reader) *JSONLReader {
	return &JSONLReader{r: bufio.NewReaderSize(r, 1<<20)}
}

// Next returns the next whole session, with its messages, or io.EOF after
// a trailer that matches the file. Any other error names the line.
// Summary then gives its compaction's summary.
func (x *JSONLReader) Next() (*sessiondv1.Session, error) {
	for {
		raw, err := x.r.ReadBytes('\n')
		if len(raw) == 0 && errors.Is(err, io.EOF) {
			break
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("read: %w", err)
		}
		x.lineNo++
		if len(bytes.TrimSpace(raw)) == 0 {
			continue
		}
		if x.seenTrailer {
			return nil, fmt.Errorf("line %d: data after the trailer; is this two files joined?", x.lineNo)
		}
		var l anyLine
		if err := json.Unmarshal(raw, &l); err != nil {
			return nil, fmt.Errorf("line %d: not a JSON object (%v); is this a 'sessionctl export' file?", x.lineNo, err)
		}
		if !x.seenHeader {
			if l.Type != lineHeader {
				return nil, fmt.Errorf("line %d: no export header; is this a 'sessionctl export' file (not --format markdown)?", x.lineNo)
			}
			if l.Version != JSONLVersion {
				return nil, fmt.Errorf("line %d: export format version %d, this sessionctl reads version %d; use a matching sessionctl", x.lineNo, l.Version, JSONLVersion)
			}
			x.seenHeader = true
			continue
		}
		at := func(format string, a ...any) error {
			return fmt.Errorf("line %d: %s", x.lineNo, fmt.Sprintf(format, a...))
		}
		switch l.Type {
		case lineSession:
			if x.cur != nil {
				return nil, at("session %s has no end line; the file is damaged, export again", x.cur.GetId())
			}
			s := &sessiondv1.Session{}
			if err := decodeHalf(s, l.Proto, l.Session); err != nil {
				return nil, at("session: %v", err)
			}
			s.Messages = nil
			x.cur, x.curSummary = s, nil
		case lineMessage:
			if x.cur == nil || l.SessionID != x.cur.GetId() {
				return nil, at("message of session %q outside that session's lines", l.SessionID)
			}
			n := len(x.cur.Messages)
			if l.Index == nil || *l.Index != int64(n) {
				return nil, at("message index is %v, expected %d; the file is damaged, export again", ptrVal(l.Index), n)
			}
			m := &sessiondv1.Message{}
			if err := decodeHalf(m, l.Proto, l.Message); err != nil {
				return nil, at("message %d: %v", n, err)
			}
			x.cur.Messages = append(x.cur.Messages, m)
		case lineSummary:
			if x.cur == nil || l.SessionID != x.cur.GetId() {
				return nil, at("summary of session %q outside that session's lines", l.SessionID)
			}
			c := x.cur.GetCompaction()
			if c == nil || x.curSummary != nil {
				return nil, at("session %s has no compaction for this summary, or two summaries; the file is damaged, export again", l.SessionID)
			}
			m := &sessiondv1.Message{}
			if err := decodeHalf(m, l.Proto, l.Message); err != nil {
				return nil, at("summary: %v", err)
			}
			if m.GetId() != c.GetSummaryMessageId() {
				return nil, at("summary %q is not session %s's compaction summary %q; the file is damaged, export again", m.GetId(), l.SessionID, c.GetSummaryMessageId())
			}
			x.curSummary = m
		case lineEnd:
			if x.cur == nil || l.SessionID != x.cur.GetId() {
				return nil, at("end of session %q that was not started", l.SessionID)
			}
			if l.MessageCount == nil || *l.MessageCount != int64(len(x.cur.Messages)) {
				return nil, at("session %s: end line says %v messages, the file holds %d; export again", l.SessionID, ptrVal(l.MessageCount), len(x.cur.Messages))
			}
			x.sessions++
			s := x.cur
			x.summary, x.cur, x.curSummary = x.curSummary, nil, nil
			return s, nil
		case lineTrailer:
			if x.cur != nil {
				return nil, at("session %s has no end line; the file is damaged, export again", x.cur.GetId())
			}
			if l.Sessions == nil || *l.Sessions != x.sessions {
				return nil, at("trailer says %v sessions, the file holds %d; export again", ptrVal(l.Sessions), x.sessions)
			}
			x.seenTrailer = true
		default:
			return nil, at("unknown line type %q; was the file made by a newer sessionctl?", l.Type)
		}
	}
	switch {
	case !x.seenHeader:
		return nil, errors.New("empty input; give a file made by 'sessionctl export'")
	case !x.seenTrailer:
		return nil, fmt.Errorf("cut short after line %d (no trailer); export again", x.lineNo)
	}
	return nil, io.EOF
}

// Summary returns the summary message of the latest compaction of the
// session Next returned last, or nil when the file holds none for it (it
// has no compaction, or the file was written without summaries).
func (x *JSONLReader) Summary() *sessiondv1.Message { return x.summary }

func ptrVal(p *int64) any {
	if p == nil {
		return "missing"
	}
	return *p
}

// decodeHalf reads a line's object from its protobuf bytes when present
// (lossless: unknown fields are kept), else from its proto3 JSON.
func decodeHalf(m proto.Message, pb []byte, js json.RawMessage) error {
	if pb != nil {
		if err := proto.Unmarshal(pb, m); err != nil {
			return fmt.Errorf("bad proto bytes: %w", err)
		}
		return nil
	}
	if len(js) == 0 {
		return errors.New("neither proto nor JSON given")
	}
	if err := protojson.Unmarshal(js, m); err != nil {
		return fmt.Errorf("bad JSON: %w", err)
	}
	return nil
}

// importJSONL reads a file that holds exactly one session.
func importJSONL(data []byte) (*sessiondv1.Session, error) {
	r := NewJSONLReader(bytes.NewReader(data))
	s, err := r.Next()
	if errors.Is(err, io.EOF) {
		return nil, errors.New("the file holds no session")
	}
	if err != nil {
		return nil, err
	}
	if _, err := r.Next(); !errors.Is(err, io.EOF) {
		if err == nil {
			return nil, errors.New("the file holds more than one session; import it with 'sessionctl import' (no --format)")
		}
		return nil, err
	}
	return s, nil
}
