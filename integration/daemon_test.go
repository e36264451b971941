package integration

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// The limits the design gives as defaults.
const (
	defaultMaxMessageBytes  = 16 << 20
	defaultMaxFrameBytes    = 64 << 20
	defaultMaxTitleBytes    = 1 << 10
	defaultMaxMapEntries    = 256
	defaultMaxMapKeyBytes   = 256
	defaultMaxMapValueBytes = 64 << 10
)

func TestServerInfoAndHealth(t *testing.T) {
	d := startDaemon(t, t.TempDir())
	ctx := testContext(t, 30*time.Second)
	cc := d.conn(t)

	info, err := sessiondv1.NewSessionStoreServiceClient(cc).GetServerInfo(ctx, &sessiondv1.GetServerInfoRequest{})
	if err != nil {
		t.Fatalf("GetServerInfo: %v", err)
	}
	if info.GetVersion() == "" {
		t.Error("GetServerInfo: empty version")
	}
	if info.GetBackend() != "file" {
		t.Errorf("backend = %q, want %q", info.GetBackend(), "file")
	}
	// The limits with documented defaults (docs/operations.md); the others
	// (summary, whole-session save) only have to be set.
	want := proto.Clone(info.GetLimits()).(*sessiondv1.ServerLimits)
	want.MaxMessageBytes = defaultMaxMessageBytes
	want.MaxFrameBytes = defaultMaxFrameBytes
	want.MaxTitleBytes = defaultMaxTitleBytes
	want.MaxMapEntries = defaultMaxMapEntries
	want.MaxMapKeyBytes = defaultMaxMapKeyBytes
	want.MaxMapValueBytes = defaultMaxMapValueBytes
	if diff := protoDiff(want, info.GetLimits()); diff != "" {
		t.Errorf("default limits (-want +got):\n%s", diff)
	}
	if info.GetLimits().GetMaxSummaryBytes() <= 0 {
		t.Errorf("max_summary_bytes = %d, want > 0", info.GetLimits().GetMaxSummaryBytes())
	}

	hc, err := grpc_health_v1.NewHealthClient(cc).Check(ctx, &grpc_health_v1.HealthCheckRequest{})
	if err != nil {
		t.Fatalf("health Check: %v", err)
	}
	if hc.GetStatus() != grpc_health_v1.HealthCheckResponse_SERVING {
		t.Errorf("health status = %v, want SERVING", hc.GetStatus())
	}
	hc, err = grpc_health_v1.NewHealthClient(cc).Check(ctx, &grpc_health_v1.HealthCheckRequest{Service: sessiondv1.SessionStoreService_ServiceDesc.ServiceName})
	if err != nil {
		t.Fatalf("health Check of the service: %v", err)
	}
	if hc.GetStatus() != grpc_health_v1.HealthCheckResponse_SERVING {
		t.Errorf("service health status = %v, want SERVING", hc.GetStatus())
	}

	// The JSON log is structured: every line the daemon wrote so far is a
	// JSON object with a level and a message.
	lines := d.logLines()
	if len(lines) == 0 {
		t.Fatal("no JSON log lines")
	}
	for _, l := range lines {
		if l["msg"] == nil || l["level"] == nil {
			t.Errorf("log line without msg or level: %v", l)
		}
	}
}

// weatherConversation is a conversation that uses every kind of message
// content, with fixed timestamps so that what comes back must equal it
// field for field.
func weatherConversation() []*sessiondv1.Message {
	ts := timestamppb.New(time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC))
	future := &sessiondv1.Message{Id: "m-future", Role: sessiondv1.Role_ROLE_USER, Content: "from a newer client", CreatedAt: ts}
	// A field this daemon's proto does not know: it must survive.
	future.ProtoReflect().SetUnknown(protowire.AppendString(protowire.AppendTag(nil, 999, protowire.BytesType), "unknown field payload"))
	return []*sessiondv1.Message{
		{Id: "m-user", Role: sessiondv1.Role_ROLE_USER, Content: "What is the weather in Paris?", CreatedAt: ts, Metadata: map[string]string{"client": "integration"}},
		{
			Id: "m-call", Role: sessiondv1.Role_ROLE_ASSISTANT, CreatedAt: ts,
			// Not valid JSON on purpose: arguments are stored byte for byte.
			ToolCalls: []*sessiondv1.ToolCall{{Id: "call-1", Name: "weather", Arguments: `{"city":  "Paris", "unit": "C",}`}},
			Reasoning: &sessiondv1.Reasoning{Text: "I need the weather tool.", Signature: "c2ln"},
			Metadata:  map[string]string{"model": "test-model", "tokens": "42"},
		},
		{Id: "m-result", Role: sessiondv1.Role_ROLE_TOOL, ToolCallId: "call-1", Name: "weather", Content: `{"temp_c": 21}`, CreatedAt: ts},
		{
			Id: "m-answer", Role: sessiondv1.Role_ROLE_ASSISTANT, Content: "21 °C and sunny.", CreatedAt: ts,
			Parts: []*sessiondv1.ContentPart{
				{Kind: &sessiondv1.ContentPart_Text{Text: "21 °C"}},
				{Kind: &sessiondv1.ContentPart_Json{Json: `{"temp_c":21}`}},
				{Kind: &sessiondv1.ContentPart_Blob{Blob: &sessiondv1.Blob{MimeType: "image/png", Data: []byte{0x89, 'P', 'N', 'G', 0, 0xff, 1}}}},
			},
		},
		future,
	}
}

func TestSessionLifecycle(t *testing.T) {
	d := startDaemon(t, t.TempDir())
	ctx := testContext(t, 60*time.Second)
	c := d.client(t)

	sys := &sessiondv1.Message{Id: "m-sys", Role: sessiondv1.Role_ROLE_SYSTEM, Content: "You are terse.", CreatedAt: timestamppb.New(time.Unix(1700000000, 0))}
	createReq := &sessiondv1.CreateSessionRequest{
		Alias:    "weather",
		Title:    "Weather chat",
		Summary:  "asks about the weather",
		Metadata: map[string]string{"model": "test-model"},
		Labels:   map[string]string{"team": "a"},
		Messages: []*sessiondv1.Message{sys},
	}
	created, err := c.CreateSession(ctx, createReq)
	if err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	s := created.GetSession()
	id := s.GetId()
	if u, err := uuid.Parse(id); err != nil || u.String() != id || u.Version() != 7 {
		t.Errorf("session id %q is not a lowercase canonical UUIDv7", id)
	}
	wantCreated := &sessiondv1.Session{
		Id: id, Alias: "weather", Title: "Weather chat", Summary: "asks about the weather",
		Metadata: map[string]string{"model": "test-model"}, Labels: map[string]string{"team": "a"},
		Revision: 1, MessageCount: 1, ContextMessageCount: 1,
	}
	if diff := protoDiff(wantCreated, s, protocmp.IgnoreFields(&sessiondv1.Session{}, "created_at", "updated_at")); diff != "" {
		t.Errorf("created session (-want +got):\n%s", diff)
	}
	if s.GetCreatedAt() == nil || s.GetUpdatedAt() == nil {
		t.Errorf("created session lacks created_at or updated_at: %v", s)
	}
	if len(s.GetMessages()) != 0 {
		t.Errorf("CreateSession answered %d messages; want metadata only", len(s.GetMessages()))
	}

	conv := weatherConversation()
	t.Run("append", func(t *testing.T) {
		r, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byID("", id), Messages: conv[:3]})
		if err != nil {
			t.Fatalf("AppendMessages: %v", err)
		}
		if r.GetRevision() != 2 || r.GetMessageCount() != 4 {
			t.Errorf("append answered revision %d count %d, want 2 and 4", r.GetRevision(), r.GetMessageCount())
		}
		// A retry of the same batch (after a lost answer) changes nothing.
		r, err = c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byID("", id), Messages: conv[:3], ExpectedRevision: 1})
		if err != nil {
			t.Fatalf("retried AppendMessages: %v", err)
		}
		if r.GetRevision() != 2 || r.GetMessageCount() != 4 {
			t.Errorf("retried append answered revision %d count %d, want 2 and 4 (a no-op)", r.GetRevision(), r.GetMessageCount())
		}
		// By alias, with the right expected revision.
		r, err = c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byAlias("", "weather"), Messages: conv[3:], ExpectedRevision: 2})
		if err != nil {
			t.Fatalf("AppendMessages by alias: %v", err)
		}
		if r.GetRevision() != 3 || r.GetMessageCount() != 6 {
			t.Errorf("append answered revision %d count %d, want 3 and 6", r.GetRevision(), r.GetMessageCount())
		}
		// The server fills a missing id and created_at.
		r, err = c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byID("", id), Messages: []*sessiondv1.Message{{Role: sessiondv1.Role_ROLE_USER, Content: "thanks"}}})
		if err != nil {
			t.Fatalf("AppendMessages without id: %v", err)
		}
		if r.GetRevision() != 4 || r.GetMessageCount() != 7 {
			t.Errorf("append answered revision %d count %d, want 4 and 7", r.GetRevision(), r.GetMessageCount())
		}
	})

	t.Run("load", func(t *testing.T) {
		sess, msgs := mustLoad(t, ctx, c, &sessiondv1.LoadSessionRequest{Ref: byID("", id)})
		if sess.GetRevision() != 4 || sess.GetMessageCount() != 7 || len(sess.GetMessages()) != 0 {
			t.Errorf("loaded session: revision %d count %d with %d messages inline; want 4, 7, 0", sess.GetRevision(), sess.GetMessageCount(), len(sess.GetMessages()))
		}
		if len(msgs) != 7 {
			t.Fatalf("loaded %d messages, want 7", len(msgs))
		}
		if diff := protoDiff(append([]*sessiondv1.Message{sys}, conv...), msgs[:6]); diff != "" {
			t.Errorf("stored messages differ from what was sent (-want +got):\n%s", diff)
		}
		last := msgs[6]
		if last.GetId() == "" || last.GetCreatedAt() == nil || last.GetContent() != "thanks" || last.GetRole() != sessiondv1.Role_ROLE_USER {
			t.Errorf("message appended without id: got %v, want an id and created_at filled in", last)
		}
		if age := time.Since(last.GetCreatedAt().AsTime()); age < -time.Minute || age > 5*time.Minute {
			t.Errorf("server-filled created_at %v is not about now", last.GetCreatedAt().AsTime())
		}

		// Windows of the conversation.
		all := msgs
		for _, tc := range []struct {
			name string
			req  *sessiondv1.LoadSessionRequest
			want []*sessiondv1.Message
		}{
			{"tail 2", &sessiondv1.LoadSessionRequest{Ref: byID("", id), Limit: 2, Tail: true}, all[5:]},
			{"tail beyond", &sessiondv1.LoadSessionRequest{Ref: byID("", id), Limit: 100, Tail: true}, all},
			{"offset 1 limit 2", &sessiondv1.LoadSessionRequest{Ref: byID("", id), Offset: 1, Limit: 2}, all[1:3]},
			{"offset only", &sessiondv1.LoadSessionRequest{Ref: byID("", id), Offset: 5}, all[5:]},
			{"offset past end", &sessiondv1.LoadSessionRequest{Ref: byID("", id), Offset: 50}, nil},
			{"by alias", &sessiondv1.LoadSessionRequest{Ref: byAlias("", "weather"), Limit: 1}, all[:1]},
			{"by uppercase id", &sessiondv1.LoadSessionRequest{Ref: byID("", strings.ToUpper(id)), Limit: 1}, all[:1]},
		} {
			t.Run(tc.name, func(t *testing.T) {
				sess, got := mustLoad(t, ctx, c, tc.req)
				if sess.GetId() != id {
					t.Errorf("loaded session %q, want %q", sess.GetId(), id)
				}
				if diff := protoDiff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("messages (-want +got):\n%s", diff)
				}
			})
		}
	})

	t.Run("get", func(t *testing.T) {
		got, err := c.GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: byAlias("", "weather")})
		if err != nil {
			t.Fatalf("GetSession: %v", err)
		}
		if got.GetSession().GetId() != id || got.GetSession().GetRevision() != 4 || got.GetSession().GetMessageCount() != 7 {
			t.Errorf("GetSession = %v, want id %s revision 4 count 7", got.GetSession(), id)
		}
		if !got.GetSession().GetUpdatedAt().AsTime().After(got.GetSession().GetCreatedAt().AsTime()) {
			t.Errorf("updated_at %v is not after created_at %v", got.GetSession().GetUpdatedAt().AsTime(), got.GetSession().GetCreatedAt().AsTime())
		}
	})

	t.Run("retried create with the same id", func(t *testing.T) {
		newID := uuid.Must(uuid.NewV7()).String()
		req := &sessiondv1.CreateSessionRequest{Id: newID, Alias: "retry-me", Title: "t", Messages: []*sessiondv1.Message{textMsg("r1", sessiondv1.Role_ROLE_USER, "hi")}}
		first, err := c.CreateSession(ctx, req)
		if err != nil {
			t.Fatalf("CreateSession with id: %v", err)
		}
		second, err := c.CreateSession(ctx, req)
		if err != nil {
			t.Fatalf("retried CreateSession: %v", err)
		}
		if diff := protoDiff(first.GetSession(), second.GetSession()); diff != "" {
			t.Errorf("retried create answered another session (-first +second):\n%s", diff)
		}
		// Same id, other content: refused, not merged.
		other := &sessiondv1.CreateSessionRequest{Id: newID, Title: "different"}
		_, err = c.CreateSession(ctx, other)
		wantCode(t, err, codes.AlreadyExists)
		list := mustList(t, ctx, c, &sessiondv1.ListSessionsRequest{AliasPrefix: "retry-me"})
		if len(list) != 1 {
			t.Errorf("%d sessions with alias retry-me, want 1", len(list))
		}
	})
}

func TestSaveSession(t *testing.T) {
	d := startDaemon(t, t.TempDir())
	ctx := testContext(t, 30*time.Second)
	c := d.client(t)

	first := []*sessiondv1.Message{textMsg("s1", sessiondv1.Role_ROLE_USER, "one"), textMsg("s2", sessiondv1.Role_ROLE_ASSISTANT, "two")}
	second := []*sessiondv1.Message{textMsg("s3", sessiondv1.Role_ROLE_USER, "three")}
	sess, err := saveSession(ctx, c, &sessiondv1.SaveSessionHeader{
		Ref: byAlias("", "saved"), CreateIfMissing: true, Title: "Saved", Summary: "sum", Metadata: map[string]string{"k": "v"},
	}, first, second)
	if err != nil {
		t.Fatalf("SaveSession create_if_missing: %v", err)
	}
	if sess.GetRevision() != 1 || sess.GetMessageCount() != 3 || sess.GetAlias() != "saved" || sess.GetTitle() != "Saved" {
		t.Errorf("saved session = %v, want revision 1, 3 messages, alias saved, title Saved", sess)
	}
	_, msgs := mustLoad(t, ctx, c, &sessiondv1.LoadSessionRequest{Ref: byAlias("", "saved")})
	if diff := protoDiff(append(slices.Clone(first), second...), msgs); diff != "" {
		t.Errorf("messages after save (-want +got):\n%s", diff)
	}

	// A whole-session save replaces messages, title, summary and metadata.
	replaced := []*sessiondv1.Message{textMsg("r1", sessiondv1.Role_ROLE_USER, "rewritten")}
	sess, err = saveSession(ctx, c, &sessiondv1.SaveSessionHeader{Ref: byAlias("", "saved"), ExpectedRevision: 1, Title: "Again"}, replaced)
	if err != nil {
		t.Fatalf("SaveSession: %v", err)
	}
	if sess.GetRevision() != 2 || sess.GetMessageCount() != 1 || sess.GetTitle() != "Again" || sess.GetSummary() != "" || len(sess.GetMetadata()) != 0 || sess.GetAlias() != "saved" {
		t.Errorf("after second save: %v; want revision 2, 1 message, title Again, no summary or metadata, alias kept", sess)
	}
	_, msgs = mustLoad(t, ctx, c, &sessiondv1.LoadSessionRequest{Ref: byAlias("", "saved")})
	if diff := protoDiff(replaced, msgs); diff != "" {
		t.Errorf("messages after second save (-want +got):\n%s", diff)
	}

	// A stale expected revision changes nothing.
	_, err = saveSession(ctx, c, &sessiondv1.SaveSessionHeader{Ref: byAlias("", "saved"), ExpectedRevision: 1, Title: "Lost"}, first)
	wantCode(t, err, codes.Aborted)
	got, err := c.GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: byAlias("", "saved")})
	if err != nil {
		t.Fatalf("GetSession: %v", err)
	}
	if got.GetSession().GetTitle() != "Again" || got.GetSession().GetRevision() != 2 {
		t.Errorf("a refused save changed the session: %v", got.GetSession())
	}

	// Without create_if_missing a missing session is NOT_FOUND.
	_, err = saveSession(ctx, c, &sessiondv1.SaveSessionHeader{Ref: byAlias("", "nobody")}, first)
	wantCode(t, err, codes.NotFound)
}

func TestListFiltersAndPages(t *testing.T) {
	d := startDaemon(t, t.TempDir())
	ctx := testContext(t, 60*time.Second)
	c := d.client(t)
	const ns = "list-ns"

	type spec struct {
		alias  string
		labels map[string]string
	}
	specs := []spec{
		{"proj-a1", map[string]string{"team": "a", "env": "prod"}},
		{"proj-a2", map[string]string{"team": "a", "env": "dev"}},
		{"proj-b1", map[string]string{"team": "b", "env": "prod"}},
		{"other", nil},
		{"", map[string]string{"team": "a"}},
	}
	byAliasID := map[string]string{}
	for _, s := range specs {
		r, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Namespace: ns, Alias: s.alias, Labels: s.labels, Title: "list " + s.alias})
		if err != nil {
			t.Fatalf("CreateSession(%q): %v", s.alias, err)
		}
		byAliasID[s.alias] = r.GetSession().GetId()
		// Distinct update times make the expected order unambiguous.
		time.Sleep(2 * time.Millisecond)
	}
	// Sessions elsewhere must not show up.
	if _, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Namespace: "list-other", Alias: "proj-a9"}); err != nil {
		t.Fatalf("CreateSession in another namespace: %v", err)
	}
	if _, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Alias: "proj-a8"}); err != nil {
		t.Fatalf("CreateSession in the default namespace: %v", err)
	}
	// Touch the first session: it becomes the most recently updated.
	if _, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byAlias(ns, "proj-a1"), Messages: []*sessiondv1.Message{textMsg("x", sessiondv1.Role_ROLE_USER, "touch")}}); err != nil {
		t.Fatalf("AppendMessages: %v", err)
	}

	aliases := func(list []*sessiondv1.Session) []string {
		out := make([]string, len(list))
		for i, s := range list {
			out[i] = s.GetAlias()
		}
		return out
	}
	all := mustList(t, ctx, c, &sessiondv1.ListSessionsRequest{Namespace: ns})
	if got, want := aliases(all), []string{"proj-a1", "", "other", "proj-b1", "proj-a2"}; !slices.Equal(got, want) {
		t.Fatalf("list order = %q, want %q (newest-updated first)", got, want)
	}
	for i := 1; i < len(all); i++ {
		if all[i-1].GetUpdatedAt().AsTime().Before(all[i].GetUpdatedAt().AsTime()) {
			t.Errorf("list not newest first at %d", i)
		}
	}
	for _, s := range all {
		if s.GetNamespace() != ns || len(s.GetMessages()) != 0 {
			t.Errorf("listed session %v: want namespace %q and metadata only", s, ns)
		}
	}

	for _, tc := range []struct {
		name string
		req  *sessiondv1.ListSessionsRequest
		want []string
	}{
		{"alias prefix", &sessiondv1.ListSessionsRequest{Namespace: ns, AliasPrefix: "proj-a"}, []string{"proj-a1", "proj-a2"}},
		{"one label", &sessiondv1.ListSessionsRequest{Namespace: ns, Labels: map[string]string{"team": "a"}}, []string{"proj-a1", "", "proj-a2"}},
		{"two labels", &sessiondv1.ListSessionsRequest{Namespace: ns, Labels: map[string]string{"team": "a", "env": "prod"}}, []string{"proj-a1"}},
		{"no match", &sessiondv1.ListSessionsRequest{Namespace: ns, Labels: map[string]string{"team": "z"}}, []string{}},
		{"limit", &sessiondv1.ListSessionsRequest{Namespace: ns, Limit: 2}, []string{"proj-a1", ""}},
		{"updated after (exclusive)", &sessiondv1.ListSessionsRequest{Namespace: ns, UpdatedAfter: all[2].GetUpdatedAt()}, []string{"proj-a1", ""}},
		{"updated before (exclusive)", &sessiondv1.ListSessionsRequest{Namespace: ns, UpdatedBefore: all[3].GetUpdatedAt()}, []string{"proj-a2"}},
		{"default namespace", &sessiondv1.ListSessionsRequest{AliasPrefix: "proj-"}, []string{"proj-a8"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := aliases(mustList(t, ctx, c, tc.req))
			if !slices.Equal(got, tc.want) {
				t.Errorf("aliases = %q, want %q", got, tc.want)
			}
		})
	}

	t.Run("pages", func(t *testing.T) {
		var (
			walked []string
			token  string
		)
		for page := 0; page < 10; page++ {
			frames, err := listSessions(ctx, c, &sessiondv1.ListSessionsRequest{Namespace: ns, Limit: 2, PageToken: token})
			if err != nil {
				t.Fatalf("ListSessions page %d: %v", page, err)
			}
			if len(frames) == 0 {
				break
			}
			for _, f := range frames {
				if f.GetNextPageToken() == "" {
					t.Fatalf("frame for %q has no next_page_token", f.GetSession().GetAlias())
				}
				walked = append(walked, f.GetSession().GetId())
			}
			token = frames[len(frames)-1].GetNextPageToken()
		}
		want := make([]string, len(all))
		for i, s := range all {
			want[i] = s.GetId()
		}
		if !slices.Equal(walked, want) {
			t.Errorf("pages of 2 walked %q, want %q", walked, want)
		}
		// A token resumes just after its own session, with filters kept.
		frames, err := listSessions(ctx, c, &sessiondv1.ListSessionsRequest{Namespace: ns})
		if err != nil {
			t.Fatalf("ListSessions: %v", err)
		}
		rest := mustList(t, ctx, c, &sessiondv1.ListSessionsRequest{Namespace: ns, PageToken: frames[0].GetNextPageToken()})
		if got := aliases(rest); !slices.Equal(got, []string{"", "other", "proj-b1", "proj-a2"}) {
			t.Errorf("after the first session's token: %q", got)
		}
		_, err = listSessions(ctx, c, &sessiondv1.ListSessionsRequest{Namespace: ns, PageToken: "!!not a token!!"})
		wantCode(t, err, codes.InvalidArgument, "page_token", "token")
	})

	t.Run("namespace isolation", func(t *testing.T) {
		_, err := c.GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: byID("list-other", byAliasID["proj-a1"])})
		wantCode(t, err, codes.NotFound)
		_, err = c.GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: byID("", byAliasID["proj-a1"])})
		wantCode(t, err, codes.NotFound)
		if _, err := c.GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: byID(ns, byAliasID["proj-a1"])}); err != nil {
			t.Errorf("GetSession in its own namespace: %v", err)
		}
	})
}

func TestUpdateForkRewindDelete(t *testing.T) {
	d := startDaemon(t, t.TempDir())
	ctx := testContext(t, 60*time.Second)
	c := d.client(t)

	msgs := []*sessiondv1.Message{
		textMsg("a", sessiondv1.Role_ROLE_USER, "first"),
		textMsg("b", sessiondv1.Role_ROLE_ASSISTANT, "second"),
		textMsg("c", sessiondv1.Role_ROLE_USER, "third"),
		textMsg("d", sessiondv1.Role_ROLE_ASSISTANT, "fourth"),
	}
	src, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{
		Alias: "src", Title: "Source", Summary: "sum", Metadata: map[string]string{"m": "1"}, Labels: map[string]string{"l": "1"}, Messages: msgs,
	})
	if err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	id := src.GetSession().GetId()

	t.Run("update and rename", func(t *testing.T) {
		r, err := c.UpdateSession(ctx, &sessiondv1.UpdateSessionRequest{
			Ref:        byAlias("", "src"),
			Session:    &sessiondv1.Session{Alias: "renamed", Title: "New title", Labels: map[string]string{"l": "2", "x": "y"}, Summary: "ignored: not in the mask"},
			UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"alias", "title", "labels"}},
		})
		if err != nil {
			t.Fatalf("UpdateSession: %v", err)
		}
		s := r.GetSession()
		want := &sessiondv1.Session{
			Id: id, Alias: "renamed", Title: "New title", Summary: "sum", Revision: 2, MessageCount: 4, ContextMessageCount: 4,
			Metadata: map[string]string{"m": "1"}, Labels: map[string]string{"l": "2", "x": "y"},
		}
		if diff := protoDiff(want, s, protocmp.IgnoreFields(&sessiondv1.Session{}, "created_at", "updated_at")); diff != "" {
			t.Errorf("updated session (-want +got):\n%s", diff)
		}
		_, err = c.GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: byAlias("", "src")})
		wantCode(t, err, codes.NotFound)
		if g, err := c.GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: byAlias("", "renamed")}); err != nil || g.GetSession().GetId() != id {
			t.Errorf("GetSession by new alias = %v, %v", g, err)
		}
		// The old alias is free again.
		other, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Alias: "src"})
		if err != nil {
			t.Fatalf("CreateSession with a freed alias: %v", err)
		}
		// Renaming onto a taken alias fails and changes nothing.
		_, err = c.UpdateSession(ctx, &sessiondv1.UpdateSessionRequest{Ref: byID("", id), Session: &sessiondv1.Session{Alias: "src"}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"alias"}}})
		wantCode(t, err, codes.AlreadyExists)
		// Removing an alias.
		r, err = c.UpdateSession(ctx, &sessiondv1.UpdateSessionRequest{Ref: byID("", other.GetSession().GetId()), Session: &sessiondv1.Session{}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"alias"}}})
		if err != nil {
			t.Fatalf("UpdateSession removing the alias: %v", err)
		}
		if r.GetSession().GetAlias() != "" {
			t.Errorf("alias after removal = %q", r.GetSession().GetAlias())
		}
		_, err = c.GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: byAlias("", "src")})
		wantCode(t, err, codes.NotFound)
		// Setting what is stored is a no-op.
		r, err = c.UpdateSession(ctx, &sessiondv1.UpdateSessionRequest{Ref: byID("", id), Session: &sessiondv1.Session{Title: "New title"}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"title"}}})
		if err != nil {
			t.Fatalf("no-op UpdateSession: %v", err)
		}
		if r.GetSession().GetRevision() != 2 {
			t.Errorf("no-op update bumped the revision to %d", r.GetSession().GetRevision())
		}
	})

	t.Run("fork", func(t *testing.T) {
		r, err := c.ForkSession(ctx, &sessiondv1.ForkSessionRequest{Ref: byID("", id), MessageCount: 2, Alias: "fork-2"})
		if err != nil {
			t.Fatalf("ForkSession: %v", err)
		}
		f := r.GetSession()
		want := &sessiondv1.Session{
			Id: f.GetId(), Alias: "fork-2", Title: "New title", Summary: "sum", Revision: 1, MessageCount: 2, ContextMessageCount: 2,
			Metadata: map[string]string{"m": "1"}, Labels: map[string]string{"l": "2", "x": "y"},
			Parent: &sessiondv1.ForkOrigin{SessionId: id, MessageCount: 2},
		}
		if diff := protoDiff(want, f, protocmp.IgnoreFields(&sessiondv1.Session{}, "created_at", "updated_at")); diff != "" {
			t.Errorf("fork (-want +got):\n%s", diff)
		}
		if f.GetId() == id {
			t.Fatal("fork has the source's id")
		}
		_, got := mustLoad(t, ctx, c, &sessiondv1.LoadSessionRequest{Ref: byAlias("", "fork-2")})
		if diff := protoDiff(msgs[:2], got); diff != "" {
			t.Errorf("forked messages (-want +got):\n%s", diff)
		}
		// message_count 0 copies everything; a title overrides the source's.
		r, err = c.ForkSession(ctx, &sessiondv1.ForkSessionRequest{Ref: byID("", id), Title: "Fork title"})
		if err != nil {
			t.Fatalf("ForkSession all: %v", err)
		}
		if r.GetSession().GetMessageCount() != 4 || r.GetSession().GetTitle() != "Fork title" || r.GetSession().GetParent().GetMessageCount() != 4 {
			t.Errorf("fork of all: %v", r.GetSession())
		}
		// The fork is independent of its source.
		if _, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byAlias("", "fork-2"), Messages: []*sessiondv1.Message{textMsg("f3", sessiondv1.Role_ROLE_USER, "fork only")}}); err != nil {
			t.Fatalf("AppendMessages to fork: %v", err)
		}
		_, got = mustLoad(t, ctx, c, &sessiondv1.LoadSessionRequest{Ref: byID("", id)})
		if diff := protoDiff(msgs, got); diff != "" {
			t.Errorf("source changed by a write to its fork (-want +got):\n%s", diff)
		}
		_, err = c.ForkSession(ctx, &sessiondv1.ForkSessionRequest{Ref: byID("", id), MessageCount: 5})
		wantCode(t, err, codes.InvalidArgument, "message_count")
		_, err = c.ForkSession(ctx, &sessiondv1.ForkSessionRequest{Ref: byID("", id), Alias: "fork-2"})
		wantCode(t, err, codes.AlreadyExists)
	})

	t.Run("rewind", func(t *testing.T) {
		g, err := c.GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: byID("", id)})
		if err != nil {
			t.Fatalf("GetSession: %v", err)
		}
		rev := g.GetSession().GetRevision()
		_, err = c.RewindSession(ctx, &sessiondv1.RewindSessionRequest{Ref: byID("", id), MessageCount: 5})
		wantCode(t, err, codes.InvalidArgument, "message_count")
		_, err = c.RewindSession(ctx, &sessiondv1.RewindSessionRequest{Ref: byID("", id), MessageCount: 1, ExpectedRevision: rev + 7})
		wantCode(t, err, codes.Aborted)

		r, err := c.RewindSession(ctx, &sessiondv1.RewindSessionRequest{Ref: byID("", id), MessageCount: 2, ExpectedRevision: rev})
		if err != nil {
			t.Fatalf("RewindSession: %v", err)
		}
		if r.GetSession().GetMessageCount() != 2 || r.GetSession().GetRevision() != rev+1 {
			t.Errorf("after rewind to 2: %v, want 2 messages at revision %d", r.GetSession(), rev+1)
		}
		_, got := mustLoad(t, ctx, c, &sessiondv1.LoadSessionRequest{Ref: byID("", id)})
		if diff := protoDiff(msgs[:2], got); diff != "" {
			t.Errorf("messages after rewind (-want +got):\n%s", diff)
		}
		// A dropped message's id may be used again, with new content.
		if _, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byID("", id), Messages: []*sessiondv1.Message{textMsg("c", sessiondv1.Role_ROLE_USER, "third, take two")}}); err != nil {
			t.Fatalf("AppendMessages after rewind: %v", err)
		}
		r, err = c.RewindSession(ctx, &sessiondv1.RewindSessionRequest{Ref: byID("", id)})
		if err != nil {
			t.Fatalf("RewindSession to 0: %v", err)
		}
		if r.GetSession().GetMessageCount() != 0 {
			t.Errorf("after rewind to 0: %d messages", r.GetSession().GetMessageCount())
		}
	})

	t.Run("delete", func(t *testing.T) {
		g, err := c.GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: byID("", id)})
		if err != nil {
			t.Fatalf("GetSession: %v", err)
		}
		_, err = c.DeleteSession(ctx, &sessiondv1.DeleteSessionRequest{Ref: byID("", id), ExpectedRevision: g.GetSession().GetRevision() + 1})
		wantCode(t, err, codes.Aborted)
		if _, err := c.DeleteSession(ctx, &sessiondv1.DeleteSessionRequest{Ref: byAlias("", "renamed"), ExpectedRevision: g.GetSession().GetRevision()}); err != nil {
			t.Fatalf("DeleteSession: %v", err)
		}
		_, err = c.GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: byID("", id)})
		wantCode(t, err, codes.NotFound)
		_, _, _, err = loadSession(ctx, c, &sessiondv1.LoadSessionRequest{Ref: byAlias("", "renamed")})
		wantCode(t, err, codes.NotFound)
		_, err = c.DeleteSession(ctx, &sessiondv1.DeleteSessionRequest{Ref: byID("", id)})
		wantCode(t, err, codes.NotFound)
		for _, s := range mustList(t, ctx, c, &sessiondv1.ListSessionsRequest{}) {
			if s.GetId() == id {
				t.Errorf("deleted session still listed")
			}
		}
		// Its alias is free, and its fork lives on.
		if _, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Alias: "renamed"}); err != nil {
			t.Errorf("CreateSession with a deleted session's alias: %v", err)
		}
		if _, err := c.GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: byAlias("", "fork-2")}); err != nil {
			t.Errorf("fork gone with its source: %v", err)
		}
	})
}

func TestSearch(t *testing.T) {
	d := startDaemon(t, t.TempDir())
	ctx := testContext(t, 30*time.Second)
	c := d.client(t)
	const ns = "search"

	_, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{
		Namespace: ns, Alias: "k8s", Title: "Kubernetes notes",
		Messages: []*sessiondv1.Message{
			textMsg("q", sessiondv1.Role_ROLE_USER, "How do I restart a POD?"),
			{Id: "call", Role: sessiondv1.Role_ROLE_ASSISTANT, ToolCalls: []*sessiondv1.ToolCall{{Id: "t1", Name: "shell", Arguments: `{"cmd":"kubectl rollout restart deployment/web"}`}}},
			{Id: "parts", Role: sessiondv1.Role_ROLE_ASSISTANT, Parts: []*sessiondv1.ContentPart{{Kind: &sessiondv1.ContentPart_Text{Text: "Done: the Zebra deployment restarted"}}}},
		},
	})
	if err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	if _, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Namespace: ns, Alias: "cooking", Summary: "pod of peas", Messages: []*sessiondv1.Message{textMsg("x", sessiondv1.Role_ROLE_USER, "nothing relevant")}}); err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	// The same words in another namespace are not found.
	if _, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Title: "Kubernetes POD rollout zebra"}); err != nil {
		t.Fatalf("CreateSession: %v", err)
	}

	type hit struct {
		alias string
		index int64
	}
	for _, tc := range []struct {
		query string
		limit int64
		want  []hit
	}{
		{"kubernetes", 0, []hit{{"k8s", -1}}},                     // title
		{"ROLLOUT", 0, []hit{{"k8s", 1}}},                         // tool-call arguments
		{"zebra", 0, []hit{{"k8s", 2}}},                           // text part
		{"Pod", 0, []hit{{"cooking", -1}, {"k8s", 0}}},            // summary, then content; cooking was updated last
		{"Pod", 1, []hit{{"cooking", -1}}},                        // limit
		{"no such words anywhere", 0, nil},                        // nothing
		{"cooki", 0, []hit{{"cooking", -1}}},                      // alias
		{"restart", 0, []hit{{"k8s", 0}, {"k8s", 1}, {"k8s", 2}}}, // message order
	} {
		t.Run(tc.query, func(t *testing.T) {
			hits, err := searchSessions(ctx, c, &sessiondv1.SearchSessionsRequest{Namespace: ns, Query: tc.query, Limit: tc.limit})
			if err != nil {
				t.Fatalf("SearchSessions: %v", err)
			}
			var got []hit
			for _, h := range hits {
				got = append(got, hit{h.GetSession().GetAlias(), h.GetMessageIndex()})
				if !strings.Contains(strings.ToLower(h.GetSnippet()), strings.ToLower(tc.query)) {
					t.Errorf("snippet %q does not contain %q", h.GetSnippet(), tc.query)
				}
				if len(h.GetSession().GetMessages()) != 0 {
					t.Errorf("search hit carries messages")
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("hits = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestWatch(t *testing.T) {
	d := startDaemon(t, t.TempDir())
	ctx := testContext(t, 60*time.Second)
	c := d.client(t)

	cr, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Alias: "watched"})
	if err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	id := cr.GetSession().GetId()

	type result struct {
		ev  *sessiondv1.WatchSessionResponse
		err error
	}
	watch := func(from uint64) <-chan result {
		ch := make(chan result, 1024)
		stream, err := c.WatchSession(ctx, &sessiondv1.WatchSessionRequest{Ref: byID("", id), FromRevision: from})
		if err != nil {
			ch <- result{err: err}
			close(ch)
			return ch
		}
		go func() {
			defer close(ch)
			for {
				ev, err := stream.Recv()
				ch <- result{ev, err}
				if err != nil {
					return
				}
			}
		}()
		return ch
	}
	next := func(ch <-chan result) *sessiondv1.WatchSessionResponse {
		t.Helper()
		select {
		case r := <-ch:
			if r.err != nil {
				t.Fatalf("watch ended: %v", r.err)
			}
			return r.ev
		case <-time.After(10 * time.Second):
			t.Fatal("no watch event within 10s")
			return nil
		}
	}
	update := func(title string) uint64 {
		t.Helper()
		r, err := c.UpdateSession(ctx, &sessiondv1.UpdateSessionRequest{Ref: byID("", id), Session: &sessiondv1.Session{Title: title}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"title"}}})
		if err != nil {
			t.Fatalf("UpdateSession: %v", err)
		}
		return r.GetSession().GetRevision()
	}

	// A watch "from now" has no way to say it is subscribed, so write until
	// the first event arrives; every later change must then arrive in order.
	live := watch(0)
	var first *sessiondv1.WatchSessionResponse
	for i := 0; first == nil && i < 50; i++ {
		update(fmt.Sprintf("tick %d", i))
		select {
		case r := <-live:
			if r.err != nil {
				t.Fatalf("watch ended: %v", r.err)
			}
			first = r.ev
		case <-time.After(200 * time.Millisecond):
		}
	}
	if first == nil {
		t.Fatal("watch delivered nothing in 50 updates")
	}
	if first.GetType() != sessiondv1.EventType_EVENT_TYPE_UPDATED {
		t.Fatalf("first event = %v, want UPDATED", first)
	}
	// Drain the events of ticks that raced with the first.
	g, err := c.GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: byID("", id)})
	if err != nil {
		t.Fatalf("GetSession: %v", err)
	}
	for rev := first.GetRevision(); rev < g.GetSession().GetRevision(); {
		ev := next(live)
		if ev.GetRevision() != rev+1 {
			t.Fatalf("event revision %d after %d", ev.GetRevision(), rev)
		}
		rev = ev.GetRevision()
	}
	subscribedAt := first.GetRevision()

	appended := []*sessiondv1.Message{textMsg("w1", sessiondv1.Role_ROLE_USER, "hello"), textMsg("w2", sessiondv1.Role_ROLE_ASSISTANT, "hi")}
	ar, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byID("", id), Messages: appended})
	if err != nil {
		t.Fatalf("AppendMessages: %v", err)
	}
	ev := next(live)
	if ev.GetType() != sessiondv1.EventType_EVENT_TYPE_APPENDED || ev.GetRevision() != ar.GetRevision() || ev.GetSession().GetMessageCount() != 2 {
		t.Errorf("after append: event %v, want APPENDED at revision %d with message_count 2", ev, ar.GetRevision())
	}
	if diff := protoDiff(appended, ev.GetMessages()); diff != "" {
		t.Errorf("appended event messages (-want +got):\n%s", diff)
	}
	titleRev := update("watched title")
	ev = next(live)
	if ev.GetType() != sessiondv1.EventType_EVENT_TYPE_UPDATED || ev.GetRevision() != titleRev || ev.GetSession().GetTitle() != "watched title" {
		t.Errorf("after update: event %v, want UPDATED at %d with the new title", ev, titleRev)
	}
	rw, err := c.RewindSession(ctx, &sessiondv1.RewindSessionRequest{Ref: byID("", id), MessageCount: 1})
	if err != nil {
		t.Fatalf("RewindSession: %v", err)
	}
	ev = next(live)
	if ev.GetType() != sessiondv1.EventType_EVENT_TYPE_REPLACED || ev.GetRevision() != rw.GetSession().GetRevision() {
		t.Errorf("after rewind: event %v, want REPLACED at %d", ev, rw.GetSession().GetRevision())
	}

	// A watch from a past revision replays the kept history first.
	replay := watch(subscribedAt)
	var types []sessiondv1.EventType
	for r := subscribedAt + 1; r <= rw.GetSession().GetRevision(); r++ {
		ev := next(replay)
		if ev.GetRevision() != r {
			t.Fatalf("replayed revision %d, want %d", ev.GetRevision(), r)
		}
		types = append(types, ev.GetType())
	}
	if len(types) < 3 || !slices.Equal(types[len(types)-3:], []sessiondv1.EventType{sessiondv1.EventType_EVENT_TYPE_APPENDED, sessiondv1.EventType_EVENT_TYPE_UPDATED, sessiondv1.EventType_EVENT_TYPE_REPLACED}) {
		t.Errorf("replayed types %v, want ... APPENDED UPDATED REPLACED", types)
	}

	// A revision from the future means "reload".
	future := watch(rw.GetSession().GetRevision() + 10)
	select {
	case r := <-future:
		wantCode(t, r.err, codes.OutOfRange)
	case <-time.After(10 * time.Second):
		t.Fatal("watch from a future revision did not end")
	}

	// Deleting ends every watch with a DELETED event, then a clean end.
	if _, err := c.DeleteSession(ctx, &sessiondv1.DeleteSessionRequest{Ref: byID("", id)}); err != nil {
		t.Fatalf("DeleteSession: %v", err)
	}
	for name, ch := range map[string]<-chan result{"live": live, "replay": replay} {
		ev := next(ch)
		if ev.GetType() != sessiondv1.EventType_EVENT_TYPE_DELETED {
			t.Errorf("%s watch: last event %v, want DELETED", name, ev)
		}
		select {
		case r := <-ch:
			if !errors.Is(r.err, io.EOF) {
				t.Errorf("%s watch after DELETED: %v, %v; want the end of the stream", name, r.ev, r.err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%s watch did not end after DELETED", name)
		}
	}

	stream, err := c.WatchSession(ctx, &sessiondv1.WatchSessionRequest{Ref: byID("", id)})
	if err == nil {
		_, err = stream.Recv()
	}
	wantCode(t, err, codes.NotFound)
}

// TestErrorCodes checks the code of every refusal the design lists that
// one daemon with default settings can produce. Resource limits, data loss
// and shutdown have tests of their own.
func TestErrorCodes(t *testing.T) {
	d := startDaemon(t, t.TempDir())
	ctx := testContext(t, 60*time.Second)
	c := d.client(t)

	cr, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{
		Alias: "taken", Messages: []*sessiondv1.Message{textMsg("m1", sessiondv1.Role_ROLE_USER, "hello")},
	})
	if err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	id := cr.GetSession().GetId()
	if _, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Alias: "second"}); err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	missing := uuid.Must(uuid.NewV7()).String()
	user := func(id, content string) []*sessiondv1.Message {
		return []*sessiondv1.Message{textMsg(id, sessiondv1.Role_ROLE_USER, content)}
	}
	mask := func(paths ...string) *fieldmaskpb.FieldMask { return &fieldmaskpb.FieldMask{Paths: paths} }
	load := func(req *sessiondv1.LoadSessionRequest) error {
		_, _, _, err := loadSession(ctx, c, req)
		return err
	}
	list := func(req *sessiondv1.ListSessionsRequest) error {
		_, err := listSessions(ctx, c, req)
		return err
	}
	search := func(req *sessiondv1.SearchSessionsRequest) error {
		_, err := searchSessions(ctx, c, req)
		return err
	}

	for _, tc := range []struct {
		name     string
		call     func() error
		code     codes.Code
		mentions []string // the message names one of these
	}{
		// INVALID_ARGUMENT names the field.
		{"alias with a space", func() error {
			_, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Alias: "bad alias"})
			return err
		}, codes.InvalidArgument, []string{"alias"}},
		{"alias shaped like a UUID", func() error {
			_, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Alias: missing})
			return err
		}, codes.InvalidArgument, []string{"alias"}},
		{"alias with a slash", func() error {
			_, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Alias: "../etc"})
			return err
		}, codes.InvalidArgument, []string{"alias"}},
		{"namespace dot-dot", func() error {
			_, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Namespace: ".."})
			return err
		}, codes.InvalidArgument, []string{"namespace"}},
		{"create id not a UUID", func() error {
			_, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Id: "not-a-uuid"})
			return err
		}, codes.InvalidArgument, []string{"id"}},
		{"ref names nothing", func() error {
			_, err := c.GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: &sessiondv1.SessionRef{}})
			return err
		}, codes.InvalidArgument, []string{"ref"}},
		{"no ref at all", func() error {
			_, err := c.GetSession(ctx, &sessiondv1.GetSessionRequest{})
			return err
		}, codes.InvalidArgument, []string{"ref"}},
		{"ref id not a UUID", func() error {
			_, err := c.GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: byID("", "12345")})
			return err
		}, codes.InvalidArgument, []string{"ref.id", "id"}},
		{"unspecified role", func() error {
			_, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byID("", id), Messages: []*sessiondv1.Message{{Id: "x", Content: "no role"}}})
			return err
		}, codes.InvalidArgument, []string{"role"}},
		{"message id with a control character", func() error {
			_, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byID("", id), Messages: user("bad\nid", "x")})
			return err
		}, codes.InvalidArgument, []string{"id"}},
		{"duplicate message ids in one batch", func() error {
			_, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byID("", id), Messages: append(user("dup", "a"), user("dup", "b")...)})
			return err
		}, codes.InvalidArgument, []string{"id"}},
		{"empty update mask", func() error {
			_, err := c.UpdateSession(ctx, &sessiondv1.UpdateSessionRequest{Ref: byID("", id), Session: &sessiondv1.Session{Title: "x"}})
			return err
		}, codes.InvalidArgument, []string{"update_mask"}},
		{"unknown update mask path", func() error {
			_, err := c.UpdateSession(ctx, &sessiondv1.UpdateSessionRequest{Ref: byID("", id), Session: &sessiondv1.Session{}, UpdateMask: mask("revision")})
			return err
		}, codes.InvalidArgument, []string{"update_mask", "revision"}},
		{"fork beyond the session", func() error {
			_, err := c.ForkSession(ctx, &sessiondv1.ForkSessionRequest{Ref: byID("", id), MessageCount: 2})
			return err
		}, codes.InvalidArgument, []string{"message_count"}},
		{"rewind beyond the session", func() error {
			_, err := c.RewindSession(ctx, &sessiondv1.RewindSessionRequest{Ref: byID("", id), MessageCount: 2})
			return err
		}, codes.InvalidArgument, []string{"message_count"}},
		{"tail with an offset", func() error {
			return load(&sessiondv1.LoadSessionRequest{Ref: byID("", id), Tail: true, Limit: 1, Offset: 1})
		}, codes.InvalidArgument, []string{"offset", "tail"}},
		{"negative limit", func() error {
			return load(&sessiondv1.LoadSessionRequest{Ref: byID("", id), Limit: -1})
		}, codes.InvalidArgument, []string{"limit"}},
		{"list bad namespace", func() error {
			return list(&sessiondv1.ListSessionsRequest{Namespace: "a/b"})
		}, codes.InvalidArgument, []string{"namespace"}},
		{"empty search query", func() error {
			return search(&sessiondv1.SearchSessionsRequest{})
		}, codes.InvalidArgument, []string{"query"}},

		// NOT_FOUND.
		{"get unknown id", func() error {
			_, err := c.GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: byID("", missing)})
			return err
		}, codes.NotFound, nil},
		{"load unknown alias", func() error {
			return load(&sessiondv1.LoadSessionRequest{Ref: byAlias("", "nobody")})
		}, codes.NotFound, nil},
		{"append to unknown", func() error {
			_, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byID("", missing), Messages: user("a", "b")})
			return err
		}, codes.NotFound, nil},
		{"id in another namespace", func() error {
			_, err := c.GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: byID("elsewhere", id)})
			return err
		}, codes.NotFound, nil},
		{"update unknown", func() error {
			_, err := c.UpdateSession(ctx, &sessiondv1.UpdateSessionRequest{Ref: byAlias("", "nobody"), Session: &sessiondv1.Session{Title: "x"}, UpdateMask: mask("title")})
			return err
		}, codes.NotFound, nil},
		{"fork unknown", func() error {
			_, err := c.ForkSession(ctx, &sessiondv1.ForkSessionRequest{Ref: byID("", missing)})
			return err
		}, codes.NotFound, nil},
		{"rewind unknown", func() error {
			_, err := c.RewindSession(ctx, &sessiondv1.RewindSessionRequest{Ref: byID("", missing)})
			return err
		}, codes.NotFound, nil},
		{"delete unknown", func() error {
			_, err := c.DeleteSession(ctx, &sessiondv1.DeleteSessionRequest{Ref: byID("", missing)})
			return err
		}, codes.NotFound, nil},

		// ALREADY_EXISTS.
		{"alias taken", func() error {
			_, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Alias: "taken"})
			return err
		}, codes.AlreadyExists, nil},
		{"session id taken", func() error {
			_, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Id: id, Title: "other"})
			return err
		}, codes.AlreadyExists, nil},
		{"session id taken in another namespace", func() error {
			_, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Namespace: "elsewhere", Id: id})
			return err
		}, codes.AlreadyExists, nil},
		{"message id with other content", func() error {
			_, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byID("", id), Messages: user("m1", "not hello")})
			return err
		}, codes.AlreadyExists, nil},
		{"new message, then a stored id with other content", func() error {
			_, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byID("", id), Messages: append(user("m-new", "new"), user("m1", "not hello")...)})
			return err
		}, codes.AlreadyExists, nil},
		{"rename onto a taken alias", func() error {
			_, err := c.UpdateSession(ctx, &sessiondv1.UpdateSessionRequest{Ref: byAlias("", "second"), Session: &sessiondv1.Session{Alias: "taken"}, UpdateMask: mask("alias")})
			return err
		}, codes.AlreadyExists, nil},

		// ABORTED: a stale expected revision (the session is at 1).
		{"append stale revision", func() error {
			_, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byID("", id), Messages: user("m2", "x"), ExpectedRevision: 5})
			return err
		}, codes.Aborted, nil},
		{"update stale revision", func() error {
			_, err := c.UpdateSession(ctx, &sessiondv1.UpdateSessionRequest{Ref: byID("", id), Session: &sessiondv1.Session{Title: "x"}, UpdateMask: mask("title"), ExpectedRevision: 5})
			return err
		}, codes.Aborted, nil},
		{"rewind stale revision", func() error {
			_, err := c.RewindSession(ctx, &sessiondv1.RewindSessionRequest{Ref: byID("", id), ExpectedRevision: 5})
			return err
		}, codes.Aborted, nil},
		{"delete stale revision", func() error {
			_, err := c.DeleteSession(ctx, &sessiondv1.DeleteSessionRequest{Ref: byID("", id), ExpectedRevision: 5})
			return err
		}, codes.Aborted, nil},
		{"save stale revision", func() error {
			_, err := saveSession(ctx, c, &sessiondv1.SaveSessionHeader{Ref: byID("", id), ExpectedRevision: 5})
			return err
		}, codes.Aborted, nil},

		// OUT_OF_RANGE: a watch from the future must reload.
		{"watch from a future revision", func() error {
			stream, err := c.WatchSession(ctx, &sessiondv1.WatchSessionRequest{Ref: byID("", id), FromRevision: 99})
			if err != nil {
				return err
			}
			_, err = stream.Recv()
			return err
		}, codes.OutOfRange, nil},

		// RESOURCE_EXHAUSTED at the default limits.
		{"title over 1 KiB", func() error {
			_, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Title: strings.Repeat("t", defaultMaxTitleBytes+1)})
			return err
		}, codes.ResourceExhausted, []string{"max_title_bytes"}},
		{"too many labels", func() error {
			labels := map[string]string{}
			for i := 0; i <= defaultMaxMapEntries; i++ {
				labels[fmt.Sprintf("k%d", i)] = "v"
			}
			_, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Labels: labels})
			return err
		}, codes.ResourceExhausted, []string{"max_map_entries"}},
		{"metadata value over 64 KiB", func() error {
			_, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Metadata: map[string]string{"k": strings.Repeat("v", defaultMaxMapValueBytes+1)}})
			return err
		}, codes.ResourceExhausted, []string{"max_map_value_bytes"}},
		{"metadata key over 256 bytes", func() error {
			_, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Metadata: map[string]string{strings.Repeat("k", defaultMaxMapKeyBytes+1): "v"}})
			return err
		}, codes.ResourceExhausted, []string{"max_map_key_bytes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantCode(t, tc.call(), tc.code, tc.mentions...)
		})
	}

	// None of the refusals changed the session.
	sess, msgs := mustLoad(t, ctx, c, &sessiondv1.LoadSessionRequest{Ref: byID("", id)})
	// (The title is the one derived from the first user message.)
	if sess.GetRevision() != 1 || sess.GetAlias() != "taken" || sess.GetTitle() != "hello" || !sess.GetTitleDerived() {
		t.Errorf("session changed by refused calls: %v", sess)
	}
	if diff := protoDiff(user("m1", "hello"), msgs); diff != "" {
		t.Errorf("messages changed by refused calls (-want +got):\n%s", diff)
	}
	if list := mustList(t, ctx, c, &sessiondv1.ListSessionsRequest{Namespace: "elsewhere"}); len(list) != 0 {
		t.Errorf("refused creates left %d sessions in namespace elsewhere", len(list))
	}
}

// TestLimits starts daemons with small limits, from a flag and from the
// environment, and checks that requests over them fail with
// RESOURCE_EXHAUSTED naming the limit while requests under them pass.
func TestLimits(t *testing.T) {
	d := startDaemon(t, t.TempDir(), "--max-message-bytes", "1024", "--max-frame-bytes", "65536")
	ctx := testContext(t, 60*time.Second)
	c := d.client(t)

	info, err := c.GetServerInfo(ctx, &sessiondv1.GetServerInfoRequest{})
	if err != nil {
		t.Fatalf("GetServerInfo: %v", err)
	}
	if info.GetLimits().GetMaxMessageBytes() != 1024 || info.GetLimits().GetMaxFrameBytes() != 65536 {
		t.Errorf("limits = %v, want max_message_bytes 1024 and max_frame_bytes 65536", info.GetLimits())
	}
	cr, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Alias: "small"})
	if err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	ref := byID("", cr.GetSession().GetId())

	if _, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: ref, Messages: []*sessiondv1.Message{textMsg("ok", sessiondv1.Role_ROLE_USER, strings.Repeat("a", 900))}}); err != nil {
		t.Fatalf("append under the limit: %v", err)
	}
	_, err = c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: ref, Messages: []*sessiondv1.Message{textMsg("big", sessiondv1.Role_ROLE_USER, strings.Repeat("a", 2000))}})
	wantCode(t, err, codes.ResourceExhausted, "max_message_bytes")
	_, err = c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Messages: []*sessiondv1.Message{textMsg("big", sessiondv1.Role_ROLE_USER, strings.Repeat("a", 2000))}})
	wantCode(t, err, codes.ResourceExhausted, "max_message_bytes")
	_, err = saveSession(ctx, c, &sessiondv1.SaveSessionHeader{Ref: ref}, []*sessiondv1.Message{textMsg("big", sessiondv1.Role_ROLE_USER, strings.Repeat("a", 2000))})
	wantCode(t, err, codes.ResourceExhausted, "max_message_bytes")

	// Many small messages in one frame over the frame limit.
	var many []*sessiondv1.Message
	for i := range 100 {
		many = append(many, textMsg(fmt.Sprintf("f%d", i), sessiondv1.Role_ROLE_USER, strings.Repeat("b", 900)))
	}
	_, err = c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: ref, Messages: many})
	// gRPC itself may refuse the frame before the daemon's own check: its
	// message then names the limit by its value.
	wantCode(t, err, codes.ResourceExhausted, "max_frame_bytes", "65536")

	_, msgs := mustLoad(t, ctx, c, &sessiondv1.LoadSessionRequest{Ref: ref})
	if len(msgs) != 1 || msgs[0].GetId() != "ok" {
		t.Errorf("after refused appends the session holds %d messages, want only %q", len(msgs), "ok")
	}

	// The same limit from the environment.
	e := startDaemonEnv(t, t.TempDir(), []string{"SESSIOND_MAX_MESSAGE_BYTES=2048"})
	info, err = e.client(t).GetServerInfo(ctx, &sessiondv1.GetServerInfoRequest{})
	if err != nil {
		t.Fatalf("GetServerInfo: %v", err)
	}
	if info.GetLimits().GetMaxMessageBytes() != 2048 {
		t.Errorf("with SESSIOND_MAX_MESSAGE_BYTES=2048: max_message_bytes = %d", info.GetLimits().GetMaxMessageBytes())
	}
}

// TestLargeSession checks that requests bigger than gRPC's 4 MiB default
// pass up to the daemon's frame limit, and that a session bigger than 4 MiB
// loads through a client with default settings, because LoadSession
// batches its frames.
func TestLargeSession(t *testing.T) {
	d := startDaemon(t, t.TempDir())
	ctx := testContext(t, 60*time.Second)
	c := d.client(t)

	var msgs []*sessiondv1.Message
	for i := range 10 {
		msgs = append(msgs, textMsg(fmt.Sprintf("big-%d", i), sessiondv1.Role_ROLE_USER, strings.Repeat(string(rune('a'+i)), 700<<10)))
	}
	cr, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Messages: msgs[:6]}) // ~4.2 MiB in one frame
	if err != nil {
		t.Fatalf("CreateSession of ~4.2 MiB: %v", err)
	}
	ref := byID("", cr.GetSession().GetId())
	if _, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: ref, Messages: msgs[6:]}); err != nil {
		t.Fatalf("AppendMessages: %v", err)
	}
	_, got, frames, err := loadSession(ctx, c, &sessiondv1.LoadSessionRequest{Ref: ref})
	if err != nil {
		t.Fatalf("LoadSession of ~7 MiB with a default client: %v", err)
	}
	if diff := protoDiff(msgs, got); diff != "" {
		t.Errorf("large session came back different (-want +got):\n%s", diff)
	}
	if frames < 5 {
		t.Errorf("7 MiB came in %d frames; want batches of about 1 MiB", frames)
	}
}
