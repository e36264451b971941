package server

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

func TestSessionToProto(t *testing.T) {
	created := time.Date(2024, 1, 2, 3, 4, 5, 6, time.UTC)
	updated := created.Add(time.Hour)
	in := &storage.Session{
		ID: "0190a6b2-3c4d-7e5f-8a9b-0c1d2e3f4a5b", Namespace: "ns", Alias: "a", Title: "t", Summary: "s",
		CreatedAt: created, UpdatedAt: updated, Revision: 7, MessageCount: 3,
		Metadata: map[string]string{"k": "v"}, Labels: map[string]string{"l": "w"},
		Parent: &storage.ForkOrigin{SessionID: "0190a6b2-3c4d-7e5f-8a9b-0c1d2e3f4a5c", MessageCount: 2},
		Tally: storage.Tally{OpenToolCallIDs: []string{"c2", "c1"}, Usage: storage.Usage{InputTokens: 10, OutputTokens: 5, CachedInputTokens: 4, ReasoningTokens: 1},
			Models: []string{"m-new", "m-old"}},
		ExpireAfter: 90 * time.Minute,
		Compaction:  &storage.Compaction{ThroughCount: 2, ThroughID: "m2", Revision: 6, CreatedAt: updated, SummaryID: "sum"},
	}
	want := &sessiondv1.Session{
		Id: in.ID, Namespace: "ns", Alias: "a", Title: "t", Summary: "s",
		CreatedAt: timestamppb.New(created), UpdatedAt: timestamppb.New(updated), Revision: 7, MessageCount: 3,
		Metadata: map[string]string{"k": "v"}, Labels: map[string]string{"l": "w"},
		Parent:          &sessiondv1.ForkOrigin{SessionId: in.Parent.SessionID, MessageCount: 2},
		OpenToolCallIds: []string{"c2", "c1"},
		Usage:           &sessiondv1.Usage{InputTokens: 10, OutputTokens: 5, CachedInputTokens: 4, ReasoningTokens: 1},
		Models:          []string{"m-new", "m-old"},
		ExpireAfter:     durationpb.New(90 * time.Minute),
		// The summary and the message after the compacted range.
		ContextMessageCount: 2,
		Compaction: &sessiondv1.Compaction{ThroughMessageCount: 2, ThroughMessageId: "m2", Revision: 6,
			CreatedAt: timestamppb.New(updated), SummaryMessageId: "sum"},
	}
	if diff := cmp.Diff(want, sessionToProto(in), protocmp.Transform()); diff != "" {
		t.Fatalf("sessionToProto (-want +got):\n%s", diff)
	}
	// Zero times and no parent stay unset rather than becoming 1970.
	got := sessionToProto(&storage.Session{ID: in.ID})
	if got.CreatedAt != nil || got.UpdatedAt != nil || got.Parent != nil || got.ExpireAfter != nil {
		t.Fatalf("zero values became %v", got)
	}
	// Zero usage is left out, like every proto3 zero value; so is an
	// unknown tally's.
	if got.Usage != nil {
		t.Fatalf("a zero usage total was sent: %v", got.Usage)
	}
	if got := sessionToProto(&storage.Session{ID: in.ID, Tally: storage.Tally{Unknown: true, Usage: storage.Usage{InputTokens: 1}}}); got.Usage != nil {
		t.Fatalf("an unknown tally sent usage %v", got.Usage)
	}
	if sessionToProto(nil) != nil {
		t.Fatal("nil session became non-nil")
	}
}

func TestCreateFromProtoRoundTrip(t *testing.T) {
	created := time.Date(2024, 1, 2, 3, 4, 5, 6, time.UTC)
	m := withUnknown(user("m1", "hi"), "future")
	req := &sessiondv1.CreateSessionRequest{
		Namespace: "ns", Id: "0190a6b2-3c4d-7e5f-8a9b-0c1d2e3f4a5b", Alias: "a", Title: "t", Summary: "s",
		Metadata: map[string]string{"k": "v"}, Labels: map[string]string{"l": "w"},
		Messages: []*sessiondv1.Message{m}, CreatedAt: timestamppb.New(created),
		Parent:      &sessiondv1.ForkOrigin{SessionId: "0190a6b2-3c4d-7e5f-8a9b-0c1d2e3f4a5c", MessageCount: 4},
		ExpireAfter: durationpb.New(72 * time.Hour),
	}
	r := createFromProto(req)
	// Back through the session converter: the same fields come out.
	back := sessionToProto(&storage.Session{
		ID: r.ID, Namespace: r.Namespace, Alias: r.Alias, Title: r.Title, Summary: r.Summary,
		CreatedAt: r.CreatedAt, Metadata: r.Metadata, Labels: r.Labels, Parent: r.Parent, ExpireAfter: r.ExpireAfter,
	})
	want := &sessiondv1.Session{
		Id: req.Id, Namespace: "ns", Alias: "a", Title: "t", Summary: "s", CreatedAt: req.CreatedAt,
		Metadata: req.Metadata, Labels: req.Labels, Parent: req.Parent, ExpireAfter: req.ExpireAfter,
	}
	if diff := cmp.Diff(want, back, protocmp.Transform()); diff != "" {
		t.Fatalf("round trip (-want +got):\n%s", diff)
	}
	if len(r.Messages) != 1 || r.Messages[0] != m {
		t.Fatal("messages must cross unchanged, as the same values")
	}
	if !createFromProto(&sessiondv1.CreateSessionRequest{}).CreatedAt.IsZero() {
		t.Fatal("unset created_at must stay zero, for storage to default it")
	}
}

func TestEventToProto(t *testing.T) {
	for st, pt := range map[storage.EventType]sessiondv1.EventType{
		storage.EventAppended: sessiondv1.EventType_EVENT_TYPE_APPENDED,
		storage.EventReplaced: sessiondv1.EventType_EVENT_TYPE_REPLACED,
		storage.EventUpdated:  sessiondv1.EventType_EVENT_TYPE_UPDATED,
		storage.EventDeleted:  sessiondv1.EventType_EVENT_TYPE_DELETED,
	} {
		m := user("x", "y")
		got := eventToProto(storage.Event{Type: st, Revision: 9, Session: &storage.Session{ID: "s", Revision: 9}, Messages: []*sessiondv1.Message{m}})
		if got.GetType() != pt || got.GetRevision() != 9 || got.GetSession().GetId() != "s" || got.GetMessages()[0] != m {
			t.Fatalf("eventToProto(%v) = %v", st, got)
		}
	}
}

func TestMaskFields(t *testing.T) {
	got, err := maskFields([]string{"alias", "title", "summary", "metadata", "labels", "title"})
	want := storage.UpdateAlias | storage.UpdateTitle | storage.UpdateSummary | storage.UpdateMetadata | storage.UpdateLabels
	if err != nil || got != want {
		t.Fatalf("maskFields = %v, %v; want %v", got, err, want)
	}
	for _, bad := range [][]string{nil, {}, {"id"}, {"session.title"}, {"title", ""}} {
		if _, err := maskFields(bad); err == nil {
			t.Fatalf("maskFields(%q) accepted", bad)
		}
	}
}
