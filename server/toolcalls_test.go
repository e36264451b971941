package server

import (
	"io"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// parallelCalls is a conversation whose assistant made two tool calls at
// once; only the first was answered before the user moved on.
func parallelCalls() []*sessiondv1.Message {
	at := timestamppb.New(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	return []*sessiondv1.Message{
		{Id: "u1", Role: sessiondv1.Role_ROLE_USER, Content: "weather in Paris and Oslo?", CreatedAt: at},
		{Id: "a1", Role: sessiondv1.Role_ROLE_ASSISTANT, Model: "gpt-4.1", CreatedAt: at,
			Usage: &sessiondv1.Usage{InputTokens: 120, OutputTokens: 30, CachedInputTokens: 100},
			ToolCalls: []*sessiondv1.ToolCall{
				{Id: "call_paris", Name: "weather", Arguments: `{"city":"Paris"}`},
				{Id: "call_oslo", Name: "weather", Arguments: `{"city":"Oslo"}`},
			}},
		{Id: "t1", Role: sessiondv1.Role_ROLE_TOOL, ToolCallId: "call_paris", Name: "weather", Content: "18°C", CreatedAt: at},
		{Id: "u2", Role: sessiondv1.Role_ROLE_USER, Content: "never mind Oslo", CreatedAt: at},
		{Id: "a2", Role: sessiondv1.Role_ROLE_ASSISTANT, Model: "claude-sonnet-4", Content: "Paris is at 18°C.", CreatedAt: at,
			Usage: &sessiondv1.Usage{InputTokens: 200, OutputTokens: 12, ReasoningTokens: 4}},
	}
}

// loadFrames loads a session and returns every frame.
func loadFrames(t *testing.T, h *harness, req *sessiondv1.LoadSessionRequest) []*sessiondv1.LoadSessionResponse {
	t.Helper()
	st, err := h.client.LoadSession(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	var frames []*sessiondv1.LoadSessionResponse
	for {
		f, err := st.Recv()
		if err == io.EOF {
			return frames
		}
		if err != nil {
			t.Fatalf("LoadSession: %v", err)
		}
		t.Logf("frame %d: %s", len(frames), protojson.Format(f))
		frames = append(frames, f)
	}
}

func frameMessages(frames []*sessiondv1.LoadSessionResponse) []*sessiondv1.Message {
	var out []*sessiondv1.Message
	for _, f := range frames {
		out = append(out, f.GetMessages()...)
	}
	return out
}

func ids(ms []*sessiondv1.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.GetId()
	}
	return out
}

func TestLoadSessionCloseOpenToolCalls(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	ctx := t.Context()
	cr, err := h.client.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Messages: parallelCalls()})
	if err != nil {
		t.Fatal(err)
	}
	sess := cr.GetSession()
	wantUsage := &sessiondv1.Usage{InputTokens: 320, OutputTokens: 42, CachedInputTokens: 100, ReasoningTokens: 4}
	if diff := cmp.Diff(wantUsage, sess.GetUsage(), protocmp.Transform()); diff != "" {
		t.Errorf("create answer's usage (-want +got):\n%s", diff)
	}
	if got := sess.GetOpenToolCallIds(); !cmp.Equal(got, []string{"call_oslo"}) {
		t.Errorf("open_tool_call_ids = %v, want [call_oslo]", got)
	}
	if got := sess.GetModels(); !cmp.Equal(got, []string{"claude-sonnet-4", "gpt-4.1"}) {
		t.Errorf("models = %v, want most recent first", got)
	}
	ref := &sessiondv1.SessionRef{Key: &sessiondv1.SessionRef_Id{Id: sess.GetId()}}

	// Without the option: what is stored, nothing more.
	plain := loadFrames(t, h, &sessiondv1.LoadSessionRequest{Ref: ref})
	if got := ids(frameMessages(plain)); !cmp.Equal(got, []string{"u1", "a1", "t1", "u2", "a2"}) {
		t.Fatalf("plain load = %v", got)
	}
	if got := plain[0].GetSession().GetOpenToolCallIds(); !cmp.Equal(got, []string{"call_oslo"}) {
		t.Errorf("load's first frame open_tool_call_ids = %v", got)
	}

	// With it: a synthetic result for call_oslo after the tool run that
	// follows a1, before u2.
	closed := loadFrames(t, h, &sessiondv1.LoadSessionRequest{Ref: ref, CloseOpenToolCalls: true})
	msgs := frameMessages(closed)
	if got := ids(msgs); !cmp.Equal(got, []string{"u1", "a1", "t1", "sessiond-interrupted-call_oslo", "u2", "a2"}) {
		t.Fatalf("closing load = %v", got)
	}
	syn := msgs[3]
	want := &sessiondv1.Message{
		Id: "sessiond-interrupted-call_oslo", Role: sessiondv1.Role_ROLE_TOOL, ToolCallId: "call_oslo", Name: "weather",
		Content: storage.InterruptedContent, CreatedAt: msgs[1].GetCreatedAt(),
		Metadata: map[string]string{"sessiond.synthetic": "true"},
	}
	if diff := cmp.Diff(want, syn, protocmp.Transform()); diff != "" {
		t.Errorf("synthetic result (-want +got):\n%s", diff)
	}
	if got := closed[0].GetSession().GetMessageCount(); got != 5 {
		t.Errorf("message_count = %d with synthetic results; they are not counted", got)
	}
	// Nothing was stored.
	if again := loadFrames(t, h, &sessiondv1.LoadSessionRequest{Ref: ref}); len(frameMessages(again)) != 5 ||
		again[0].GetSession().GetRevision() != sess.GetRevision() {
		t.Errorf("a closing load changed the session: %d messages, revision %d", len(frameMessages(again)), again[0].GetSession().GetRevision())
	}

	// Windows count stored messages; an assistant message in the window
	// gets its synthetic results at the end of its tool run in the window.
	for _, c := range []struct {
		name string
		req  *sessiondv1.LoadSessionRequest
		want []string
	}{
		{"window ends at the call", &sessiondv1.LoadSessionRequest{Ref: ref, CloseOpenToolCalls: true, Limit: 2}, []string{"u1", "a1", "sessiond-interrupted-call_oslo"}},
		{"window ends in the tool run", &sessiondv1.LoadSessionRequest{Ref: ref, CloseOpenToolCalls: true, Limit: 3}, []string{"u1", "a1", "t1", "sessiond-interrupted-call_oslo"}},
		{"call outside the window", &sessiondv1.LoadSessionRequest{Ref: ref, CloseOpenToolCalls: true, Offset: 2}, []string{"t1", "u2", "a2"}},
		{"tail", &sessiondv1.LoadSessionRequest{Ref: ref, CloseOpenToolCalls: true, Tail: true, Limit: 4}, []string{"a1", "t1", "sessiond-interrupted-call_oslo", "u2", "a2"}},
	} {
		if got := ids(frameMessages(loadFrames(t, h, c.req))); !cmp.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}

	// Answering the open call closes it: no synthetic result any more.
	// (Watch events' tallies are checked by the conformance suite, where a
	// subscription starts synchronously; over gRPC a watch "from now" may
	// start after the append.)
	if _, err := h.client.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: ref, Messages: []*sessiondv1.Message{
		{Id: "t2", Role: sessiondv1.Role_ROLE_TOOL, ToolCallId: "call_oslo", Content: "late: -2°C"},
	}}); err != nil {
		t.Fatal(err)
	}
	after := loadFrames(t, h, &sessiondv1.LoadSessionRequest{Ref: ref, CloseOpenToolCalls: true})
	if got := ids(frameMessages(after)); !cmp.Equal(got, []string{"u1", "a1", "t1", "u2", "a2", "t2"}) {
		t.Errorf("after the answer: %v", got)
	}
	if got := after[0].GetSession().GetOpenToolCallIds(); len(got) != 0 {
		t.Errorf("open_tool_call_ids after the answer = %v", got)
	}
}

func TestToolCallPairingErrors(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	ctx := t.Context()
	cr, err := h.client.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Messages: parallelCalls()})
	if err != nil {
		t.Fatal(err)
	}
	ref := &sessiondv1.SessionRef{Key: &sessiondv1.SessionRef_Id{Id: cr.GetSession().GetId()}}
	tool := func(id, call string) *sessiondv1.Message {
		return &sessiondv1.Message{Id: id, Role: sessiondv1.Role_ROLE_TOOL, ToolCallId: call, Content: "r"}
	}
	// An unknown call, and a second result for an answered one.
	_, err = h.client.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: ref, Messages: []*sessiondv1.Message{tool("x1", "call_nope")}})
	wantCode(t, err, codes.InvalidArgument, "messages[0].tool_call_id")
	_, err = h.client.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: ref, Messages: []*sessiondv1.Message{tool("x1", "call_oslo"), tool("x2", "call_oslo")}})
	wantCode(t, err, codes.InvalidArgument, "messages[1].tool_call_id")
	_, err = h.client.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: ref, Messages: []*sessiondv1.Message{tool("x1", "call_paris")}})
	wantCode(t, err, codes.InvalidArgument, "messages[0].tool_call_id")
	// A create, and a save: the same rule over the whole batch.
	_, err = h.client.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Messages: []*sessiondv1.Message{tool("x1", "call_paris")}})
	wantCode(t, err, codes.InvalidArgument, "messages[0].tool_call_id")
	// A retry of a stored append is still a no-op, whatever the rule says now.
	if _, err := h.client.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: ref, Messages: []*sessiondv1.Message{parallelCalls()[2]}}); err != nil {
		t.Fatalf("retry of a stored tool result: %v", err)
	}
	// Negative usage names its field.
	bad := &sessiondv1.Message{Id: "neg", Role: sessiondv1.Role_ROLE_ASSISTANT, Usage: &sessiondv1.Usage{OutputTokens: -1}}
	_, err = h.client.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: ref, Messages: []*sessiondv1.Message{bad}})
	wantCode(t, err, codes.InvalidArgument, "messages[0].usage.output_tokens")
}

func TestListSessionsModelFilter(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	ctx := t.Context()
	cr, err := h.client.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Messages: parallelCalls()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Title: "no model"}); err != nil {
		t.Fatal(err)
	}
	list := func(model string) []string {
		st, err := h.client.ListSessions(ctx, &sessiondv1.ListSessionsRequest{Model: model})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for {
			f, err := st.Recv()
			if err == io.EOF {
				return got
			}
			if err != nil {
				wantCode(t, err, codes.InvalidArgument, "model")
				return nil
			}
			got = append(got, f.GetSession().GetId())
		}
	}
	if got := list("gpt-4.1"); !cmp.Equal(got, []string{cr.GetSession().GetId()}) {
		t.Errorf("model gpt-4.1: %v", got)
	}
	if got := list("gpt-5"); len(got) != 0 {
		t.Errorf("model gpt-5: %v", got)
	}
	if got := list("bad\nmodel"); got != nil {
		t.Errorf("a model with a control character listed %v", got)
	}
}

func TestExpireAfterCreateAndUpdate(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	ctx := t.Context()
	cr, err := h.client.CreateSession(ctx, &sessiondv1.CreateSessionRequest{ExpireAfter: durationpb.New(30 * 24 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if got := cr.GetSession().GetExpireAfter().AsDuration(); got != 30*24*time.Hour {
		t.Errorf("expire_after = %v", got)
	}
	ref := &sessiondv1.SessionRef{Key: &sessiondv1.SessionRef_Id{Id: cr.GetSession().GetId()}}
	get := func() *sessiondv1.Session {
		g, err := h.client.GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: ref})
		if err != nil {
			t.Fatal(err)
		}
		return g.GetSession()
	}
	if got := get().GetExpireAfter().AsDuration(); got != 30*24*time.Hour {
		t.Errorf("get: expire_after = %v", got)
	}
	up, err := h.client.UpdateSession(ctx, &sessiondv1.UpdateSessionRequest{Ref: ref, Session: &sessiondv1.Session{ExpireAfter: durationpb.New(time.Hour)},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"expire_after"}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := up.GetSession().GetExpireAfter().AsDuration(); got != time.Hour || up.GetSession().GetRevision() != 2 {
		t.Errorf("update: expire_after = %v, revision %d", got, up.GetSession().GetRevision())
	}
	// Unset removes it.
	up, err = h.client.UpdateSession(ctx, &sessiondv1.UpdateSessionRequest{Ref: ref, Session: &sessiondv1.Session{},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"expire_after"}}})
	if err != nil {
		t.Fatal(err)
	}
	if up.GetSession().GetExpireAfter() != nil || get().GetExpireAfter() != nil {
		t.Errorf("unset expire_after kept %v", up.GetSession().GetExpireAfter())
	}
	for _, c := range []struct {
		d     *durationpb.Duration
		field string
	}{
		{durationpb.New(-time.Hour), "expire_after"},
		{durationpb.New(500 * time.Millisecond), "expire_after"},
		{durationpb.New(200 * 365 * 24 * time.Hour), "expire_after"},
		{&durationpb.Duration{Seconds: 1, Nanos: -5}, "expire_after"},
	} {
		_, err := h.client.CreateSession(ctx, &sessiondv1.CreateSessionRequest{ExpireAfter: c.d})
		wantCode(t, err, codes.InvalidArgument, c.field)
		_, err = h.client.UpdateSession(ctx, &sessiondv1.UpdateSessionRequest{Ref: ref, Session: &sessiondv1.Session{ExpireAfter: c.d},
			UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"expire_after"}}})
		wantCode(t, err, codes.InvalidArgument, "session."+c.field)
	}
}
