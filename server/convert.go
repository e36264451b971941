package server

import (
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// This file is the one place where proto types become storage types and
// back. Messages cross unchanged: storage keeps the generated Message as its
// payload so that fields this daemon does not know survive. Conversions do
// not validate; handlers validate the converted values.

func timeFromProto(ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{}
	}
	return ts.AsTime()
}

func timeToProto(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// timeInto sets ts to t and returns it; the zero time is nil, as in
// timeToProto.
func timeInto(ts *timestamppb.Timestamp, t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	ts.Seconds, ts.Nanos = t.Unix(), int32(t.Nanosecond())
	return ts
}

func refFromProto(r *sessiondv1.SessionRef) storage.Ref {
	return storage.Ref{Namespace: r.GetNamespace(), ID: r.GetId(), Alias: r.GetAlias()}
}

func forkOriginFromProto(p *sessiondv1.ForkOrigin) *storage.ForkOrigin {
	if p == nil {
		return nil
	}
	return &storage.ForkOrigin{SessionID: p.GetSessionId(), MessageCount: p.GetMessageCount()}
}

func forkOriginToProto(p *storage.ForkOrigin) *sessiondv1.ForkOrigin {
	if p == nil {
		return nil
	}
	return &sessiondv1.ForkOrigin{SessionId: p.SessionID, MessageCount: p.MessageCount}
}

// sessionToProto converts metadata; messages are left empty, as every
// metadata-only answer has them.
func sessionToProto(s *storage.Session) *sessiondv1.Session {
	if s == nil {
		return nil
	}
	return sessionInto(new(sessiondv1.Session), s, timeToProto(s.CreatedAt), timeToProto(s.UpdatedAt))
}

// sessionInto sets the fields of p, a new message, from s, with the
// timestamps given, and returns p.
func sessionInto(p *sessiondv1.Session, s *storage.Session, created, updated *timestamppb.Timestamp) *sessiondv1.Session {
	p.Id = s.ID
	p.Namespace = s.Namespace
	p.Alias = s.Alias
	p.Title = s.Title
	p.CreatedAt = created
	p.UpdatedAt = updated
	p.Revision = s.Revision
	p.MessageCount = s.MessageCount
	p.Summary = s.Summary
	p.Metadata = s.Metadata
	p.Labels = s.Labels
	p.Parent = forkOriginToProto(s.Parent)
	// The tally. Usage is left out when it is all zero (or unknown), as
	// proto3 leaves out every zero value: a client's getters read 0.
	p.OpenToolCallIds = s.OpenToolCallIDs
	p.Usage = usageToProto(s.Tally)
	p.Models = s.Models
	p.ExpireAfter = durationToProto(s.ExpireAfter)
	p.TitleDerived = s.TitleDerived
	// Compactions.
	p.ContextMessageCount = s.ContextMessageCount()
	p.Compaction = compactionToProto(s.Compaction)
	return p
}

func compactionToProto(c *storage.Compaction) *sessiondv1.Compaction {
	if c == nil {
		return nil
	}
	return &sessiondv1.Compaction{ThroughMessageCount: c.ThroughCount, ThroughMessageId: c.ThroughID,
		Revision: c.Revision, CreatedAt: timeToProto(c.CreatedAt), SummaryMessageId: c.SummaryID}
}

// loadViews maps the API's views to storage's; a value missing here is one
// this daemon does not know, which validLoad refuses.
var loadViews = map[sessiondv1.LoadView]storage.LoadView{
	sessiondv1.LoadView_LOAD_VIEW_UNSPECIFIED: storage.ViewFull,
	sessiondv1.LoadView_LOAD_VIEW_FULL:        storage.ViewFull,
	sessiondv1.LoadView_LOAD_VIEW_CONTEXT:     storage.ViewContext,
}

func loadViewFromProto(v sessiondv1.LoadView) storage.LoadView {
	if lv, ok := loadViews[v]; ok {
		return lv
	}
	return storage.LoadView(255)
}

func compactFromProto(ref storage.Ref, r *sessiondv1.CompactSessionRequest) storage.CompactRequest {
	return storage.CompactRequest{
		Ref:              ref,
		ThroughMessageID: r.GetThroughMessageId(),
		Summary:          r.GetSummary(),
		ExpectedRevision: r.GetExpectedRevision(),
	}
}

func usageToProto(t storage.Tally) *sessiondv1.Usage {
	if t.Unknown || t.Usage == (storage.Usage{}) {
		return nil
	}
	u := t.Usage
	return &sessiondv1.Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
		CachedInputTokens: u.CachedInputTokens, ReasoningTokens: u.ReasoningTokens}
}

func durationToProto(d time.Duration) *durationpb.Duration {
	if d == 0 {
		return nil
	}
	return durationpb.New(d)
}

// durationFromProto converts a duration validDuration accepted; unset is 0.
func durationFromProto(d *durationpb.Duration) time.Duration {
	if d == nil {
		return 0
	}
	return d.AsDuration()
}

func createFromProto(r *sessiondv1.CreateSessionRequest) storage.CreateRequest {
	return storage.CreateRequest{
		Namespace: r.GetNamespace(),
		ID:        r.GetId(),
		Alias:     r.GetAlias(),
		Title:     r.GetTitle(),
		Summary:   r.GetSummary(),
		Metadata:  r.GetMetadata(),
		Labels:    r.GetLabels(),
		Messages:  r.GetMessages(),
		CreatedAt: timeFromProto(r.GetCreatedAt()),
		Parent:    forkOriginFromProto(r.GetParent()),
		Revision:  r.GetRevision(),
		// validDuration has checked it.
		ExpireAfter: durationFromProto(r.GetExpireAfter()),
	}
}

func loadOptionsFromProto(r *sessiondv1.LoadSessionRequest) storage.LoadOptions {
	return storage.LoadOptions{Offset: r.GetOffset(), Limit: r.GetLimit(), Tail: r.GetTail(), CloseOpenToolCalls: r.GetCloseOpenToolCalls(),
		View: loadViewFromProto(r.GetView())}
}

func listOptionsFromProto(r *sessiondv1.ListSessionsRequest, after *storage.Cursor) storage.ListOptions {
	return storage.ListOptions{
		Namespace:     r.GetNamespace(),
		AliasPrefix:   r.GetAliasPrefix(),
		Labels:        r.GetLabels(),
		UpdatedAfter:  timeFromProto(r.GetUpdatedAfter()),
		UpdatedBefore: timeFromProto(r.GetUpdatedBefore()),
		Limit:         r.GetLimit(),
		After:         after,
		Model:         r.GetModel(),
	}
}

// listFrame is one ListSessions frame with its session and timestamps.
type listFrame struct {
	resp             sessiondv1.ListSessionsResponse
	sess             sessiondv1.Session
	created, updated timestamppb.Timestamp
}

// listFrameToProto builds s's ListSessions frame in f and returns it. The
// frame shares s's maps and slices, which it only reads.
func (f *listFrame) listFrameToProto(s *storage.Session) *sessiondv1.ListSessionsResponse {
	f.resp.Session = sessionInto(&f.sess, s, timeInto(&f.created, s.CreatedAt), timeInto(&f.updated, s.UpdatedAt))
	f.resp.NextPageToken = encodePageToken(storage.Cursor{UpdatedAt: s.UpdatedAt, ID: s.ID})
	return &f.resp
}

// listChunk is the size of the buffers a listing encodes its frames into.
const listChunk = 64 << 10

// listEncoder encodes a listing's frames, one after another, with one
// frame built in place for them all and the encodings sharing buffers: a
// listing allocates per buffer, not per session. An encoding is never
// written again once returned, so gRPC may send it after Send returns.
type listEncoder struct {
	frame listFrame
	buf   []byte
}

// encode returns the wire encoding of s's ListSessions frame.
func (e *listEncoder) encode(s *storage.Session) ([]byte, error) {
	e.frame = listFrame{}
	m := e.frame.listFrameToProto(s)
	n := proto.Size(m)
	if cap(e.buf)-len(e.buf) < n {
		e.buf = make([]byte, 0, max(listChunk, n))
	}
	start := len(e.buf)
	b, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(e.buf, m)
	if err != nil {
		return nil, err
	}
	e.buf = b
	return b[start:len(b):len(b)], nil
}

// saveFromProto builds a save from a stream's header and all its messages.
func saveFromProto(ref storage.Ref, h *sessiondv1.SaveSessionHeader, msgs []*sessiondv1.Message) storage.SaveRequest {
	return storage.SaveRequest{
		Ref:              ref,
		ExpectedRevision: h.GetExpectedRevision(),
		Title:            h.GetTitle(),
		Summary:          h.GetSummary(),
		Metadata:         h.GetMetadata(),
		Messages:         msgs,
		CreateIfMissing:  h.GetCreateIfMissing(),
	}
}

// updateFields maps update_mask paths to storage's field set.
var updateFields = map[string]storage.UpdateField{
	"alias":    storage.UpdateAlias,
	"title":    storage.UpdateTitle,
	"summary":  storage.UpdateSummary,
	"metadata": storage.UpdateMetadata,
	"labels":   storage.UpdateLabels,
	// Unset in the request's session removes the session's own time to live.
	"expire_after": storage.UpdateExpireAfter,
}

func updateFromProto(ref storage.Ref, r *sessiondv1.UpdateSessionRequest, fields storage.UpdateField) storage.UpdateRequest {
	s := r.GetSession()
	return storage.UpdateRequest{
		Ref:              ref,
		ExpectedRevision: r.GetExpectedRevision(),
		Fields:           fields,
		Alias:            s.GetAlias(),
		Title:            s.GetTitle(),
		Summary:          s.GetSummary(),
		Metadata:         s.GetMetadata(),
		Labels:           s.GetLabels(),
		ExpireAfter:      durationFromProto(s.GetExpireAfter()),
	}
}

func forkFromProto(ref storage.Ref, r *sessiondv1.ForkSessionRequest) storage.ForkRequest {
	return storage.ForkRequest{
		Ref:          ref,
		MessageCount: r.GetMessageCount(),
		Alias:        r.GetAlias(),
		Title:        r.GetTitle(),
	}
}

func rewindFromProto(ref storage.Ref, r *sessiondv1.RewindSessionRequest) storage.RewindRequest {
	return storage.RewindRequest{
		Ref:              ref,
		MessageCount:     r.GetMessageCount(),
		ExpectedRevision: r.GetExpectedRevision(),
	}
}

func searchFromProto(r *sessiondv1.SearchSessionsRequest) storage.SearchOptions {
	return storage.SearchOptions{Namespace: r.GetNamespace(), Query: r.GetQuery(), Limit: r.GetLimit()}
}

func searchHitToProto(h storage.SearchHit) *sessiondv1.SearchSessionsResponse {
	return &sessiondv1.SearchSessionsResponse{
		Session:      sessionToProto(h.Session),
		MessageIndex: h.MessageIndex,
		Snippet:      h.Snippet,
	}
}

var eventTypes = map[storage.EventType]sessiondv1.EventType{
	storage.EventAppended:  sessiondv1.EventType_EVENT_TYPE_APPENDED,
	storage.EventReplaced:  sessiondv1.EventType_EVENT_TYPE_REPLACED,
	storage.EventUpdated:   sessiondv1.EventType_EVENT_TYPE_UPDATED,
	storage.EventDeleted:   sessiondv1.EventType_EVENT_TYPE_DELETED,
	storage.EventCompacted: sessiondv1.EventType_EVENT_TYPE_COMPACTED,
	storage.EventDelta:     sessiondv1.EventType_EVENT_TYPE_DELTA,
	storage.EventFinished:  sessiondv1.EventType_EVENT_TYPE_FINISHED,
}

func eventToProto(ev storage.Event) *sessiondv1.WatchSessionResponse {
	return &sessiondv1.WatchSessionResponse{
		Type:     eventTypes[ev.Type],
		Revision: ev.Revision,
		Messages: ev.Messages,
		Session:  sessionToProto(ev.Session),
		Delta:    ev.Delta,
	}
}
