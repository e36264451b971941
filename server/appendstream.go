package server

import (
	"errors"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

const mAppendStream = "AppendStream"

// AppendStreamWindow is how many requests of one AppendStream call the
// daemon holds at once (received, not yet answered). When it is full the
// handler reads nothing more, so the client's sends stop at the stream's
// flow-control window.
const AppendStreamWindow = 64

// AppendStream implements SessionStoreService.
//
// A receiver goroutine reads requests and hands each to a worker; this
// goroutine sends the answers in request order. Workers run appends to
// different sessions concurrently, so that one stream's appends share the
// store's group commit; the appends of one session run one after the other,
// by the worker that ran the previous one, so no worker ever waits for
// another (a request naming its session by alias runs alone). Every append goes through storage.Store.Append,
// exactly as AppendMessages does.
func (s *Server) AppendStream(stream grpc.BidiStreamingServer[sessiondv1.AppendStreamRequest, sessiondv1.AppendStreamResponse]) error {
	a := &appendStream{
		s:      s,
		stream: stream,
		slots:  make(chan struct{}, AppendStreamWindow),
		order:  make(chan *pendingAppend, AppendStreamWindow),
		work:   make(chan *pendingAppend),
		queued: make(map[sessionKey][]*pendingAppend),
	}
	go a.receive()
	ctx := stream.Context()
	for {
		select {
		case p, ok := <-a.order:
			if !ok {
				return a.recvErr
			}
			select {
			case <-p.done:
			case <-ctx.Done():
				return s.toStatus(mAppendStream, ctx.Err())
			}
			if err := stream.Send(p.resp); err != nil {
				return s.toStatus(mAppendStream, err)
			}
			<-a.slots
		case <-s.drained:
			return a.drain()
		}
	}
}

// sessionKey is a session as a request names it: appends with the same key
// keep their request order.
type sessionKey struct {
	ns, id, alias string
}

// pendingAppend is one request from receipt to answer.
type pendingAppend struct {
	req  *sessiondv1.AppendStreamRequest
	key  sessionKey
	resp *sessiondv1.AppendStreamResponse
	err  error         // set instead of calling the store: the request was refused before it
	done chan struct{} // closed once resp is set
}

type appendStream struct {
	s      *Server
	stream grpc.BidiStreamingServer[sessiondv1.AppendStreamRequest, sessiondv1.AppendStreamResponse]
	slots  chan struct{}       // one per request held: bounds them to AppendStreamWindow
	order  chan *pendingAppend // requests in arrival order, for the sender; closed by receive
	work   chan *pendingAppend // requests for an idle worker; closed by receive
	// recvErr is why receiving ended (nil: the client closed its side);
	// written before order is closed.
	recvErr error

	mu      sync.Mutex
	stopped bool                            // draining: receive dispatches nothing more
	queued  map[sessionKey][]*pendingAppend // per session with an append running: those waiting behind it
	workers int                             // worker goroutines started

	running sync.WaitGroup // requests dispatched and not yet answered
}

// receive reads requests until the client closes its side or the stream
// fails, taking a slot before each read (the back-pressure), and dispatches
// them.
func (a *appendStream) receive() {
	defer close(a.work)
	defer close(a.order)
	ctx := a.stream.Context()
	for {
		select {
		case a.slots <- struct{}{}:
		case <-ctx.Done():
			a.recvErr = a.s.toStatus(mAppendStream, ctx.Err())
			return
		}
		req := new(sessiondv1.AppendStreamRequest)
		err := a.stream.RecvMsg(req)
		p := &pendingAppend{req: req, done: make(chan struct{})}
		switch {
		case errors.Is(err, io.EOF):
			return
		case status.Code(err) == codes.PermissionDenied:
			// The Authorizer refuses a request by failing its RecvMsg,
			// after decoding it; grpc-go itself never fails a receive
			// with this code. That request alone is refused, as an
			// AppendMessages call naming its namespace would be.
			p.err = err
		case err != nil:
			a.recvErr = a.s.toStatus(mAppendStream, err)
			return
		}
		// A session named by alias may be one that other requests name
		// by id: such a request runs alone, after every earlier request
		// and before any later one.
		byAlias := p.req.GetAppend().GetRef().GetAlias() != ""
		if byAlias {
			a.running.Wait()
		}
		if !a.dispatch(p) {
			return
		}
		if byAlias {
			<-p.done
		}
	}
}

// dispatch queues p for the sender and starts its append, or queues it
// behind the running append of its session. It reports false once the
// stream drains: p is dropped unanswered, never stored.
func (a *appendStream) dispatch(p *pendingAppend) bool {
	if ref := p.req.GetAppend().GetRef(); ref != nil {
		p.key = sessionKey{ns: ref.GetNamespace(), id: ref.GetId(), alias: ref.GetAlias()}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stopped {
		return false
	}
	a.order <- p // never blocks: order holds as many as there are slots
	a.running.Add(1)
	if p.err != nil {
		a.answer(p)
		return true
	}
	if waiting, running := a.queued[p.key]; running {
		a.queued[p.key] = append(waiting, p)
		return true
	}
	a.queued[p.key] = nil
	select {
	case a.work <- p:
	default:
		if a.workers < AppendStreamWindow {
			a.workers++
			go a.worker(p)
		} else {
			// Every worker is busy with an append of its own (there are
			// as many workers as slots): one is free as soon as it ends.
			a.mu.Unlock()
			a.work <- p
			a.mu.Lock()
		}
	}
	return true
}

// worker runs p, then the appends queued behind it, then waits for work.
func (a *appendStream) worker(p *pendingAppend) {
	for {
		for p != nil {
			a.run(p)
			a.mu.Lock()
			next := a.queued[p.key]
			if len(next) == 0 {
				delete(a.queued, p.key)
				p = nil
			} else {
				p, a.queued[p.key] = next[0], next[1:]
			}
			a.mu.Unlock()
		}
		var ok bool
		if p, ok = <-a.work; !ok {
			return
		}
	}
}

// run stores one append, as AppendMessages does, and answers it.
func (a *appendStream) run(p *pendingAppend) {
	req := p.req.GetAppend()
	if req == nil {
		p.err = a.s.toStatus(mAppendStream, storage.Invalid("append", "is required"))
		a.answer(p)
		return
	}
	res, err := a.s.appendMessages(a.stream.Context(), mAppendStream, req)
	if err != nil {
		p.err = err
	} else {
		p.resp = &sessiondv1.AppendStreamResponse{Result: res}
	}
	a.answer(p)
}

// answer makes p's response (from p.err when set) and hands it to the
// sender.
func (a *appendStream) answer(p *pendingAppend) {
	if p.err != nil {
		st := status.Convert(p.err).Proto()
		p.resp = &sessiondv1.AppendStreamResponse{Status: &sessiondv1.AppendStatus{
			Code: st.GetCode(), Message: st.GetMessage(), Details: st.GetDetails(),
		}}
	}
	p.resp.Tag = p.req.GetTag()
	close(p.done)
	a.running.Done()
}

// drain answers every request received, then ends the stream with
// UNAVAILABLE: the server is shutting down, and a stream never ends on its
// own. Requests the receiver reads from now on are dropped unanswered; the
// handler's return cancels the read in progress.
func (a *appendStream) drain() error {
	a.mu.Lock()
	a.stopped = true
	a.mu.Unlock()
	ctx := a.stream.Context()
	for {
		var p *pendingAppend
		select {
		case q, ok := <-a.order:
			if !ok {
				return a.recvErr
			}
			p = q
		default:
			return errAppendDraining
		}
		select {
		case <-p.done:
		case <-ctx.Done():
			return a.s.toStatus(mAppendStream, ctx.Err())
		}
		if err := a.stream.Send(p.resp); err != nil {
			return a.s.toStatus(mAppendStream, err)
		}
	}
}

var errAppendDraining = status.Error(codes.Unavailable, "server is shutting down; send the unanswered appends again after it restarts (appends with message ids are safe to repeat)")
