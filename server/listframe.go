package server

import (
	"errors"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sessiond/sessiond/storage"
)

// The ListSessions frame is encoded by hand: proto.Marshal of
// listFrameToProto's message made six objects per session (the response,
// the session, two timestamps, the page token twice) and took most of a
// listing's server time when nothing was kept yet. encodeListFrame writes
// the same fields, in field-number order, with one allocation of exactly
// the frame's size; TestListFrameMatchesProto checks it against
// proto.Marshal on random sessions with every field set or not.

// Field numbers of sessiond.v1.ListSessionsResponse, Session, ForkOrigin
// and map entries.
const (
	fListSession, fListNextPageToken = 1, 2

	fSessID, fSessNamespace, fSessAlias, fSessTitle = 1, 2, 3, 4
	fSessCreatedAt, fSessUpdatedAt                  = 5, 6
	fSessRevision, fSessMessageCount, fSessSummary  = 7, 8, 9
	fSessMetadata, fSessLabels, fSessParent         = 10, 11, 12
	fSessOpenToolCallIDs, fSessUsage, fSessModels   = 14, 15, 16
	fSessExpireAfter                                = 17

	fForkSessionID, fForkMessageCount = 1, 2
	fMapKey, fMapValue                = 1, 2
	// Usage's, Timestamp's and Duration's fields are varints numbered 1, 2,
	// ... in the order appendVarintMessage takes them.
)

// listScratch holds the session's encoding while its length, which
// precedes it in the frame, is not known yet.
var listScratch = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// encodeListFrame returns s's ListSessionsResponse frame: the session's
// metadata (as sessionToProto has it) and the page token that resumes just
// after it. Like proto.Marshal, it refuses a string that is not valid UTF-8.
func encodeListFrame(s *storage.Session) ([]byte, error) {
	bp := listScratch.Get().(*[]byte)
	defer listScratch.Put(bp)
	body, err := appendSession((*bp)[:0], s)
	if err != nil {
		return nil, err
	}
	*bp = body[:0]
	var tok [64]byte
	token := appendPageToken(tok[:0], storage.Cursor{UpdatedAt: s.UpdatedAt, ID: s.ID})
	size := protowire.SizeTag(fListSession) + protowire.SizeBytes(len(body))
	if len(token) > 0 {
		size += protowire.SizeTag(fListNextPageToken) + protowire.SizeBytes(len(token))
	}
	out := make([]byte, 0, size)
	out = protowire.AppendTag(out, fListSession, protowire.BytesType)
	out = protowire.AppendBytes(out, body)
	if len(token) > 0 {
		out = protowire.AppendTag(out, fListNextPageToken, protowire.BytesType)
		out = protowire.AppendBytes(out, token)
	}
	return out, nil
}

var errListUTF8 = errors.New("string field contains invalid UTF-8")

func appendSession(b []byte, s *storage.Session) ([]byte, error) {
	var bad string
	str := func(num protowire.Number, v, name string) {
		if v == "" {
			return
		}
		if !utf8.ValidString(v) && bad == "" {
			bad = name
		}
		b = protowire.AppendTag(b, num, protowire.BytesType)
		b = protowire.AppendString(b, v)
	}
	varint := func(num protowire.Number, v uint64) {
		if v != 0 {
			b = protowire.AppendTag(b, num, protowire.VarintType)
			b = protowire.AppendVarint(b, v)
		}
	}
	str(fSessID, s.ID, "id")
	str(fSessNamespace, s.Namespace, "namespace")
	str(fSessAlias, s.Alias, "alias")
	str(fSessTitle, s.Title, "title")
	if !s.CreatedAt.IsZero() {
		b = appendSecondsNanos(b, fSessCreatedAt, s.CreatedAt.Unix(), int32(s.CreatedAt.Nanosecond()))
	}
	if !s.UpdatedAt.IsZero() {
		b = appendSecondsNanos(b, fSessUpdatedAt, s.UpdatedAt.Unix(), int32(s.UpdatedAt.Nanosecond()))
	}
	varint(fSessRevision, s.Revision)
	varint(fSessMessageCount, uint64(s.MessageCount))
	str(fSessSummary, s.Summary, "summary")
	for _, m := range []struct {
		num  protowire.Number
		name string
		kv   map[string]string
	}{{fSessMetadata, "metadata", s.Metadata}, {fSessLabels, "labels", s.Labels}} {
		for k, v := range m.kv {
			if (!utf8.ValidString(k) || !utf8.ValidString(v)) && bad == "" {
				bad = m.name
			}
			b = protowire.AppendTag(b, m.num, protowire.BytesType)
			b = protowire.AppendVarint(b, uint64(protowire.SizeTag(fMapKey)+protowire.SizeBytes(len(k))+
				protowire.SizeTag(fMapValue)+protowire.SizeBytes(len(v))))
			b = protowire.AppendTag(b, fMapKey, protowire.BytesType)
			b = protowire.AppendString(b, k)
			b = protowire.AppendTag(b, fMapValue, protowire.BytesType)
			b = protowire.AppendString(b, v)
		}
	}
	if p := s.Parent; p != nil {
		if !utf8.ValidString(p.SessionID) && bad == "" {
			bad = "parent.session_id"
		}
		size := 0
		if p.SessionID != "" {
			size += protowire.SizeTag(fForkSessionID) + protowire.SizeBytes(len(p.SessionID))
		}
		if p.MessageCount != 0 {
			size += protowire.SizeTag(fForkMessageCount) + protowire.SizeVarint(uint64(p.MessageCount))
		}
		b = protowire.AppendTag(b, fSessParent, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(size))
		if p.SessionID != "" {
			b = protowire.AppendTag(b, fForkSessionID, protowire.BytesType)
			b = protowire.AppendString(b, p.SessionID)
		}
		if p.MessageCount != 0 {
			b = protowire.AppendTag(b, fForkMessageCount, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(p.MessageCount))
		}
	}
	for _, id := range s.OpenToolCallIDs {
		if !utf8.ValidString(id) && bad == "" {
			bad = "open_tool_call_ids"
		}
		b = protowire.AppendTag(b, fSessOpenToolCallIDs, protowire.BytesType)
		b = protowire.AppendString(b, id)
	}
	if u := s.Usage; !s.Unknown && u != (storage.Usage{}) {
		b = appendVarintMessage(b, fSessUsage, uint64(u.InputTokens), uint64(u.OutputTokens), uint64(u.CachedInputTokens), uint64(u.ReasoningTokens))
	}
	for _, m := range s.Models {
		if !utf8.ValidString(m) && bad == "" {
			bad = "models"
		}
		b = protowire.AppendTag(b, fSessModels, protowire.BytesType)
		b = protowire.AppendString(b, m)
	}
	if d := s.ExpireAfter; d != 0 {
		b = appendSecondsNanos(b, fSessExpireAfter, int64(d/time.Second), int32(d%time.Second))
	}
	if bad != "" {
		return nil, fmt.Errorf("session %s: %s: %w", s.ID, bad, errListUTF8)
	}
	return b, nil
}

// appendSecondsNanos appends a google.protobuf.Timestamp or Duration field.
func appendSecondsNanos(b []byte, num protowire.Number, sec int64, nanos int32) []byte {
	return appendVarintMessage(b, num, uint64(sec), uint64(int64(nanos)))
}

// appendVarintMessage appends field num: a message whose fields 1, 2, ...
// are the varints vs, the zero ones left out (proto3).
func appendVarintMessage(b []byte, num protowire.Number, vs ...uint64) []byte {
	size := 0
	for i, v := range vs {
		if v != 0 {
			size += protowire.SizeTag(protowire.Number(i+1)) + protowire.SizeVarint(v)
		}
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(size))
	for i, v := range vs {
		if v != 0 {
			b = protowire.AppendTag(b, protowire.Number(i+1), protowire.VarintType)
			b = protowire.AppendVarint(b, v)
		}
	}
	return b
}
