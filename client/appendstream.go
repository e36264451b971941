package client

import (
	"context"
	"errors"
	"sync"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// appendStream is a connection's AppendStream call, opened by the first
// streamed append and shared by every later one: concurrent appends go out
// one after the other on it without waiting for each other's answers
// (pipelining), and the daemon answers in request order. A stream that
// fails fails the appends waiting on it; the next append opens a new one.
type appendStream struct {
	mu      sync.Mutex
	call    grpc.BidiStreamingClient[sessiondv1.AppendStreamRequest, sessiondv1.AppendStreamResponse] // nil: none open
	waiting []chan streamAnswer                                                                       // one per request sent on call, in order
	// unary: the daemon has no AppendStream (UNIMPLEMENTED), so appends
	// are AppendMessages calls.
	unary bool
}

type streamAnswer struct {
	resp *sessiondv1.AppendStreamResponse
	err  error // the stream failed before answering
}

// errNoAppendStream: the daemon answered AppendStream UNIMPLEMENTED.
var errNoAppendStream = errors.New("client: the daemon has no AppendStream")

// appendStreamed appends as c.append does, over the connection's
// AppendStream, or with AppendMessages against a daemon without it.
func (c *Client) appendStreamed(ctx context.Context, req *sessiondv1.AppendMessagesRequest) (AppendResult, error) {
	if err := c.check(rpcAppendStream); err != nil {
		return AppendResult{}, err
	}
	a := &c.conn.appends
	a.mu.Lock()
	if a.unary {
		a.mu.Unlock()
		return c.append(ctx, req)
	}
	if a.call == nil {
		// The stream outlives the append that opens it; Close ends it
		// with the connection.
		sctx, cancel := context.WithCancel(context.Background())
		call, err := c.conn.rpc.AppendStream(sctx)
		if err != nil {
			cancel()
			a.mu.Unlock()
			return AppendResult{}, mapError(ctx, rpcAppendStream, err)
		}
		a.call = call
		go a.receive(call, cancel)
	}
	answer := make(chan streamAnswer, 1)
	if err := a.call.Send(&sessiondv1.AppendStreamRequest{Append: req}); err != nil {
		// The stream has ended (its receiver fails what it had sent); the
		// daemon never saw this request, which goes out on its own.
		a.call = nil
		a.mu.Unlock()
		return c.append(ctx, req)
	}
	a.waiting = append(a.waiting, answer)
	a.mu.Unlock()

	select {
	case ans := <-answer:
		if errors.Is(ans.err, errNoAppendStream) {
			return c.append(ctx, req)
		}
		if ans.err != nil {
			return AppendResult{}, mapError(ctx, rpcAppendStream, ans.err)
		}
		if err := AppendStreamError(ans.resp); err != nil {
			return AppendResult{}, mapError(ctx, rpcAppendStream, err)
		}
		r := ans.resp.GetResult()
		return AppendResult{Revision: r.GetRevision(), MessageCount: r.GetMessageCount(), Appended: r.GetAppendedCount()}, nil
	case <-ctx.Done():
		// The answer, when it comes, is dropped; the append may still land,
		// and a retry with the same message ids stores nothing twice.
		return AppendResult{}, mapError(ctx, rpcAppendStream, status.FromContextError(ctx.Err()).Err())
	}
}

// AppendStreamError returns the error an AppendStream answer carries: nil
// for an answer with a result, else a gRPC status error with the answer's
// code, message and details, the error AppendMessages would have returned
// for that request. It is for programs that drive the stream themselves
// (Client.RPC().AppendStream); as with RPC's calls, the error is not mapped
// to the SDK's sentinels.
func AppendStreamError(resp *sessiondv1.AppendStreamResponse) error {
	st := resp.GetStatus()
	if st == nil {
		return nil
	}
	return status.FromProto(&spb.Status{Code: st.GetCode(), Message: st.GetMessage(), Details: st.GetDetails()}).Err()
}

// receive hands each answer of call to the append waiting for it, until
// call fails; then it ends call and fails every append still waiting on it.
func (a *appendStream) receive(call grpc.BidiStreamingClient[sessiondv1.AppendStreamRequest, sessiondv1.AppendStreamResponse], cancel context.CancelFunc) {
	defer cancel()
	for {
		resp, err := call.Recv()
		a.mu.Lock()
		if err == nil {
			if len(a.waiting) == 0 {
				// An answer to no request: the stream cannot be trusted.
				err = status.Error(codes.Internal, "the daemon answered an append that was not sent")
			} else {
				next := a.waiting[0]
				a.waiting = a.waiting[1:]
				a.mu.Unlock()
				next <- streamAnswer{resp: resp}
				continue
			}
		}
		if status.Code(err) == codes.Unimplemented {
			a.unary, err = true, errNoAppendStream
		}
		// Every Send after this one fails, so no append joins waiting
		// for this call from now on.
		if a.call == call {
			a.call = nil
		}
		waiting := a.waiting
		a.waiting = nil
		a.mu.Unlock()
		for _, w := range waiting {
			w <- streamAnswer{err: err}
		}
		return
	}
}
