package server

import (
	"context"
	"regexp"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc/codes"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// TestCallLogs checks the one line each call logs: it names the session and
// namespace the request names (unary, server-stream and client-stream
// calls alike), its code, and a duration a person reads.
func TestCallLogs(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	ctx := t.Context()
	s := h.create(t, &sessiondv1.CreateSessionRequest{Namespace: "team", Alias: "proj"})
	ref := &sessiondv1.SessionRef{Namespace: "team", Key: &sessiondv1.SessionRef_Alias{Alias: "proj"}}
	if _, err := h.client.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: ref, Messages: []*sessiondv1.Message{user("a", "b")}}); err != nil {
		t.Fatal(err)
	}
	h.load(t, &sessiondv1.LoadSessionRequest{Ref: &sessiondv1.SessionRef{Namespace: "team", Key: &sessiondv1.SessionRef_Id{Id: s.GetId()}}})
	save, err := h.client.SaveSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := save.Send(&sessiondv1.SaveSessionRequest{Header: &sessiondv1.SaveSessionHeader{Ref: ref}}); err != nil {
		t.Fatal(err)
	}
	if _, err := save.CloseAndRecv(); err != nil {
		t.Fatal(err)
	}
	list, err := h.client.ListSessions(ctx, &sessiondv1.ListSessionsRequest{Namespace: "team"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := recvAll(list); err != nil {
		t.Fatal(err)
	}
	_, err = h.client.GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: &sessiondv1.SessionRef{Namespace: "other", Key: &sessiondv1.SessionRef_Alias{Alias: "nosuch"}}})
	wantCode(t, err, codes.NotFound, "")
	if _, err := h.client.GetServerInfo(ctx, &sessiondv1.GetServerInfoRequest{}); err != nil {
		t.Fatal(err)
	}

	readable := regexp.MustCompile(`^[0-9]+(\.[0-9]+)?(ns|µs|ms|s)$`)
	tests := []struct {
		method string
		want   map[string]string // fields and values; "" means absent
	}{
		{"CreateSession", map[string]string{"namespace": "team", "session_alias": "proj", "grpc.code": "OK"}},
		{"AppendMessages", map[string]string{"namespace": "team", "session_alias": "proj", "session_id": ""}},
		{"LoadSession", map[string]string{"namespace": "team", "session_id": s.GetId(), "session_alias": ""}},
		{"SaveSession", map[string]string{"namespace": "team", "session_alias": "proj"}},
		{"ListSessions", map[string]string{"namespace": "team", "session_id": "", "session_alias": ""}},
		{"GetSession", map[string]string{"namespace": "other", "session_alias": "nosuch", "grpc.code": "NotFound"}},
		{"GetServerInfo", map[string]string{"namespace": "", "session_id": "", "session_alias": ""}},
	}
	for _, tt := range tests {
		t.Run(tt.method, func(t *testing.T) {
			lines := h.logs.FilterMessage("finished call").FilterField(zap.String("grpc.method", tt.method)).All()
			if len(lines) != 1 {
				t.Fatalf("%d log lines, want 1: %v", len(lines), lines)
			}
			f := lines[0].ContextMap()
			for k, v := range tt.want {
				got, ok := f[k]
				if v == "" && ok && k != "namespace" {
					t.Errorf("field %s = %v, want none", k, got)
				}
				if v == "" && k == "namespace" && ok {
					t.Errorf("a request naming no namespace logged namespace %v", got)
				}
				if v != "" && got != v {
					t.Errorf("field %s = %v, want %q", k, got, v)
				}
			}
			if d, _ := f["duration"].(string); !readable.MatchString(d) {
				t.Errorf("duration %q is not a readable duration", f["duration"])
			}
			if f["grpc.service"] != "sessiond.v1.SessionStoreService" || f["peer.address"] == nil {
				t.Errorf("log line lacks the middleware's fields: %v", f)
			}
		})
	}
}

func TestRoundDuration(t *testing.T) {
	for _, tt := range []struct {
		in   time.Duration
		want string
	}{
		{2123456 * time.Nanosecond, "2.12ms"},
		{2100 * time.Microsecond, "2.1ms"},
		{153 * time.Microsecond, "153µs"},
		{1234567890 * time.Nanosecond, "1.23s"},
		{999 * time.Nanosecond, "999ns"},
		{0, "0s"},
	} {
		if got := roundDuration(tt.in).String(); got != tt.want {
			t.Errorf("roundDuration(%v) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// slowPanicStore panics in Append after a pause, on a session whose alias
// is "boom".
type slowPanicStore struct{ storage.Driver }

const slowPanicPause = 30 * time.Millisecond

func (s slowPanicStore) Append(ctx context.Context, req storage.AppendRequest, msgs storage.Messages) (storage.AppendResult, error) {
	if req.Ref.Alias == "boom" {
		time.Sleep(slowPanicPause)
		panic("boom in Append")
	}
	return s.Driver.Append(ctx, req, msgs)
}

// TestCallLogsAtInfo checks the quiet path of the call log (unaryCalls): at
// the info level a successful call writes no line, and a call that fails
// with a logged code still writes the middleware's whole line, with the
// call's own start time and duration.
func TestCallLogsAtInfo(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	h := newHarness(t, harnessConfig{
		wrap: func(d storage.Driver) storage.Driver { return slowPanicStore{d} },
		opts: []Option{WithLogger(zap.New(core))},
	})
	ctx := t.Context()
	h.create(t, &sessiondv1.CreateSessionRequest{Alias: "boom"})
	s := h.create(t, &sessiondv1.CreateSessionRequest{Alias: "calm"})
	if _, err := h.client.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byID(s.GetId()), Messages: []*sessiondv1.Message{user("a", "b")}}); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	_, err := h.client.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byAlias("boom"), Messages: []*sessiondv1.Message{user("a", "b")}})
	wantCode(t, err, codes.Internal, "")

	lines := logs.FilterMessage("finished call").All()
	if len(lines) != 1 {
		t.Fatalf("%d call lines at info, want only the failed call's: %v", len(lines), lines)
	}
	f := lines[0].ContextMap()
	for k, v := range map[string]string{"grpc.method": "AppendMessages", "grpc.code": "Internal", "session_alias": "boom",
		"grpc.service": "sessiond.v1.SessionStoreService", "panic": "boom in Append"} {
		if f[k] != v {
			t.Errorf("field %s = %v, want %q", k, f[k], v)
		}
	}
	if lines[0].Level != zapcore.ErrorLevel || f["peer.address"] == nil || f["stack"] == nil {
		t.Errorf("line at %v lacks the middleware's or the panic's fields: %v", lines[0].Level, f)
	}
	d, err := time.ParseDuration(f["duration"].(string))
	if err != nil || d < slowPanicPause {
		t.Errorf("duration %v (%v): want the call's own, at least %v", f["duration"], err, slowPanicPause)
	}
	start, err := time.Parse(time.RFC3339Nano, f["grpc.start_time"].(string))
	if err != nil || start.Before(before) || time.Since(start) < slowPanicPause {
		t.Errorf("grpc.start_time %v (%v): want the call's own start", f["grpc.start_time"], err)
	}
}

// TestPanicLogsAtDebug: when the logger writes every call's line, a call
// that panics still answers INTERNAL and logs one line with the panic and
// its stack.
func TestPanicLogsAtDebug(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	h := newHarness(t, harnessConfig{
		wrap: func(d storage.Driver) storage.Driver { return slowPanicStore{d} },
		opts: []Option{WithLogger(zap.New(core))},
	})
	h.create(t, &sessiondv1.CreateSessionRequest{Alias: "boom"})
	_, err := h.client.AppendMessages(t.Context(), &sessiondv1.AppendMessagesRequest{Ref: byAlias("boom"), Messages: []*sessiondv1.Message{user("a", "b")}})
	wantCode(t, err, codes.Internal, "internal error")

	lines := logs.FilterMessage("finished call").FilterField(zap.String("grpc.method", "AppendMessages")).All()
	if len(lines) != 1 {
		t.Fatalf("%d AppendMessages lines, want 1: %v", len(lines), lines)
	}
	f := lines[0].ContextMap()
	if f["grpc.code"] != "Internal" || f["panic"] != "boom in Append" || f["stack"] == nil || f["session_alias"] != "boom" || lines[0].Level != zapcore.ErrorLevel {
		t.Errorf("line at %v: want an error line with the code, the panic, its stack and the session: %v", lines[0].Level, f)
	}
}
