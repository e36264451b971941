package clienttest_test

import (
	"context"
	"os"
	"path"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/clienttest"
	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// The sessiond binary is built once, by the first test that needs it, in
// a folder TestMain removes. Not in TestMain itself: every fuzzing worker
// process runs TestMain, and a build there took longer than the fuzz step
// gives a target, so FuzzDecodeSpool never got past its baseline.
var (
	binDir    string
	buildOnce sync.Once
	daemonBin string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// needDaemon returns the daemon binary, building it on first use, and fails
// the test if it does not build.
func needDaemon(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "sessiond-client-test")
		if buildErr == nil {
			daemonBin, buildErr = clienttest.BuildDaemon(binDir)
		}
	})
	if buildErr != nil {
		t.Fatalf("daemon binary: %v", buildErr)
	}
	return daemonBin
}

// recorder is a server interceptor that counts calls and, when told, lets
// an append (AppendMessages or one of an AppendStream) land and then answers
// DEADLINE_EXCEEDED, as when the answer is lost to a client timeout.
type recorder struct {
	mu         sync.Mutex
	calls      map[string]int
	appendSize []int // messages per append that reached the server
	loseAppend int   // the next loseAppend appends land but answer an error
}

func newRecorder() *recorder { return &recorder{calls: map[string]int{}} }

func (r *recorder) options() clienttest.Option {
	return clienttest.WithGRPCServerOptions(
		grpc.ChainUnaryInterceptor(r.unary),
		grpc.ChainStreamInterceptor(r.stream),
	)
}

func (r *recorder) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	r.mu.Lock()
	defer r.mu.Unlock()
	m := path.Base(info.FullMethod)
	r.calls[m]++
	if a, ok := req.(*sessiondv1.AppendMessagesRequest); ok {
		r.appendSize = append(r.appendSize, len(a.GetMessages()))
		if err == nil && r.loseAppend > 0 {
			r.loseAppend--
			return nil, status.Error(codes.DeadlineExceeded, "injected: the append landed but its answer was lost")
		}
	}
	return resp, err
}

func (r *recorder) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	r.mu.Lock()
	r.calls[path.Base(info.FullMethod)]++
	r.mu.Unlock()
	return handler(srv, &recordedStream{ServerStream: ss, r: r})
}

// recordedStream counts the appends of an AppendStream (as "streamed
// append") with their sizes, as the unary interceptor does AppendMessages,
// and loses answers the same way: the append lands, its answer says
// DEADLINE_EXCEEDED.
type recordedStream struct {
	grpc.ServerStream
	r *recorder
}

func (s *recordedStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if a, ok := m.(*sessiondv1.AppendStreamRequest); ok && err == nil {
		s.r.mu.Lock()
		s.r.calls[streamedAppend]++
		s.r.appendSize = append(s.r.appendSize, len(a.GetAppend().GetMessages()))
		s.r.mu.Unlock()
	}
	return err
}

func (s *recordedStream) SendMsg(m any) error {
	if resp, ok := m.(*sessiondv1.AppendStreamResponse); ok && resp.GetStatus() == nil {
		s.r.mu.Lock()
		if s.r.loseAppend > 0 {
			s.r.loseAppend--
			m = &sessiondv1.AppendStreamResponse{Tag: resp.GetTag(), Status: &sessiondv1.AppendStatus{
				Code: int32(codes.DeadlineExceeded), Message: "injected: the append landed but its answer was lost"}}
		}
		s.r.mu.Unlock()
	}
	return s.ServerStream.SendMsg(m)
}

// streamedAppend counts, in recorder.calls, the appends sent over
// AppendStream.
const streamedAppend = "streamed append"

// loseNext makes the next n AppendMessages land but answer
// DEADLINE_EXCEEDED.
func (r *recorder) loseNext(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.loseAppend = n
}

func (r *recorder) count(method string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[method]
}

// writes counts the RPCs that change sessions.
func (r *recorder) writes() int {
	return r.count("AppendMessages") + r.count(streamedAppend) + r.count("SaveSession") + r.count("UpdateSession") + r.count("RewindSession")
}

func (r *recorder) sizes() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int(nil), r.appendSize...)
}

func userMsg(text string) *sessiondv1.Message {
	return &sessiondv1.Message{Role: sessiondv1.Role_ROLE_USER, Content: text}
}

func assistantMsg(text string) *sessiondv1.Message {
	return &sessiondv1.Message{Role: sessiondv1.Role_ROLE_ASSISTANT, Content: text}
}

func systemMsg(text string) *sessiondv1.Message {
	return &sessiondv1.Message{Role: sessiondv1.Role_ROLE_SYSTEM, Content: text}
}

// contents returns the content of each message.
func contents(msgs []*sessiondv1.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.GetContent()
	}
	return out
}

// storedContents loads a session from the daemon and returns its messages'
// contents, failing the test if any message id repeats.
func storedContents(t *testing.T, c *client.Client, r client.Ref) []string {
	t.Helper()
	_, msgs, err := c.Load(t.Context(), r, client.LoadOptions{})
	if err != nil {
		t.Fatalf("Load(%v): %v", r, err)
	}
	seen := map[string]bool{}
	for _, m := range msgs {
		if seen[m.GetId()] {
			t.Fatalf("message id %q stored twice", m.GetId())
		}
		seen[m.GetId()] = true
	}
	return contents(msgs)
}

// eventually polls cond every 50ms until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true within %v", what, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// errorLog collects the errors auto-save reports.
type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errorLog) handle(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err)
}

func (l *errorLog) all() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}
