package client

import (
	"context"
	"errors"
	"io"
	"iter"
	"maps"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// Session is a session's metadata, in Go types.
type Session struct {
	ID           string
	Namespace    string
	Alias        string
	Title        string
	Summary      string
	CreatedAt    time.Time
	UpdatedAt    time.Time
	Revision     uint64
	MessageCount int64
	Metadata     map[string]string
	Labels       map[string]string
	Parent       *ForkOrigin // nil unless forked (or imported with a parent)
	// OpenToolCallIDs are the ids of the tool calls the session's assistant
	// messages made that no ROLE_TOOL message answers yet, in order.
	OpenToolCallIDs []string
	// Usage is the sum of every message's usage; nil when it is zero (or not
	// known yet: a session stored by a daemon that kept no totals, not
	// written to since).
	Usage *sessiondv1.Usage
	// Models are the models the messages name, most recently used first.
	Models []string
	// ExpireAfter is the session's idle time to live (0: none of its own).
	ExpireAfter time.Duration
	// TitleDerived is set when no title was given and Title is the first
	// line of the first user message.
	TitleDerived bool
	// ContextMessageCount is how many messages the context view
	// (ViewContext) holds: MessageCount without a compaction.
	ContextMessageCount int64
	// Compaction is the latest compaction's range (see Client.Compact);
	// nil when the session has none.
	Compaction *sessiondv1.Compaction
	// PageToken is set by List: pass it as ListOptions.PageToken to resume
	// just after this session.
	PageToken string
}

// ForkOrigin says which session (in the same namespace) a fork came from and
// how many of its messages it copied.
type ForkOrigin struct {
	SessionID    string
	MessageCount int64
}

// Ref returns a reference to s by id, in s's namespace.
func (s *Session) Ref() Ref { return ID(s.ID).In(s.Namespace) }

func sessionFromProto(p *sessiondv1.Session) *Session {
	if p == nil {
		return nil
	}
	s := &Session{
		ID:           p.GetId(),
		Namespace:    p.GetNamespace(),
		Alias:        p.GetAlias(),
		Title:        p.GetTitle(),
		TitleDerived: p.GetTitleDerived(),
		Summary:      p.GetSummary(),
		Revision:     p.GetRevision(),
		MessageCount: p.GetMessageCount(),
		Metadata:     maps.Clone(p.GetMetadata()),
		Labels:       maps.Clone(p.GetLabels()),
	}
	if p.CreatedAt != nil {
		s.CreatedAt = p.CreatedAt.AsTime()
	}
	if p.UpdatedAt != nil {
		s.UpdatedAt = p.UpdatedAt.AsTime()
	}
	if p.Parent != nil {
		s.Parent = &ForkOrigin{SessionID: p.Parent.GetSessionId(), MessageCount: p.Parent.GetMessageCount()}
	}
	s.OpenToolCallIDs, s.Models = slices.Clone(p.GetOpenToolCallIds()), slices.Clone(p.GetModels())
	if p.Usage != nil {
		s.Usage = proto.CloneOf(p.Usage)
	}
	if p.ExpireAfter != nil {
		s.ExpireAfter = p.ExpireAfter.AsDuration()
	}
	s.ContextMessageCount = p.GetContextMessageCount()
	if p.Compaction != nil {
		s.Compaction = proto.CloneOf(p.Compaction)
	}
	return s
}

func tsOrNil(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// CreateOptions describe a new session. Every field is optional.
type CreateOptions struct {
	// ID is a client-chosen UUID; a retried create with the same ID and
	// options returns the session instead of making a second one.
	ID       string
	Alias    string
	Title    string
	Summary  string
	Metadata map[string]string
	Labels   map[string]string
	Messages []*sessiondv1.Message
	// CreatedAt and Parent are for imports.
	CreatedAt time.Time
	Parent    *ForkOrigin
	// ExpireAfter is the idle time to live: the daemon deletes the session
	// once it has not been updated for this long (0: none of its own).
	ExpireAfter time.Duration
}

// Create makes a session in c's namespace. A taken alias or id is
// ErrAliasInUse.
func (c *Client) Create(ctx context.Context, o CreateOptions) (*Session, error) {
	req := &sessiondv1.CreateSessionRequest{
		Namespace: c.namespace,
		Id:        o.ID,
		Alias:     o.Alias,
		Title:     o.Title,
		Summary:   o.Summary,
		Metadata:  o.Metadata,
		Labels:    o.Labels,
		Messages:  o.Messages,
		CreatedAt: tsOrNil(o.CreatedAt),
	}
	if o.ExpireAfter != 0 {
		req.ExpireAfter = durationpb.New(o.ExpireAfter)
	}
	if o.Parent != nil {
		req.Parent = &sessiondv1.ForkOrigin{SessionId: o.Parent.SessionID, MessageCount: o.Parent.MessageCount}
	}
	return sessionCall(ctx, c, rpcCreate, c.conn.rpc.CreateSession, req)
}

// Get returns a session's metadata.
func (c *Client) Get(ctx context.Context, r Ref) (*Session, error) {
	return sessionCall(ctx, c, rpcGet, c.conn.rpc.GetSession, &sessiondv1.GetSessionRequest{Ref: c.ref(r)})
}

// LoadOptions select which messages Load returns. The zero value means all.
type LoadOptions struct {
	Offset int64 // messages to skip from the start
	Limit  int64 // at most this many; 0 means all
	Tail   bool  // the last Limit messages instead (Offset must be 0)
	// CloseOpenToolCalls asks for a synthetic ROLE_TOOL result (metadata
	// "sessiond.synthetic": "true", content saying the call was interrupted)
	// after each assistant message whose tool calls no stored result
	// answers, so that the history is one a model API accepts. The daemon
	// stores nothing; Offset and Limit count stored messages.
	CloseOpenToolCalls bool
	// View selects the messages: ViewFull (the zero value's meaning) every
	// stored message, ViewContext what to send a model (the latest
	// compaction's summary, then the messages after its range). Offset,
	// Limit and Tail count within the view.
	View LoadView
}

// LoadView selects the messages a load returns (LoadOptions.View).
type LoadView = sessiondv1.LoadView

// The views of a session's messages.
const (
	ViewFull    = sessiondv1.LoadView_LOAD_VIEW_FULL
	ViewContext = sessiondv1.LoadView_LOAD_VIEW_CONTEXT
)

// Load returns a session's metadata and the messages o selects.
func (c *Client) Load(ctx context.Context, r Ref, o LoadOptions) (*Session, []*sessiondv1.Message, error) {
	var (
		sess *Session
		msgs []*sessiondv1.Message
	)
	err := c.load(ctx, r, o, func(s *Session) { sess = s }, func(m *sessiondv1.Message) bool {
		msgs = append(msgs, m)
		return true
	})
	if err != nil {
		return nil, nil, err
	}
	return sess, msgs, nil
}

// LoadMessages streams a session's messages as LoadSession sends them, in
// batches that each stay under gRPC's message limits. Breaking out of the
// loop ends the stream.
func (c *Client) LoadMessages(ctx context.Context, r Ref, o LoadOptions) iter.Seq2[*sessiondv1.Message, error] {
	return func(yield func(*sessiondv1.Message, error) bool) {
		stopped := false
		err := c.load(ctx, r, o, nil, func(m *sessiondv1.Message) bool {
			if !yield(m, nil) {
				stopped = true
				return false
			}
			return true
		})
		if err != nil && !stopped {
			yield(nil, err)
		}
	}
}

func (c *Client) load(ctx context.Context, r Ref, o LoadOptions, onSession func(*Session), onMsg func(*sessiondv1.Message) bool) error {
	req := &sessiondv1.LoadSessionRequest{
		Ref: c.ref(r), Offset: o.Offset, Limit: o.Limit, Tail: o.Tail, CloseOpenToolCalls: o.CloseOpenToolCalls, View: o.View,
	}
	frames := streamSeq(ctx, c, rpcLoad, c.conn.rpc.LoadSession, req, func(f *sessiondv1.LoadSessionResponse) *sessiondv1.LoadSessionResponse { return f })
	for frame, err := range frames {
		if err != nil {
			return err
		}
		if frame.Session != nil && onSession != nil {
			onSession(sessionFromProto(frame.Session))
		}
		for _, m := range frame.GetMessages() {
			if !onMsg(m) {
				return nil
			}
		}
	}
	return nil
}

// ListOptions filter List. The zero value lists the whole namespace.
type ListOptions struct {
	AliasPrefix   string
	Labels        map[string]string // every pair must match
	UpdatedAfter  time.Time         // exclusive
	UpdatedBefore time.Time         // exclusive
	Limit         int64             // 0 means all
	PageToken     string            // a Session.PageToken to resume after
	Model         string            // only sessions with a message by this model
}

// List streams the sessions of c's namespace, newest-updated first.
func (c *Client) List(ctx context.Context, o ListOptions) iter.Seq2[*Session, error] {
	req := &sessiondv1.ListSessionsRequest{
		Namespace:     c.namespace,
		AliasPrefix:   o.AliasPrefix,
		Labels:        o.Labels,
		UpdatedAfter:  tsOrNil(o.UpdatedAfter),
		UpdatedBefore: tsOrNil(o.UpdatedBefore),
		Limit:         o.Limit,
		PageToken:     o.PageToken,
		Model:         o.Model,
	}
	return streamSeq(ctx, c, rpcList, c.conn.rpc.ListSessions, req, func(frame *sessiondv1.ListSessionsResponse) *Session {
		s := sessionFromProto(frame.GetSession())
		s.PageToken = frame.GetNextPageToken()
		return s
	})
}

// unary makes the unary call of op, failing without a call on a closed
// Client, and maps its error.
func unary[Req, Resp any](ctx context.Context, c *Client, op rpc,
	call func(context.Context, Req, ...grpc.CallOption) (Resp, error), req Req) (Resp, error) {
	var zero Resp
	if err := c.check(op); err != nil {
		return zero, err
	}
	resp, err := call(ctx, req)
	if err != nil {
		return zero, mapError(ctx, op, err)
	}
	return resp, nil
}

// sessionCall is unary for the calls that answer a session.
func sessionCall[Req any, Resp interface{ GetSession() *sessiondv1.Session }](ctx context.Context, c *Client, op rpc,
	call func(context.Context, Req, ...grpc.CallOption) (Resp, error), req Req) (*Session, error) {
	resp, err := unary(ctx, c, op, call, req)
	if err != nil {
		return nil, err
	}
	return sessionFromProto(resp.GetSession()), nil
}

// streamSeq runs the server-streaming call of op as an iterator: one value,
// made by conv, for each frame. An error ends the sequence; so does the loop
// breaking, which cancels the call.
func streamSeq[Req, Frame, T any](
	ctx context.Context, c *Client, op rpc,
	call func(context.Context, *Req, ...grpc.CallOption) (grpc.ServerStreamingClient[Frame], error),
	req *Req, conv func(*Frame) T,
) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		var zero T
		if err := c.check(op); err != nil {
			yield(zero, err)
			return
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stream, err := call(ctx, req)
		if err != nil {
			yield(zero, mapError(ctx, op, err))
			return
		}
		for {
			frame, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				yield(zero, mapError(ctx, op, err))
				return
			}
			if !yield(conv(frame), nil) {
				return
			}
		}
	}
}

// SaveOptions are the whole new content of a session for Save.
type SaveOptions struct {
	// ExpectedRevision, if non-zero, makes the save fail with ErrConflict
	// unless the session is at this revision.
	ExpectedRevision uint64
	Title            string
	Summary          string
	Metadata         map[string]string
	Messages         []*sessiondv1.Message
	// CreateIfMissing creates the session (with the ref's id or alias).
	CreateIfMissing bool
}

// saveFrameBytes is the payload of messages one SaveSession frame carries: a
// bigger message travels alone. 1 MiB keeps every frame under the 4 MiB
// default receive limit of gRPC servers.
const saveFrameBytes = 1 << 20

// Save replaces a session's messages, title, summary and metadata with o's,
// atomically (alias and labels stay). Messages stream in frames of about
// 1 MiB.
func (c *Client) Save(ctx context.Context, r Ref, o SaveOptions) (*Session, error) {
	return c.save(ctx, &sessiondv1.SaveSessionHeader{
		Ref:              c.ref(r),
		ExpectedRevision: o.ExpectedRevision,
		Title:            o.Title,
		Summary:          o.Summary,
		Metadata:         o.Metadata,
		CreateIfMissing:  o.CreateIfMissing,
	}, o.Messages)
}

func (c *Client) save(ctx context.Context, hdr *sessiondv1.SaveSessionHeader, msgs []*sessiondv1.Message) (*Session, error) {
	if err := c.check(rpcSave); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.conn.rpc.SaveSession(ctx)
	if err != nil {
		return nil, mapError(ctx, rpcSave, err)
	}
	frame := &sessiondv1.SaveSessionRequest{Header: hdr}
	size := 0
	for _, m := range msgs {
		n := proto.Size(m)
		if len(frame.Messages) > 0 && size+n > saveFrameBytes {
			if err := stream.Send(frame); err != nil {
				break // the real error comes from CloseAndRecv
			}
			frame, size = &sessiondv1.SaveSessionRequest{}, 0
		}
		frame.Messages = append(frame.Messages, m)
		size += n
	}
	// A send error means the server ended the stream; CloseAndRecv returns
	// the status it ended it with.
	_ = stream.Send(frame)
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return nil, mapError(ctx, rpcSave, err)
	}
	return sessionFromProto(resp.GetSession()), nil
}

// AppendResult is a session's state after an append.
type AppendResult struct {
	Revision     uint64
	MessageCount int64
	// Appended is how many of the batch's messages the append stored.
	Appended int64
}

// Append appends msgs atomically. A message whose id is already stored with
// the same content is skipped, so only the others are stored and a retry
// after a timeout never duplicates a message; if every message is already
// stored the append is a no-op that succeeds with the current state.
// Messages without ids get server-made ones and lose that guarantee. A
// non-zero expectedRevision makes an append of new messages fail with
// ErrConflict unless the session is at that revision; a stored id with other
// content is ErrMessageConflict.
func (c *Client) Append(ctx context.Context, r Ref, expectedRevision uint64, msgs ...*sessiondv1.Message) (AppendResult, error) {
	return c.append(ctx, &sessiondv1.AppendMessagesRequest{Ref: c.ref(r), Messages: msgs, ExpectedRevision: expectedRevision})
}

func (c *Client) append(ctx context.Context, req *sessiondv1.AppendMessagesRequest) (AppendResult, error) {
	resp, err := unary(ctx, c, rpcAppend, c.conn.rpc.AppendMessages, req)
	if err != nil {
		return AppendResult{}, err
	}
	return AppendResult{Revision: resp.GetRevision(), MessageCount: resp.GetMessageCount(), Appended: resp.GetAppendedCount()}, nil
}

// UpdateOption selects a field for Update to change.
type UpdateOption func(*sessiondv1.UpdateSessionRequest)

func setField(path string, set func(*sessiondv1.Session)) UpdateOption {
	return func(r *sessiondv1.UpdateSessionRequest) {
		set(r.Session)
		r.UpdateMask.Paths = append(r.UpdateMask.Paths, path)
	}
}

// SetAlias renames the session; "" removes its alias.
func SetAlias(alias string) UpdateOption {
	return setField("alias", func(s *sessiondv1.Session) { s.Alias = alias })
}

// SetTitle changes the title.
func SetTitle(title string) UpdateOption {
	return setField("title", func(s *sessiondv1.Session) { s.Title = title })
}

// SetSummary changes the summary.
func SetSummary(summary string) UpdateOption {
	return setField("summary", func(s *sessiondv1.Session) { s.Summary = summary })
}

// SetMetadata replaces the metadata.
func SetMetadata(md map[string]string) UpdateOption {
	return setField("metadata", func(s *sessiondv1.Session) { s.Metadata = md })
}

// SetLabels replaces the labels.
func SetLabels(labels map[string]string) UpdateOption {
	return setField("labels", func(s *sessiondv1.Session) { s.Labels = labels })
}

// SetExpireAfter changes the idle time to live; 0 removes the session's own.
func SetExpireAfter(d time.Duration) UpdateOption {
	return setField("expire_after", func(s *sessiondv1.Session) {
		if d != 0 {
			s.ExpireAfter = durationpb.New(d)
		}
	})
}

// IfRevision makes the update fail with ErrConflict unless the session is at
// revision rev.
func IfRevision(rev uint64) UpdateOption {
	return func(r *sessiondv1.UpdateSessionRequest) { r.ExpectedRevision = rev }
}

// Update changes the fields the options select; with none it is ErrInvalid.
// A taken alias is ErrAliasInUse.
func (c *Client) Update(ctx context.Context, r Ref, opts ...UpdateOption) (*Session, error) {
	req := &sessiondv1.UpdateSessionRequest{
		Ref:        c.ref(r),
		Session:    &sessiondv1.Session{},
		UpdateMask: &fieldmaskpb.FieldMask{},
	}
	for _, o := range opts {
		o(req)
	}
	return c.update(ctx, req)
}

func (c *Client) update(ctx context.Context, req *sessiondv1.UpdateSessionRequest) (*Session, error) {
	return sessionCall(ctx, c, rpcUpdate, c.conn.rpc.UpdateSession, req)
}

// Delete removes a session. A non-zero expectedRevision makes it fail with
// ErrConflict unless the session is at that revision.
func (c *Client) Delete(ctx context.Context, r Ref, expectedRevision uint64) error {
	_, err := unary(ctx, c, rpcDelete, c.conn.rpc.DeleteSession, &sessiondv1.DeleteSessionRequest{Ref: c.ref(r), ExpectedRevision: expectedRevision})
	return err
}

// ForkOptions describe a fork. The zero value copies every message and the
// title.
type ForkOptions struct {
	MessageCount int64  // how many first messages to copy; 0 means all
	Alias        string // optional alias of the new session
	Title        string // default the source's title
}

// Fork copies a session's first messages into a new session of the same
// namespace. A MessageCount beyond the session is ErrInvalid; a taken alias
// is ErrAliasInUse.
func (c *Client) Fork(ctx context.Context, r Ref, o ForkOptions) (*Session, error) {
	return sessionCall(ctx, c, rpcFork, c.conn.rpc.ForkSession, &sessiondv1.ForkSessionRequest{
		Ref: c.ref(r), MessageCount: o.MessageCount, Alias: o.Alias, Title: o.Title,
	})
}

// Rewind keeps a session's first keep messages (0 clears them all). More
// than the session holds is ErrInvalid.
func (c *Client) Rewind(ctx context.Context, r Ref, keep int64, expectedRevision uint64) (*Session, error) {
	return sessionCall(ctx, c, rpcRewind, c.conn.rpc.RewindSession, &sessiondv1.RewindSessionRequest{
		Ref: c.ref(r), MessageCount: keep, ExpectedRevision: expectedRevision,
	})
}

// SearchHit is one match of Search.
type SearchHit struct {
	Session      *Session
	MessageIndex int64 // -1 for a hit in the title, alias or summary
	Snippet      string
}

// Search streams the hits of query (case-insensitive) in c's namespace;
// limit 0 means all.
func (c *Client) Search(ctx context.Context, query string, limit int64) iter.Seq2[SearchHit, error] {
	req := &sessiondv1.SearchSessionsRequest{Namespace: c.namespace, Query: query, Limit: limit}
	return streamSeq(ctx, c, rpcSearch, c.conn.rpc.SearchSessions, req, func(frame *sessiondv1.SearchSessionsResponse) SearchHit {
		return SearchHit{
			Session:      sessionFromProto(frame.GetSession()),
			MessageIndex: frame.GetMessageIndex(),
			Snippet:      frame.GetSnippet(),
		}
	})
}

// EventType says what kind of change an Event reports.
type EventType = sessiondv1.EventType

// The kinds of change, as the proto names them.
const (
	EventAppended = sessiondv1.EventType_EVENT_TYPE_APPENDED
	EventReplaced = sessiondv1.EventType_EVENT_TYPE_REPLACED
	EventUpdated  = sessiondv1.EventType_EVENT_TYPE_UPDATED
	EventDeleted  = sessiondv1.EventType_EVENT_TYPE_DELETED
	EventDelta    = sessiondv1.EventType_EVENT_TYPE_DELTA
	EventFinished = sessiondv1.EventType_EVENT_TYPE_FINISHED
)

// Event is one change to a watched session.
type Event struct {
	Type     EventType
	Revision uint64
	Session  *Session                 // metadata after the change
	Messages []*sessiondv1.Message    // the appended ones (EventAppended), the closed one (EventFinished)
	Delta    *sessiondv1.MessageDelta // what was added to an open message, for EventDelta
}

// Watch streams a session's changes after fromRevision (0 = from now) until
// ctx ends, the loop breaks, or the session is deleted (EventDeleted is the
// last event). ErrWatchReset means: Load the session, then watch again from
// its current revision.
func (c *Client) Watch(ctx context.Context, r Ref, fromRevision uint64) iter.Seq2[Event, error] {
	req := &sessiondv1.WatchSessionRequest{Ref: c.ref(r), FromRevision: fromRevision}
	return streamSeq(ctx, c, rpcWatch, c.conn.rpc.WatchSession, req, func(frame *sessiondv1.WatchSessionResponse) Event {
		return Event{
			Type:     frame.GetType(),
			Revision: frame.GetRevision(),
			Session:  sessionFromProto(frame.GetSession()),
			Messages: frame.GetMessages(),
			Delta:    frame.GetDelta(),
		}
	})
}

// ServerInfo describes the daemon.
type ServerInfo struct {
	Version string
	Backend string // "file" or "postgres"
	Limits  *sessiondv1.ServerLimits
}

// ServerInfo returns the daemon's version, backend and limits.
func (c *Client) ServerInfo(ctx context.Context) (*ServerInfo, error) {
	resp, err := unary(ctx, c, rpcInfo, c.conn.rpc.GetServerInfo, &sessiondv1.GetServerInfoRequest{})
	if err != nil {
		return nil, err
	}
	return &ServerInfo{Version: resp.GetVersion(), Backend: resp.GetBackend(), Limits: resp.GetLimits()}, nil
}
