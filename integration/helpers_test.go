package integration

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// byID and byAlias build session references.
func byID(ns, id string) *sessiondv1.SessionRef {
	return &sessiondv1.SessionRef{Namespace: ns, Key: &sessiondv1.SessionRef_Id{Id: id}}
}

func byAlias(ns, alias string) *sessiondv1.SessionRef {
	return &sessiondv1.SessionRef{Namespace: ns, Key: &sessiondv1.SessionRef_Alias{Alias: alias}}
}

// fixedTime is the created_at of test messages: a client-set time, which
// the daemon must store as it is, so messages compare equal field for field.
var fixedTime = timestamppb.New(time.Date(2026, 3, 4, 5, 6, 7, 8000, time.UTC))

// textMsg is a message with an id, a role, text content and a fixed
// created_at.
func textMsg(id string, role sessiondv1.Role, content string) *sessiondv1.Message {
	return &sessiondv1.Message{Id: id, Role: role, Content: content, CreatedAt: fixedTime}
}

// loadSession reads a whole LoadSession stream: the session from the first
// frame and every message of every frame. It also returns the number of
// frames, so tests can see how the messages were batched.
func loadSession(ctx context.Context, c sessiondv1.SessionStoreServiceClient, req *sessiondv1.LoadSessionRequest) (*sessiondv1.Session, []*sessiondv1.Message, int, error) {
	frames, err := recvAll(c.LoadSession(ctx, req))
	if err != nil {
		return nil, nil, 0, err
	}
	var (
		sess *sessiondv1.Session
		msgs []*sessiondv1.Message
	)
	for i, resp := range frames {
		if i == 0 {
			sess = resp.GetSession()
		} else if resp.GetSession() != nil {
			return nil, nil, i, status.Errorf(codes.Internal, "test: frame %d carries a session; only the first may", i)
		}
		msgs = append(msgs, resp.GetMessages()...)
	}
	return sess, msgs, len(frames), nil
}

// mustLoad is loadSession that fails the test on error.
func mustLoad(t *testing.T, ctx context.Context, c sessiondv1.SessionStoreServiceClient, req *sessiondv1.LoadSessionRequest) (*sessiondv1.Session, []*sessiondv1.Message) {
	t.Helper()
	sess, msgs, _, err := loadSession(ctx, c, req)
	if err != nil {
		t.Fatalf("LoadSession(%v): %v", req, err)
	}
	if sess == nil {
		t.Fatalf("LoadSession(%v): first frame carries no session", req)
	}
	return sess, msgs
}

// listSessions reads a whole ListSessions stream.
func listSessions(ctx context.Context, c sessiondv1.SessionStoreServiceClient, req *sessiondv1.ListSessionsRequest) ([]*sessiondv1.ListSessionsResponse, error) {
	return recvAll(c.ListSessions(ctx, req))
}

// recvAll reads a whole server stream, as opened by a streaming call that
// returned stream and err.
func recvAll[F any](stream grpc.ServerStreamingClient[F], err error) ([]*F, error) {
	if err != nil {
		return nil, err
	}
	var out []*F
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out = append(out, resp)
	}
}

// mustList is listSessions that fails the test on error and returns only
// the sessions.
func mustList(t *testing.T, ctx context.Context, c sessiondv1.SessionStoreServiceClient, req *sessiondv1.ListSessionsRequest) []*sessiondv1.Session {
	t.Helper()
	frames, err := listSessions(ctx, c, req)
	if err != nil {
		t.Fatalf("ListSessions(%v): %v", req, err)
	}
	out := make([]*sessiondv1.Session, len(frames))
	for i, f := range frames {
		out[i] = f.GetSession()
	}
	return out
}

// searchSessions reads a whole SearchSessions stream.
func searchSessions(ctx context.Context, c sessiondv1.SessionStoreServiceClient, req *sessiondv1.SearchSessionsRequest) ([]*sessiondv1.SearchSessionsResponse, error) {
	return recvAll(c.SearchSessions(ctx, req))
}

// saveSession sends a SaveSession stream: the header, then each batch of
// messages in its own frame.
func saveSession(ctx context.Context, c sessiondv1.SessionStoreServiceClient, header *sessiondv1.SaveSessionHeader, batches ...[]*sessiondv1.Message) (*sessiondv1.Session, error) {
	stream, err := c.SaveSession(ctx)
	if err != nil {
		return nil, err
	}
	if err := stream.Send(&sessiondv1.SaveSessionRequest{Header: header}); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	for _, b := range batches {
		// A Send that fails with io.EOF means the server has already
		// answered; CloseAndRecv below returns that answer.
		if err := stream.Send(&sessiondv1.SaveSessionRequest{Messages: b}); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, err
		}
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return nil, err
	}
	return resp.GetSession(), nil
}

// wantCode fails the test unless err carries the gRPC code want and, when
// mentions are given, a message that names at least one of them
// (case-insensitively): the design promises that INVALID_ARGUMENT names the
// field and RESOURCE_EXHAUSTED names the limit.
func wantCode(t *testing.T, err error, want codes.Code, mentions ...string) {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != want {
		t.Fatalf("got code %v (%v), want %v", st.Code(), err, want)
	}
	if len(mentions) == 0 {
		return
	}
	msg := strings.ToLower(st.Message())
	for _, m := range mentions {
		if strings.Contains(msg, strings.ToLower(m)) {
			return
		}
	}
	t.Errorf("%v message %q names none of %q", want, st.Message(), mentions)
}

// protoDiff compares protos (and slices and maps of them) field by field,
// unknown fields included.
func protoDiff(want, got any, opts ...cmp.Option) string {
	return cmp.Diff(want, got, append([]cmp.Option{protocmp.Transform()}, opts...)...)
}

// lookTool finds a command on PATH or in $(go env GOPATH)/bin, where
// scripts/test.sh installs the pinned tools. Under CI=true a missing tool
// fails the test, since the test script must have installed it; elsewhere
// the test is skipped.
func lookTool(t *testing.T, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		for _, dir := range filepath.SplitList(strings.TrimSpace(string(out))) {
			p := filepath.Join(dir, "bin", name)
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is not installed; scripts/test.sh installs it", name)
	}
	t.Skipf("%s is not installed (scripts/test.sh installs it)", name)
	return ""
}
