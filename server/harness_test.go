package server

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
	"github.com/sessiond/sessiond/storage/file"
)

// harness is a Server on a real file store in a temp dir, served over
// bufconn to a client with grpc-go's default options (4 MiB receive limit).
type harness struct {
	file   *storage.Store // over the file driver unwrapped, for checks that bypass the server
	srv    *Server
	gs     *grpc.Server
	client sessiondv1.SessionStoreServiceClient
	conn   *grpc.ClientConn
	logs   *observer.ObservedLogs
}

type harnessConfig struct {
	wrap     func(storage.Driver) storage.Driver // fault injection: the server's store runs over its result, given the file store as a Driver
	limits   storage.Limits                      // zero fields: the defaults
	opts     []Option
	grpcOpts []grpc.ServerOption // after the Server's own, so they win
}

func newHarness(t *testing.T, cfg harnessConfig) *harness {
	t.Helper()
	st, err := file.Open(t.Context(), t.TempDir(), file.WithLimits(cfg.limits))
	if err != nil {
		t.Fatalf("file.Open: %v", err)
	}
	store := st
	if cfg.wrap != nil {
		store = storage.New(cfg.wrap(storeDriver{st}), cfg.limits)
	}
	core, logs := observer.New(zapcore.DebugLevel)
	opts := append([]Option{WithLogger(zap.New(core)), WithBackend("file"), WithVersion("v-test")}, cfg.opts...)
	srv := New(store, opts...)
	gs := grpc.NewServer(append(srv.ServerOptions(), cfg.grpcOpts...)...)
	srv.Register(gs)
	lis := bufconn.Listen(1 << 20)
	go func() { _ = gs.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	)
	if err != nil {
		t.Fatalf("grpc.NewClient: %v", err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		gs.Stop()
		_ = store.Close()
		_ = st.Close()
	})
	return &harness{file: st, srv: srv, gs: gs, client: sessiondv1.NewSessionStoreServiceClient(conn), conn: conn, logs: logs}
}

func msg(role sessiondv1.Role, id, content string) *sessiondv1.Message {
	return &sessiondv1.Message{Id: id, Role: role, Content: content}
}

func user(id, content string) *sessiondv1.Message {
	return msg(sessiondv1.Role_ROLE_USER, id, content)
}

func byID(id string) *sessiondv1.SessionRef {
	return &sessiondv1.SessionRef{Key: &sessiondv1.SessionRef_Id{Id: id}}
}

func byAlias(alias string) *sessiondv1.SessionRef {
	return &sessiondv1.SessionRef{Key: &sessiondv1.SessionRef_Alias{Alias: alias}}
}

func (h *harness) create(t *testing.T, req *sessiondv1.CreateSessionRequest) *sessiondv1.Session {
	t.Helper()
	resp, err := h.client.CreateSession(t.Context(), req)
	if err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	return resp.GetSession()
}

// recvAll reads a server stream to its end and returns its frames and the
// final error (nil after a clean end).
func recvAll[T any](s grpc.ServerStreamingClient[T]) ([]*T, error) {
	var out []*T
	for {
		m, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, m)
	}
}

// load returns a session's metadata and all its messages through LoadSession.
func (h *harness) load(t *testing.T, req *sessiondv1.LoadSessionRequest) (*sessiondv1.Session, []*sessiondv1.Message) {
	t.Helper()
	stream, err := h.client.LoadSession(t.Context(), req)
	if err != nil {
		t.Fatalf("LoadSession: %v", err)
	}
	frames, err := recvAll(stream)
	if err != nil {
		t.Fatalf("LoadSession: %v", err)
	}
	if len(frames) == 0 {
		t.Fatal("LoadSession sent no frame")
	}
	var msgs []*sessiondv1.Message
	for _, f := range frames {
		msgs = append(msgs, f.GetMessages()...)
	}
	return frames[0].GetSession(), msgs
}

func wantCode(t *testing.T, err error, code codes.Code, msgHas string) {
	t.Helper()
	if got := status.Code(err); got != code {
		t.Fatalf("code = %v (%v), want %v", got, err, code)
	}
	if msgHas != "" && !strings.Contains(status.Convert(err).Message(), msgHas) {
		t.Fatalf("message %q does not name %q", status.Convert(err).Message(), msgHas)
	}
	// gRPC itself refuses a frame over its receive limit (max_frame_bytes)
	// before any sessiond code runs, so that answer has no details.
	grpcOwn := strings.HasPrefix(status.Convert(err).Message(), "grpc: received message larger than max")
	if (code == codes.InvalidArgument || code == codes.ResourceExhausted) && !grpcOwn {
		checkDetails(t, err)
	}
}

// checkDetails checks the google.rpc details of an INVALID_ARGUMENT or
// RESOURCE_EXHAUSTED answer: an ErrorInfo with a stable reason, and a
// BadRequest naming the field the message names (the ErrorInfo repeats it,
// and for a limit names the limit the message names).
func checkDetails(t *testing.T, err error) {
	t.Helper()
	st := status.Convert(err)
	var bad *errdetails.BadRequest
	var info *errdetails.ErrorInfo
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.BadRequest:
			bad = d
		case *errdetails.ErrorInfo:
			info = d
		default:
			t.Fatalf("unexpected detail %T in %v", d, err)
		}
	}
	if info == nil || info.GetDomain() != ErrorDomain {
		t.Fatalf("no ErrorInfo of domain %q in %v: %v", ErrorDomain, err, st.Details())
	}
	wantReason := map[codes.Code][]string{
		codes.InvalidArgument:   {ReasonInvalidField},
		codes.ResourceExhausted: {ReasonOverLimit, ReasonStorageFull, ReasonTooManyCalls},
	}[st.Code()]
	if !slices.Contains(wantReason, info.GetReason()) {
		t.Fatalf("ErrorInfo reason %q for %v, want one of %v", info.GetReason(), st.Code(), wantReason)
	}
	if info.GetReason() == ReasonTooManyCalls {
		if l := info.GetMetadata()["limit"]; bad != nil || l == "" || !strings.Contains(st.Message(), l) || info.GetMetadata()["max"] == "" {
			t.Fatalf("ErrorInfo of a limit of calls: %v, field violation %v; message %q", info.GetMetadata(), bad, st.Message())
		}
		return
	}
	if info.GetReason() == ReasonStorageFull {
		if bad != nil {
			t.Fatalf("a full disk names a field: %v", bad)
		}
		return
	}
	if bad == nil || len(bad.GetFieldViolations()) != 1 {
		t.Fatalf("no BadRequest with one field violation in %v: %v", err, st.Details())
	}
	v := bad.GetFieldViolations()[0]
	if v.GetField() == "" || !strings.Contains(st.Message(), v.GetField()) || v.GetDescription() == "" {
		t.Fatalf("field violation %v does not name a field of the message %q", v, st.Message())
	}
	if info.GetMetadata()["field"] != v.GetField() {
		t.Fatalf("ErrorInfo field %q, BadRequest field %q", info.GetMetadata()["field"], v.GetField())
	}
	if info.GetReason() == ReasonOverLimit {
		if l := info.GetMetadata()["limit"]; l == "" || !strings.Contains(st.Message(), l) ||
			info.GetMetadata()["size"] == "" || info.GetMetadata()["max"] == "" {
			t.Fatalf("ErrorInfo of a limit: %v; message %q", info.GetMetadata(), st.Message())
		}
	}
}

// storeDriver serves a Store as a Driver, so that a test's fault-injecting
// Driver can pass what it does not change on to a real store. The Store
// checks each request again, which a valid request passes unchanged, and
// gets the messages as the client sent them. Closing it closes the Store.
type storeDriver struct{ st *storage.Store }

func (d storeDriver) Create(ctx context.Context, req storage.CreateRequest, msgs storage.Messages) (*storage.Session, error) {
	req.Messages = msgs.Sent
	return d.st.Create(ctx, req)
}

func (d storeDriver) Get(ctx context.Context, ref storage.Ref) (*storage.Session, error) {
	return d.st.Get(ctx, ref)
}

func (d storeDriver) Load(ctx context.Context, ref storage.Ref, opts storage.LoadOptions) (*storage.Session, []*sessiondv1.Message, error) {
	return d.st.Load(ctx, ref, opts)
}

func (d storeDriver) LoadStream(ctx context.Context, ref storage.Ref, opts storage.LoadOptions, start func(*storage.Session) error, each func(*sessiondv1.Message) error) error {
	return d.st.LoadStream(ctx, ref, opts, start, each)
}

func (d storeDriver) List(ctx context.Context, opts storage.ListOptions, yield func(*storage.Session) error) error {
	return d.st.List(ctx, opts, yield)
}

func (d storeDriver) Save(ctx context.Context, req storage.SaveRequest, msgs storage.Messages) (*storage.Session, error) {
	req.Messages = msgs.Sent
	return d.st.Save(ctx, req)
}

func (d storeDriver) Compact(ctx context.Context, req storage.CompactRequest, summary storage.Messages) (*storage.Session, error) {
	req.Summary = summary.Sent[0]
	return d.st.Compact(ctx, req)
}

func (d storeDriver) Append(ctx context.Context, req storage.AppendRequest, msgs storage.Messages) (storage.AppendResult, error) {
	req.Messages = msgs.Sent
	return d.st.Append(ctx, req)
}

func (d storeDriver) Update(ctx context.Context, req storage.UpdateRequest) (*storage.Session, error) {
	return d.st.Update(ctx, req)
}

func (d storeDriver) Delete(ctx context.Context, ref storage.Ref, expectedRevision uint64) error {
	return d.st.Delete(ctx, ref, expectedRevision)
}

func (d storeDriver) Fork(ctx context.Context, req storage.ForkRequest) (*storage.Session, error) {
	return d.st.Fork(ctx, req)
}

func (d storeDriver) Rewind(ctx context.Context, req storage.RewindRequest) (*storage.Session, error) {
	return d.st.Rewind(ctx, req)
}

func (d storeDriver) Search(ctx context.Context, opts storage.SearchOptions, yield func(storage.SearchHit) error) error {
	return d.st.Search(ctx, opts, yield)
}

func (d storeDriver) Watch(ctx context.Context, ref storage.Ref, fromRevision uint64) (*storage.Subscription, error) {
	return d.st.Watch(ctx, ref, fromRevision)
}

func (d storeDriver) Expired(ctx context.Context, opts storage.ExpiredOptions, yield func(*storage.Session) error) error {
	return d.st.Expired(ctx, opts, yield)
}

func (d storeDriver) Close() error { return d.st.Close() }
