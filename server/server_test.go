package server

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// withUnknown returns m carrying a field (number 999) this daemon does not know.
func withUnknown(m *sessiondv1.Message, payload string) *sessiondv1.Message {
	var raw []byte
	raw = protowire.AppendTag(raw, 999, protowire.BytesType)
	raw = protowire.AppendString(raw, payload)
	m.ProtoReflect().SetUnknown(raw)
	return m
}

func TestUnaryHappyPaths(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	ctx := t.Context()
	c := h.client

	created := time.Date(2024, 5, 6, 7, 8, 9, 10, time.UTC)
	in := []*sessiondv1.Message{
		msg(sessiondv1.Role_ROLE_SYSTEM, "m1", "be brief"),
		withUnknown(user("m2", "hi"), "from the future"),
		{Id: "m3", Role: sessiondv1.Role_ROLE_ASSISTANT, ToolCalls: []*sessiondv1.ToolCall{{Id: "t1", Name: "ls", Arguments: `{"a": [1,2 ,3]`}}},
	}
	sess := h.create(t, &sessiondv1.CreateSessionRequest{
		Namespace: "team-a", Alias: "proj", Title: "T", Summary: "S",
		Metadata: map[string]string{"model": "x"}, Labels: map[string]string{"env": "dev"},
		Messages: in, CreatedAt: timestamppb.New(created),
	})
	if sess.GetRevision() != 1 || sess.GetMessageCount() != 3 || sess.GetAlias() != "proj" || sess.GetNamespace() != "team-a" ||
		!sess.GetCreatedAt().AsTime().Equal(created) || len(sess.GetMessages()) != 0 {
		t.Fatalf("CreateSession answered %v", sess)
	}
	// An import starts at the revision it names.
	if imp := h.create(t, &sessiondv1.CreateSessionRequest{Namespace: "team-a", Revision: 9}); imp.GetRevision() != 9 {
		t.Fatalf("CreateSession with revision 9 answered revision %d", imp.GetRevision())
	}
	if _, err := uuid.Parse(sess.GetId()); err != nil || sess.GetId() != strings.ToLower(sess.GetId()) {
		t.Fatalf("id %q is not a canonical UUID", sess.GetId())
	}

	// Get by alias and by upper-case id: both find it.
	for _, ref := range []*sessiondv1.SessionRef{
		{Namespace: "team-a", Key: &sessiondv1.SessionRef_Alias{Alias: "proj"}},
		{Namespace: "team-a", Key: &sessiondv1.SessionRef_Id{Id: strings.ToUpper(sess.GetId())}},
	} {
		got, err := c.GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: ref})
		if err != nil {
			t.Fatalf("GetSession(%v): %v", ref, err)
		}
		if diff := cmp.Diff(sess, got.GetSession(), protocmp.Transform()); diff != "" {
			t.Fatalf("GetSession differs from CreateSession (-create +get):\n%s", diff)
		}
	}

	ref := &sessiondv1.SessionRef{Namespace: "team-a", Key: &sessiondv1.SessionRef_Id{Id: sess.GetId()}}
	// Fidelity: the messages come back field for field, unknown fields too.
	_, got := h.load(t, &sessiondv1.LoadSessionRequest{Ref: ref})
	if diff := cmp.Diff(in, withoutCreatedAt(got), protocmp.Transform()); diff != "" {
		t.Fatalf("loaded messages differ (-sent +loaded):\n%s", diff)
	}
	if len(got[1].ProtoReflect().GetUnknown()) == 0 {
		t.Fatal("unknown field lost")
	}

	app, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: ref, Messages: []*sessiondv1.Message{withUnknown(user("m4", "more"), "x")}, ExpectedRevision: 1})
	if err != nil || app.GetRevision() != 2 || app.GetMessageCount() != 4 || app.GetAppendedCount() != 1 {
		t.Fatalf("AppendMessages = %v, %v; want revision 2, 4 messages, 1 appended", app, err)
	}
	// A retry of the same append is an idempotent no-op.
	app, err = c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: ref, Messages: []*sessiondv1.Message{withUnknown(user("m4", "more"), "x")}, ExpectedRevision: 1})
	if err != nil || app.GetRevision() != 2 || app.GetMessageCount() != 4 || app.GetAppendedCount() != 0 {
		t.Fatalf("retried AppendMessages = %v, %v; want revision 2, 4 messages, none appended", app, err)
	}

	up, err := c.UpdateSession(ctx, &sessiondv1.UpdateSessionRequest{
		Ref:        ref,
		Session:    &sessiondv1.Session{Alias: "proj2", Title: "New", Summary: "ignored: not in mask"},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"alias", "title"}},
	})
	if err != nil {
		t.Fatalf("UpdateSession: %v", err)
	}
	if s := up.GetSession(); s.GetAlias() != "proj2" || s.GetTitle() != "New" || s.GetSummary() != "S" || s.GetRevision() != 3 {
		t.Fatalf("UpdateSession answered %v", s)
	}

	fork, err := c.ForkSession(ctx, &sessiondv1.ForkSessionRequest{Ref: ref, MessageCount: 2, Alias: "proj-fork"})
	if err != nil {
		t.Fatalf("ForkSession: %v", err)
	}
	if s := fork.GetSession(); s.GetParent().GetSessionId() != sess.GetId() || s.GetParent().GetMessageCount() != 2 ||
		s.GetMessageCount() != 2 || s.GetTitle() != "New" || s.GetNamespace() != "team-a" || s.GetLabels()["env"] != "dev" {
		t.Fatalf("ForkSession answered %v", s)
	}

	rw, err := c.RewindSession(ctx, &sessiondv1.RewindSessionRequest{Ref: ref, MessageCount: 1})
	if err != nil || rw.GetSession().GetMessageCount() != 1 || rw.GetSession().GetRevision() != 4 {
		t.Fatalf("RewindSession = %v, %v", rw, err)
	}

	stream, err := c.SearchSessions(ctx, &sessiondv1.SearchSessionsRequest{Namespace: "team-a", Query: "BE BRIEF"})
	if err != nil {
		t.Fatal(err)
	}
	hits, err := recvAll(stream)
	if err != nil || len(hits) == 0 || hits[0].GetMessageIndex() != 0 {
		t.Fatalf("SearchSessions = %v, %v; want a hit in message 0", hits, err)
	}

	if _, err := c.DeleteSession(ctx, &sessiondv1.DeleteSessionRequest{Ref: ref, ExpectedRevision: 4}); err != nil {
		t.Fatalf("DeleteSession: %v", err)
	}
	_, err = c.GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: ref})
	wantCode(t, err, codes.NotFound, "")

	info, err := c.GetServerInfo(ctx, &sessiondv1.GetServerInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := &sessiondv1.GetServerInfoResponse{Version: "v-test", Backend: "file", Limits: storage.DefaultLimits().Proto()}
	if diff := cmp.Diff(want, info, protocmp.Transform()); diff != "" {
		t.Fatalf("GetServerInfo (-want +got):\n%s", diff)
	}
	if l := info.GetLimits(); l.GetMaxMessageBytes() != 16<<20 || l.GetMaxTitleBytes() != 1024 || l.GetMaxSessionBytes() != 1<<30 {
		t.Fatalf("default limits are not DESIGN's: %v", info.GetLimits())
	}
}

func TestAppendStoresOnlyNewMessages(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	ctx := t.Context()
	c := h.client
	sess := h.create(t, &sessiondv1.CreateSessionRequest{Messages: []*sessiondv1.Message{user("m1", "one"), user("m2", "two")}})
	ref := &sessiondv1.SessionRef{Key: &sessiondv1.SessionRef_Id{Id: sess.GetId()}}

	app, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: ref, ExpectedRevision: 1,
		Messages: []*sessiondv1.Message{user("m2", "two"), user("m3", "three"), user("m1", "one"), user("m4", "four")}})
	if err != nil || app.GetRevision() != 2 || app.GetMessageCount() != 4 || app.GetAppendedCount() != 2 {
		t.Fatalf("AppendMessages of stored and new = %v, %v; want revision 2, 4 messages, 2 appended", app, err)
	}
	_, got := h.load(t, &sessiondv1.LoadSessionRequest{Ref: ref})
	want := []*sessiondv1.Message{user("m1", "one"), user("m2", "two"), user("m3", "three"), user("m4", "four")}
	if d := cmp.Diff(want, withoutCreatedAt(got), protocmp.Transform()); d != "" {
		t.Fatalf("messages after the append (-want +got):\n%s", d)
	}

	// A stored id with other content refuses the batch, new messages too.
	_, err = c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: ref,
		Messages: []*sessiondv1.Message{user("m5", "five"), user("m3", "THREE")}})
	wantCode(t, err, codes.AlreadyExists, "messages[1].id")
	if s, err := c.GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: ref}); err != nil || s.GetSession().GetMessageCount() != 4 {
		t.Fatalf("after a refused append GetSession = %v, %v; want 4 messages", s, err)
	}
}

// withoutCreatedAt drops the created_at the server filled in, for comparing
// with what a client sent without one.
func withoutCreatedAt(msgs []*sessiondv1.Message) []*sessiondv1.Message {
	for _, m := range msgs {
		m.CreatedAt = nil
	}
	return msgs
}

// streamErr runs a server-streaming call and returns its final error.
func streamErr[T any](t *testing.T, open func() (interface{ Recv() (*T, error) }, error)) error {
	t.Helper()
	s, err := open()
	if err != nil {
		return err
	}
	for {
		if _, err := s.Recv(); err != nil {
			return err
		}
	}
}

func TestErrorCodes(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	c := h.client
	s := h.create(t, &sessiondv1.CreateSessionRequest{Alias: "one", Messages: []*sessiondv1.Message{user("m1", "a"), user("m2", "b")}})
	h.create(t, &sessiondv1.CreateSessionRequest{Alias: "two"})
	id := s.GetId()
	missing := uuid.NewString()
	longTS := &timestamppb.Timestamp{Seconds: 1, Nanos: 2e9}

	load := func(req *sessiondv1.LoadSessionRequest) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			return streamErr[sessiondv1.LoadSessionResponse](t, func() (interface {
				Recv() (*sessiondv1.LoadSessionResponse, error)
			}, error) {
				return c.LoadSession(ctx, req)
			})
		}
	}
	list := func(req *sessiondv1.ListSessionsRequest) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			return streamErr[sessiondv1.ListSessionsResponse](t, func() (interface {
				Recv() (*sessiondv1.ListSessionsResponse, error)
			}, error) {
				return c.ListSessions(ctx, req)
			})
		}
	}
	search := func(req *sessiondv1.SearchSessionsRequest) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			return streamErr[sessiondv1.SearchSessionsResponse](t, func() (interface {
				Recv() (*sessiondv1.SearchSessionsResponse, error)
			}, error) {
				return c.SearchSessions(ctx, req)
			})
		}
	}
	watch := func(req *sessiondv1.WatchSessionRequest) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			return streamErr[sessiondv1.WatchSessionResponse](t, func() (interface {
				Recv() (*sessiondv1.WatchSessionResponse, error)
			}, error) {
				return c.WatchSession(ctx, req)
			})
		}
	}
	save := func(frames ...*sessiondv1.SaveSessionRequest) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			st, err := c.SaveSession(ctx)
			if err != nil {
				return err
			}
			for _, f := range frames {
				if err := st.Send(f); err != nil {
					break // the server answered early; CloseAndRecv says why
				}
			}
			_, err = st.CloseAndRecv()
			return err
		}
	}
	mask := func(paths ...string) *fieldmaskpb.FieldMask { return &fieldmaskpb.FieldMask{Paths: paths} }
	unspecified := []*sessiondv1.Message{user("x1", "a"), user("x2", "b"), {Id: "x3", Content: "no role"}}

	tests := []struct {
		name   string
		call   func(ctx context.Context) error
		code   codes.Code
		msgHas string
	}{
		{"create revision over the bound", func(ctx context.Context) error {
			_, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Revision: 1<<62 + 1})
			return err
		}, codes.InvalidArgument, "revision"},
		{"create bad alias", func(ctx context.Context) error {
			_, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Alias: "has space"})
			return err
		}, codes.InvalidArgument, "alias"},
		{"create UUID-shaped alias", func(ctx context.Context) error {
			_, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Alias: missing})
			return err
		}, codes.InvalidArgument, "alias"},
		{"create bad namespace", func(ctx context.Context) error {
			_, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Namespace: "a/b"})
			return err
		}, codes.InvalidArgument, "namespace"},
		{"create bad id", func(ctx context.Context) error {
			_, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Id: "nope"})
			return err
		}, codes.InvalidArgument, "id"},
		{"create role unspecified", func(ctx context.Context) error {
			_, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Messages: unspecified})
			return err
		}, codes.InvalidArgument, "messages[2].role"},
		{"create duplicate message id", func(ctx context.Context) error {
			_, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Messages: []*sessiondv1.Message{user("d", "a"), user("d", "b")}})
			return err
		}, codes.InvalidArgument, "messages[1].id"},
		{"create bad created_at", func(ctx context.Context) error {
			_, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{CreatedAt: longTS})
			return err
		}, codes.InvalidArgument, "created_at"},
		{"create bad parent", func(ctx context.Context) error {
			_, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Parent: &sessiondv1.ForkOrigin{SessionId: "x"}})
			return err
		}, codes.InvalidArgument, "parent.session_id"},
		{"create alias taken", func(ctx context.Context) error {
			_, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Alias: "one"})
			return err
		}, codes.AlreadyExists, ""},
		{"create id taken", func(ctx context.Context) error {
			_, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Id: id, Title: "other"})
			return err
		}, codes.AlreadyExists, ""},
		{"get no ref", func(ctx context.Context) error {
			_, err := c.GetSession(ctx, &sessiondv1.GetSessionRequest{})
			return err
		}, codes.InvalidArgument, "ref"},
		{"get empty ref", func(ctx context.Context) error {
			_, err := c.GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: &sessiondv1.SessionRef{}})
			return err
		}, codes.InvalidArgument, "ref"},
		{"get bad id", func(ctx context.Context) error {
			_, err := c.GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: byID("1234")})
			return err
		}, codes.InvalidArgument, "ref.id"},
		{"get bad ref namespace", func(ctx context.Context) error {
			_, err := c.GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: &sessiondv1.SessionRef{Namespace: "..", Key: &sessiondv1.SessionRef_Id{Id: id}}})
			return err
		}, codes.InvalidArgument, "ref.namespace"},
		{"get missing", func(ctx context.Context) error {
			_, err := c.GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: byID(missing)})
			return err
		}, codes.NotFound, ""},
		{"get in another namespace", func(ctx context.Context) error {
			_, err := c.GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: &sessiondv1.SessionRef{Namespace: "other", Key: &sessiondv1.SessionRef_Id{Id: id}}})
			return err
		}, codes.NotFound, ""},
		{"load negative offset", load(&sessiondv1.LoadSessionRequest{Ref: byID(id), Offset: -1}), codes.InvalidArgument, "offset"},
		{"load negative limit", load(&sessiondv1.LoadSessionRequest{Ref: byID(id), Limit: -1}), codes.InvalidArgument, "limit"},
		{"load tail with offset", load(&sessiondv1.LoadSessionRequest{Ref: byID(id), Limit: 1, Offset: 1, Tail: true}), codes.InvalidArgument, "offset"},
		{"load missing", load(&sessiondv1.LoadSessionRequest{Ref: byAlias("nobody")}), codes.NotFound, ""},
		{"list bad page token", list(&sessiondv1.ListSessionsRequest{PageToken: "garbage!"}), codes.InvalidArgument, "page_token"},
		{"list negative limit", list(&sessiondv1.ListSessionsRequest{Limit: -2}), codes.InvalidArgument, "limit"},
		{"list bad namespace", list(&sessiondv1.ListSessionsRequest{Namespace: "x y"}), codes.InvalidArgument, "namespace"},
		{"list bad alias prefix", list(&sessiondv1.ListSessionsRequest{AliasPrefix: "a/"}), codes.InvalidArgument, "alias_prefix"},
		{"list bad time", list(&sessiondv1.ListSessionsRequest{UpdatedAfter: longTS}), codes.InvalidArgument, "updated_after"},
		{"append empty", func(ctx context.Context) error {
			_, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byID(id)})
			return err
		}, codes.InvalidArgument, "messages"},
		{"append role unspecified", func(ctx context.Context) error {
			_, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byID(id), Messages: unspecified})
			return err
		}, codes.InvalidArgument, "messages[2].role"},
		{"append unknown role", func(ctx context.Context) error {
			_, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byID(id), Messages: []*sessiondv1.Message{{Role: 42}}})
			return err
		}, codes.InvalidArgument, "messages[0].role"},
		{"append control char id", func(ctx context.Context) error {
			_, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byID(id), Messages: []*sessiondv1.Message{user("a\nb", "x")}})
			return err
		}, codes.InvalidArgument, "messages[0].id"},
		{"append empty tool call id", func(ctx context.Context) error {
			m := &sessiondv1.Message{Role: sessiondv1.Role_ROLE_ASSISTANT, ToolCalls: []*sessiondv1.ToolCall{{Name: "f"}}}
			_, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byID(id), Messages: []*sessiondv1.Message{m}})
			return err
		}, codes.InvalidArgument, "messages[0].tool_calls[0].id"},
		{"append revision conflict", func(ctx context.Context) error {
			_, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byID(id), Messages: []*sessiondv1.Message{user("new", "x")}, ExpectedRevision: 7})
			return err
		}, codes.Aborted, ""},
		{"append message conflict", func(ctx context.Context) error {
			_, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byID(id), Messages: []*sessiondv1.Message{user("m1", "other")}})
			return err
		}, codes.AlreadyExists, ""},
		{"append missing", func(ctx context.Context) error {
			_, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byID(missing), Messages: []*sessiondv1.Message{user("new", "x")}})
			return err
		}, codes.NotFound, ""},
		{"update empty mask", func(ctx context.Context) error {
			_, err := c.UpdateSession(ctx, &sessiondv1.UpdateSessionRequest{Ref: byID(id), Session: &sessiondv1.Session{Title: "x"}})
			return err
		}, codes.InvalidArgument, "update_mask"},
		{"update unknown path", func(ctx context.Context) error {
			_, err := c.UpdateSession(ctx, &sessiondv1.UpdateSessionRequest{Ref: byID(id), UpdateMask: mask("title", "revision")})
			return err
		}, codes.InvalidArgument, "update_mask.paths[1]"},
		{"update bad alias", func(ctx context.Context) error {
			_, err := c.UpdateSession(ctx, &sessiondv1.UpdateSessionRequest{Ref: byID(id), Session: &sessiondv1.Session{Alias: "a b"}, UpdateMask: mask("alias")})
			return err
		}, codes.InvalidArgument, "session.alias"},
		{"update alias taken", func(ctx context.Context) error {
			_, err := c.UpdateSession(ctx, &sessiondv1.UpdateSessionRequest{Ref: byID(id), Session: &sessiondv1.Session{Alias: "two"}, UpdateMask: mask("alias")})
			return err
		}, codes.AlreadyExists, ""},
		{"update revision conflict", func(ctx context.Context) error {
			_, err := c.UpdateSession(ctx, &sessiondv1.UpdateSessionRequest{Ref: byID(id), Session: &sessiondv1.Session{Title: "t"}, UpdateMask: mask("title"), ExpectedRevision: 9})
			return err
		}, codes.Aborted, ""},
		{"delete revision conflict", func(ctx context.Context) error {
			_, err := c.DeleteSession(ctx, &sessiondv1.DeleteSessionRequest{Ref: byID(id), ExpectedRevision: 9})
			return err
		}, codes.Aborted, ""},
		{"delete missing", func(ctx context.Context) error {
			_, err := c.DeleteSession(ctx, &sessiondv1.DeleteSessionRequest{Ref: byID(missing)})
			return err
		}, codes.NotFound, ""},
		{"fork too many", func(ctx context.Context) error {
			_, err := c.ForkSession(ctx, &sessiondv1.ForkSessionRequest{Ref: byID(id), MessageCount: 3})
			return err
		}, codes.InvalidArgument, ""},
		{"fork negative", func(ctx context.Context) error {
			_, err := c.ForkSession(ctx, &sessiondv1.ForkSessionRequest{Ref: byID(id), MessageCount: -1})
			return err
		}, codes.InvalidArgument, "message_count"},
		{"fork alias taken", func(ctx context.Context) error {
			_, err := c.ForkSession(ctx, &sessiondv1.ForkSessionRequest{Ref: byID(id), Alias: "two"})
			return err
		}, codes.AlreadyExists, ""},
		{"rewind too many", func(ctx context.Context) error {
			_, err := c.RewindSession(ctx, &sessiondv1.RewindSessionRequest{Ref: byID(id), MessageCount: 3})
			return err
		}, codes.InvalidArgument, ""},
		{"rewind negative", func(ctx context.Context) error {
			_, err := c.RewindSession(ctx, &sessiondv1.RewindSessionRequest{Ref: byID(id), MessageCount: -1})
			return err
		}, codes.InvalidArgument, "message_count"},
		{"rewind revision conflict", func(ctx context.Context) error {
			_, err := c.RewindSession(ctx, &sessiondv1.RewindSessionRequest{Ref: byID(id), MessageCount: 1, ExpectedRevision: 9})
			return err
		}, codes.Aborted, ""},
		{"search empty query", search(&sessiondv1.SearchSessionsRequest{}), codes.InvalidArgument, "query"},
		{"search negative limit", search(&sessiondv1.SearchSessionsRequest{Query: "a", Limit: -1}), codes.InvalidArgument, "limit"},
		{"watch missing", watch(&sessiondv1.WatchSessionRequest{Ref: byID(missing)}), codes.NotFound, ""},
		{"watch future revision", watch(&sessiondv1.WatchSessionRequest{Ref: byID(id), FromRevision: 50}), codes.OutOfRange, ""},
		{"watch bad ref", watch(&sessiondv1.WatchSessionRequest{Ref: byAlias("..")}), codes.InvalidArgument, "ref.alias"},
		{"save no header", save(&sessiondv1.SaveSessionRequest{Messages: []*sessiondv1.Message{user("a", "b")}}), codes.InvalidArgument, "header"},
		{"save empty stream", save(), codes.InvalidArgument, "header"},
		{"save second header", save(
			&sessiondv1.SaveSessionRequest{Header: &sessiondv1.SaveSessionHeader{Ref: byID(id)}},
			&sessiondv1.SaveSessionRequest{Header: &sessiondv1.SaveSessionHeader{Ref: byID(id)}},
		), codes.InvalidArgument, "header"},
		{"save bad ref", save(&sessiondv1.SaveSessionRequest{Header: &sessiondv1.SaveSessionHeader{Ref: byID("x")}}), codes.InvalidArgument, "header.ref"},
		{"save role unspecified in a later frame", save(
			&sessiondv1.SaveSessionRequest{Header: &sessiondv1.SaveSessionHeader{Ref: byID(id)}, Messages: []*sessiondv1.Message{user("a", "b")}},
			&sessiondv1.SaveSessionRequest{Messages: []*sessiondv1.Message{{Id: "c"}}},
		), codes.InvalidArgument, "messages[1].role"},
		{"save duplicate ids across frames", save(
			&sessiondv1.SaveSessionRequest{Header: &sessiondv1.SaveSessionHeader{Ref: byID(id)}, Messages: []*sessiondv1.Message{user("a", "b")}},
			&sessiondv1.SaveSessionRequest{Messages: []*sessiondv1.Message{user("a", "c")}},
		), codes.InvalidArgument, "messages[1].id"},
		{"save missing", save(&sessiondv1.SaveSessionRequest{Header: &sessiondv1.SaveSessionHeader{Ref: byID(missing)}}), codes.NotFound, ""},
		{"save revision conflict", save(&sessiondv1.SaveSessionRequest{Header: &sessiondv1.SaveSessionHeader{Ref: byID(id), ExpectedRevision: 9}}), codes.Aborted, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantCode(t, tt.call(t.Context()), tt.code, tt.msgHas)
		})
	}

	// None of the refused writes changed the session.
	got, err := c.GetSession(t.Context(), &sessiondv1.GetSessionRequest{Ref: byID(id)})
	if err != nil || got.GetSession().GetRevision() != 1 || got.GetSession().GetMessageCount() != 2 {
		t.Fatalf("after refused writes: %v, %v; want revision 1 and 2 messages", got, err)
	}
}

func TestLimits(t *testing.T) {
	lim := storage.Limits{
		MaxMessageBytes: 200, MaxFrameBytes: 4096, MaxTitleBytes: 8, MaxSummaryBytes: 16,
		MaxMapEntries: 2, MaxMapKeyBytes: 4, MaxMapValueBytes: 8, MaxSessionBytes: 1000, MaxQueryBytes: 12,
	}
	h := newHarness(t, harnessConfig{limits: lim})
	c := h.client
	s := h.create(t, &sessiondv1.CreateSessionRequest{Title: "12345678"})
	id := s.GetId()
	big := strings.Repeat("x", 300)
	mask := func(paths ...string) *fieldmaskpb.FieldMask { return &fieldmaskpb.FieldMask{Paths: paths} }
	many := make([]*sessiondv1.Message, 30)
	for i := range many {
		many[i] = user("", strings.Repeat("y", 150))
	}

	tests := []struct {
		name   string
		call   func(ctx context.Context) error
		msgHas string
	}{
		{"title", func(ctx context.Context) error {
			_, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Title: "123456789"})
			return err
		}, "max_title_bytes"},
		{"summary", func(ctx context.Context) error {
			_, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Summary: strings.Repeat("s", 17)})
			return err
		}, "max_summary_bytes"},
		{"metadata entries", func(ctx context.Context) error {
			_, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Metadata: map[string]string{"a": "", "b": "", "c": ""}})
			return err
		}, "max_map_entries"},
		{"label key", func(ctx context.Context) error {
			_, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Labels: map[string]string{"abcde": "v"}})
			return err
		}, "max_map_key_bytes"},
		{"metadata value", func(ctx context.Context) error {
			_, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Metadata: map[string]string{"k": "123456789"}})
			return err
		}, "max_map_value_bytes"},
		{"message", func(ctx context.Context) error {
			_, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byID(id), Messages: []*sessiondv1.Message{user("a", "b"), user("m", big)}})
			return err
		}, "messages[1]"},
		{"frame", func(ctx context.Context) error {
			_, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byID(id), Messages: many})
			return err
		}, ""}, // refused by grpc-go's receive limit, before any handler
		{"masked title", func(ctx context.Context) error {
			_, err := c.UpdateSession(ctx, &sessiondv1.UpdateSessionRequest{Ref: byID(id), Session: &sessiondv1.Session{Title: "123456789"}, UpdateMask: mask("title")})
			return err
		}, "session.title"},
		{"masked labels", func(ctx context.Context) error {
			_, err := c.UpdateSession(ctx, &sessiondv1.UpdateSessionRequest{Ref: byID(id), Session: &sessiondv1.Session{Labels: map[string]string{"a": "", "b": "", "c": ""}}, UpdateMask: mask("labels")})
			return err
		}, "max_map_entries"},
		{"fork title", func(ctx context.Context) error {
			_, err := c.ForkSession(ctx, &sessiondv1.ForkSessionRequest{Ref: byID(id), Title: "123456789"})
			return err
		}, "max_title_bytes"},
		{"save header summary", func(ctx context.Context) error {
			st, err := c.SaveSession(ctx)
			if err != nil {
				return err
			}
			_ = st.Send(&sessiondv1.SaveSessionRequest{Header: &sessiondv1.SaveSessionHeader{Ref: byID(id), Summary: strings.Repeat("s", 17)}})
			_, err = st.CloseAndRecv()
			return err
		}, "max_summary_bytes"},
		{"save session bytes", func(ctx context.Context) error {
			st, err := c.SaveSession(ctx)
			if err != nil {
				return err
			}
			_ = st.Send(&sessiondv1.SaveSessionRequest{Header: &sessiondv1.SaveSessionHeader{Ref: byID(id)}})
			for i := 0; i < 10; i++ {
				if err := st.Send(&sessiondv1.SaveSessionRequest{Messages: many[:1]}); err != nil {
					break
				}
			}
			_, err = st.CloseAndRecv()
			return err
		}, "max_session_bytes"},
		{"save frame", func(ctx context.Context) error {
			st, err := c.SaveSession(ctx)
			if err != nil {
				return err
			}
			_ = st.Send(&sessiondv1.SaveSessionRequest{Header: &sessiondv1.SaveSessionHeader{Ref: byID(id)}, Messages: many})
			_, err = st.CloseAndRecv()
			return err
		}, ""}, // grpc-go's receive limit again: it answers the client itself
		{"search query", func(ctx context.Context) error {
			st, err := c.SearchSessions(ctx, &sessiondv1.SearchSessionsRequest{Query: "1234567890123"})
			if err != nil {
				return err
			}
			_, err = st.Recv()
			return err
		}, "query is 13 bytes, over the max_query_bytes limit of 12"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantCode(t, tt.call(t.Context()), codes.ResourceExhausted, tt.msgHas)
		})
	}

	// Limits apply to masked fields only: a long title beside a labels
	// update is not looked at.
	_, err := c.UpdateSession(t.Context(), &sessiondv1.UpdateSessionRequest{Ref: byID(id), Session: &sessiondv1.Session{Title: big, Summary: "ok"}, UpdateMask: mask("summary")})
	if err != nil {
		t.Fatalf("update of an unlimited field: %v", err)
	}
	// A query is bounded by its own limit, not by the shorter title's.
	search, err := c.SearchSessions(t.Context(), &sessiondv1.SearchSessionsRequest{Query: "123456789012"})
	if err != nil {
		t.Fatalf("search: %v", err)
	}
	for {
		if _, err := search.Recv(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("search with a 12-byte query: %v", err)
		}
	}
	info, err := c.GetServerInfo(t.Context(), &sessiondv1.GetServerInfoRequest{})
	if err != nil || info.GetLimits().GetMaxTitleBytes() != 8 || info.GetLimits().GetMaxFrameBytes() != 4096 || info.GetLimits().GetMaxQueryBytes() != 12 {
		t.Fatalf("GetServerInfo limits = %v, %v", info.GetLimits(), err)
	}
}
