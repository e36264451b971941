package server

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

const (
	mLoad   = "LoadSession"
	mList   = "ListSessions"
	mSave   = "SaveSession"
	mSearch = "SearchSessions"
	mWatch  = "WatchSession"
)

// loadBatchBytes is the encoded size LoadSession aims to keep each frame
// under, far below the 4 MiB receive limit every gRPC client has by default,
// so that a session of any length loads through a default client. A message
// bigger than this travels alone in its frame.
const loadBatchBytes = 1 << 20

// LoadSession implements SessionStoreService.
func (s *Server) LoadSession(req *sessiondv1.LoadSessionRequest, stream grpc.ServerStreamingServer[sessiondv1.LoadSessionResponse]) error {
	ctx := stream.Context()
	ref, err := refArg("ref", req.GetRef())
	if err != nil {
		return s.toStatus(mLoad, err)
	}
	select {
	case s.loads <- struct{}{}:
		defer func() { <-s.loads }()
	default:
		st := status.Newf(codes.ResourceExhausted, "max_concurrent_loads: %d LoadSession calls are in progress, the most this daemon serves at once; retry later", cap(s.loads))
		if d, err := st.WithDetails(errorInfo(ReasonTooManyCalls, map[string]string{"limit": "max_concurrent_loads", "max": strconv.Itoa(cap(s.loads))})); err == nil {
			st = d
		}
		return st.Err()
	}
	// Frames are built as the store decodes messages, and sent when full:
	// a reader that stops reading holds one frame, not the session.
	var frame *sessiondv1.LoadSessionResponse
	size := 0
	err = s.store.LoadStream(ctx, ref, loadOptionsFromProto(req), func(sess *storage.Session) error {
		frame = &sessiondv1.LoadSessionResponse{Session: sessionToProto(sess)}
		size = proto.Size(frame)
		return nil
	}, func(m *sessiondv1.Message) error {
		// The size a message adds to its frame: field tag, length, body.
		n := 1 + protowire.SizeBytes(proto.Size(m))
		if size+n > loadBatchBytes && (frame.Session != nil || len(frame.Messages) > 0) {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := stream.Send(frame); err != nil {
				return err
			}
			frame, size = &sessiondv1.LoadSessionResponse{}, 0
		}
		frame.Messages = append(frame.Messages, m)
		size += n
		return nil
	})
	if err != nil {
		return s.refStatus(mLoad, &ref, err)
	}
	return s.toStatus(mLoad, stream.Send(frame))
}

// ListSessions implements SessionStoreService.
func (s *Server) ListSessions(req *sessiondv1.ListSessionsRequest, stream grpc.ServerStreamingServer[sessiondv1.ListSessionsResponse]) error {
	ctx := stream.Context()
	after, err := s.validList(req)
	if err != nil {
		return s.toStatus(mList, err)
	}
	opts := listOptionsFromProto(req, after)
	var enc listEncoder
	err = s.store.List(ctx, opts, func(sess *storage.Session) error {
		// Checked per session so that a client that went away stops the
		// listing now, not after the store has walked every session.
		if err := ctx.Err(); err != nil {
			return err
		}
		b, err := enc.encode(sess)
		if err != nil {
			return err
		}
		return stream.SendMsg(&encodedEvent{b: b})
	})
	return s.toStatus(mList, err)
}

func (s *Server) validList(req *sessiondv1.ListSessionsRequest) (*storage.Cursor, error) {
	if err := validTimestamp("updated_after", req.GetUpdatedAfter()); err != nil {
		return nil, err
	}
	if err := validTimestamp("updated_before", req.GetUpdatedBefore()); err != nil {
		return nil, err
	}
	if req.GetPageToken() == "" {
		return nil, nil
	}
	c, err := decodePageToken(req.GetPageToken())
	if err != nil {
		return nil, err
	}
	return &c, nil
}

// SaveSession implements SessionStoreService. The whole stream is read
// before storage is called (and checks it), so a stream that breaks off (a
// client that cancels, a connection that drops, a frame over a limit)
// changes nothing. max_session_bytes bounds what is held in memory
// meanwhile.
func (s *Server) SaveSession(stream grpc.ClientStreamingServer[sessiondv1.SaveSessionRequest, sessiondv1.SaveSessionResponse]) error {
	ctx := stream.Context()
	var (
		header *sessiondv1.SaveSessionHeader
		ref    storage.Ref
		msgs   []*sessiondv1.Message
		total  int64
	)
	for frameNo := 0; ; frameNo++ {
		frame, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return s.toStatus(mSave, err)
		}
		if frameNo == 0 {
			if header = frame.GetHeader(); header == nil {
				return s.toStatus(mSave, storage.Invalid("header", "is required in the first frame"))
			}
			if ref, err = refArg("header.ref", header.GetRef()); err != nil {
				return s.toStatus(mSave, err)
			}
		} else if frame.GetHeader() != nil {
			return s.toStatus(mSave, storage.Invalid("header", "is in frame %d; only the first frame carries it", frameNo))
		}
		for _, m := range frame.GetMessages() {
			total += int64(proto.Size(m))
		}
		if err := s.store.Limits().CheckSessionBytes("messages", total); err != nil {
			return s.toStatus(mSave, err)
		}
		msgs = append(msgs, frame.GetMessages()...)
	}
	if header == nil {
		return s.toStatus(mSave, storage.Invalid("header", "is required in the first frame"))
	}
	sess, err := s.store.Save(ctx, saveFromProto(ref, header, msgs))
	if err != nil {
		return s.refStatus(mSave, &ref, underParent("header", headerField, err))
	}
	return stream.SendAndClose(&sessiondv1.SaveSessionResponse{Session: sessionToProto(sess)})
}

// SearchSessions implements SessionStoreService.
func (s *Server) SearchSessions(req *sessiondv1.SearchSessionsRequest, stream grpc.ServerStreamingServer[sessiondv1.SearchSessionsResponse]) error {
	ctx := stream.Context()
	err := s.store.Search(ctx, searchFromProto(req), func(h storage.SearchHit) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		return stream.Send(searchHitToProto(h))
	})
	return s.toStatus(mSearch, err)
}

// WatchSession implements SessionStoreService. The response headers are sent
// once the subscription is live, so a client that waits for them knows every
// later change will reach it. The stream ends OK after EVENT_TYPE_DELETED,
// OUT_OF_RANGE when the watcher fell behind (storage.WatchBuffer events, or
// WatchQueueBytes of them, not yet sent: the store drops a slow watcher
// rather than ever blocking a writer), and UNAVAILABLE when the server
// drains or the store closes.
//
// Each event is encoded once for all the session's watchers
// (storage.Event.Encoded) and sent as those bytes (requestCodec.Marshal).
// Events are sent from a goroutine of their own, through a queue: a watcher
// that stops reading shuts its flow-control window and blocks Send, and the
// handler must still see its backlog grow. The queue counts as the
// subscription's backlog (storage.Subscription.SetBacklog), so a store
// that publishes a backlog in pages waits for the watcher to take them.
// When the queue is full the handler returns OUT_OF_RANGE without waiting
// for the blocked Send; returning makes grpc-go cancel the stream, which
// ends that Send. So a stalled watch holds at most its queue (shared with
// the session's other watchers) plus what gRPC took for its stream before
// Send blocked (about one event past its 64 KiB write quota), and never
// outlives a drain.
func (s *Server) WatchSession(req *sessiondv1.WatchSessionRequest, stream grpc.ServerStreamingServer[sessiondv1.WatchSessionResponse]) error {
	ctx := stream.Context()
	ref, err := refArg("ref", req.GetRef())
	if err != nil {
		return s.toStatus(mWatch, err)
	}
	select {
	case <-s.drained:
		return errDraining
	default:
	}
	sub, err := s.store.Watch(ctx, ref, req.GetFromRevision())
	if err != nil {
		return s.refStatus(mWatch, &ref, err)
	}
	defer sub.Close()
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return s.toStatus(mWatch, err)
	}
	w := startWatchSender(stream)
	sub.SetBacklog(func() int { return len(w.queue) })
	for {
		select {
		case <-ctx.Done():
			return w.stop(s.toStatus(mWatch, ctx.Err()))
		case <-s.drained:
			return w.stop(errDraining)
		case <-w.done:
			return s.toStatus(mWatch, w.err)
		case ev, ok := <-sub.Events():
			if !ok {
				if err := sub.Err(); err != nil {
					return w.stop(s.refStatus(mWatch, &ref, err))
				}
				// Ended on purpose (the session was deleted): the events
				// queued before the end still go out, then the stream
				// ends OK.
				close(w.queue)
				select {
				case <-w.done:
					return s.toStatus(mWatch, w.err)
				case <-ctx.Done():
					return w.stop(s.toStatus(mWatch, ctx.Err()))
				case <-s.drained:
					return w.stop(errDraining)
				}
			}
			b, err := ev.Encoded(encodeEvent)
			if err != nil {
				return w.stop(s.toStatus(mWatch, err))
			}
			if err := w.enqueue(b); err != nil {
				return w.stop(s.refStatus(mWatch, &ref, err))
			}
		}
	}
}

// WatchQueueBytes bounds the encoded events a watch may have queued and not
// yet sent, besides the storage.WatchBuffer events: past it the watch ends
// OUT_OF_RANGE, so that a stalled watcher of a session receiving large
// appends pins a few MiB, not storage.WatchBuffer large events. A single
// event larger than this is still sent to a watcher that has nothing else
// queued.
const WatchQueueBytes = 4 << 20

// encodeEvent is the wire encoding of a WatchSessionResponse carrying ev.
func encodeEvent(ev storage.Event) ([]byte, error) {
	return proto.Marshal(eventToProto(ev))
}

// encodedEvent is a response already encoded (a WatchSessionResponse
// shared with the session's other watchers, or a ListSessions frame):
// requestCodec sends its bytes as they are.
type encodedEvent struct{ b []byte }

// stuckSendGrace is how long a watch that ends waits for its sender's Send
// in progress to finish before returning anyway: a Send blocked on a shut
// flow-control window only returns once the handler has returned.
const stuckSendGrace = 200 * time.Millisecond

// watchSender sends a watch's events from a goroutine of its own.
type watchSender struct {
	queue  chan []byte   // closed: send what is queued, then finish
	quit   chan struct{} // closed by stop: send nothing more
	done   chan struct{} // closed when the goroutine returns
	err    error         // why Send failed; read after done
	queued atomic.Int64  // bytes queued or being sent
}

func startWatchSender(stream grpc.ServerStreamingServer[sessiondv1.WatchSessionResponse]) *watchSender {
	w := &watchSender{
		queue: make(chan []byte, storage.WatchBuffer),
		quit:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	go func() {
		defer close(w.done)
		for {
			select {
			case <-w.quit:
				return
			case b, ok := <-w.queue:
				if !ok {
					return
				}
				if err := stream.SendMsg(&encodedEvent{b: b}); err != nil {
					w.err = err
					return
				}
				w.queued.Add(-int64(len(b)))
			}
		}
	}()
	return w
}

// enqueue queues b for sending, or says why the watcher is too far behind
// to take it: storage.WatchBuffer events, or WatchQueueBytes, unsent.
func (w *watchSender) enqueue(b []byte) error {
	n := int64(len(b))
	if q := w.queued.Load(); q > 0 && q+n > WatchQueueBytes {
		return fmt.Errorf("watcher has %d bytes of events not yet sent, and at most %d may wait (it stopped reading): %w",
			q, WatchQueueBytes, storage.ErrWatchReset)
	}
	w.queued.Add(n)
	select {
	case w.queue <- b:
		return nil
	default:
		w.queued.Add(-n)
		return fmt.Errorf("watcher has %d events not yet sent (it stopped reading): %w", storage.WatchBuffer, storage.ErrWatchReset)
	}
}

// stop tells the sender to send nothing more, gives a Send in progress
// stuckSendGrace to finish, and returns err.
func (w *watchSender) stop(err error) error {
	close(w.quit)
	t := time.NewTimer(stuckSendGrace)
	defer t.Stop()
	select {
	case <-w.done:
	case <-t.C:
	}
	return err
}

var errDraining = status.Error(codes.Unavailable, "server is shutting down; watch again after it restarts")
