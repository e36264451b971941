package storetest

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// unknownFields returns raw protobuf fields that no version of the schema
// defines: field 999 as a varint and field 1000 as bytes.
func unknownFields() []byte {
	var b []byte
	b = protowire.AppendTag(b, 999, protowire.VarintType)
	b = protowire.AppendVarint(b, 42)
	b = protowire.AppendTag(b, 1000, protowire.BytesType)
	b = protowire.AppendBytes(b, []byte("from a newer client\x00\xff"))
	return b
}

// oddMessages returns messages that exercise every field and every kind of
// awkward content.
func oddMessages() []*sessiondv1.Message {
	allBytes := make([]byte, 256)
	for i := range allBytes {
		allBytes[i] = byte(i)
	}
	big := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
	withUnknown := &sessiondv1.Message{
		Id: "unknown-fields", Role: sessiondv1.Role_ROLE_USER, Content: "carries fields from the future",
		ToolCalls: []*sessiondv1.ToolCall{{Id: "tc", Name: "f", Arguments: "{}"}},
	}
	withUnknown.ProtoReflect().SetUnknown(unknownFields())
	withUnknown.ToolCalls[0].ProtoReflect().SetUnknown(unknownFields())
	return []*sessiondv1.Message{
		{Id: "unicode-ünïcødé-🎉", Role: sessiondv1.Role_ROLE_USER, Content: "héllo 世界 🎉 \u200b\u202e RTL \U0010FFFF", Name: "名前"},
		{Id: "nul", Role: sessiondv1.Role_ROLE_USER, Content: "before\x00after\x00", Metadata: map[string]string{"nul\x00key": "nul\x00value"}},
		{Id: "big", Role: sessiondv1.Role_ROLE_ASSISTANT, Content: big},
		{
			Id: "tools", Role: sessiondv1.Role_ROLE_ASSISTANT, Content: "",
			ToolCalls: []*sessiondv1.ToolCall{
				{Id: "call-1", Name: "broken", Arguments: `{"a": [1, 2,, "unterminated`},
				{Id: "call-2", Name: "odd", Arguments: "{ \"n\" : 1.0e2 ,\n\t\"s\":\"\\u00e9\", \"n\": 2 }"},
				{Id: "call-3", Name: "empty", Arguments: ""},
			},
		},
		{Id: "tool-result", Role: sessiondv1.Role_ROLE_TOOL, ToolCallId: "call-1", Name: "broken", Content: "error: bad JSON"},
		{
			Id: "parts", Role: sessiondv1.Role_ROLE_USER,
			Parts: []*sessiondv1.ContentPart{
				{Kind: &sessiondv1.ContentPart_Text{Text: "look at this"}},
				{Kind: &sessiondv1.ContentPart_Blob{Blob: &sessiondv1.Blob{MimeType: "application/octet-stream", Data: allBytes}}},
				{Kind: &sessiondv1.ContentPart_Json{Json: `{"x":1,"x":2}`}},
				{Kind: &sessiondv1.ContentPart_Text{Text: ""}},
				{Kind: &sessiondv1.ContentPart_Blob{Blob: &sessiondv1.Blob{}}},
			},
		},
		{
			Id: "reasoning", Role: sessiondv1.Role_ROLE_ASSISTANT, Content: "answer",
			Reasoning: &sessiondv1.Reasoning{Text: "thinking…\n", Signature: "c2lnbmF0dXJl"},
			Metadata:  map[string]string{"model": "x-1", "tokens": "42", "": "empty key", "empty": ""},
			CreatedAt: &timestamppb.Timestamp{Seconds: 1700000000, Nanos: 123456789},
		},
		{Id: "system", Role: sessiondv1.Role_ROLE_SYSTEM, Content: "be brief", CreatedAt: &timestamppb.Timestamp{}},
		{Id: "   spaces and \"quotes\" / slashes \\ ", Role: sessiondv1.Role_ROLE_USER, Content: "free-form ids"},
		withUnknown,
	}
}

// checkExact checks that got is sent byte for byte (deterministic encoding)
// and field for field, after filling in a created_at the sender left out.
func checkExact(t *testing.T, what string, got, sent []*sessiondv1.Message) {
	t.Helper()
	checkMessages(t, what, got, sent)
	if len(got) != len(sent) {
		return
	}
	opts := proto.MarshalOptions{Deterministic: true}
	for i := range got {
		want := proto.Clone(sent[i]).(*sessiondv1.Message)
		if want.CreatedAt == nil {
			want.CreatedAt = got[i].GetCreatedAt()
		}
		if !proto.Equal(want, got[i]) {
			t.Errorf("%s: message %d (%.40q) is not proto.Equal to what was sent", what, i, sent[i].GetId())
		}
		wb, err1 := opts.Marshal(want)
		gb, err2 := opts.Marshal(got[i])
		if err := errors.Join(err1, err2); err != nil {
			t.Errorf("%s: marshal message %d: %v", what, i, err)
			continue
		}
		if !bytes.Equal(wb, gb) {
			t.Errorf("%s: message %d (%.40q) encodes to %d bytes, want the %d bytes sent", what, i, sent[i].GetId(), len(gb), len(wb))
		}
		if !bytes.Equal(got[i].ProtoReflect().GetUnknown(), want.ProtoReflect().GetUnknown()) {
			t.Errorf("%s: message %d (%.40q): unknown fields %x, want %x", what, i, sent[i].GetId(), got[i].ProtoReflect().GetUnknown(), want.ProtoReflect().GetUnknown())
		}
	}
}

func testFidelity(t *testing.T, h *harness) {
	s := h.open(t)
	sent := oddMessages()
	meta := map[string]string{"ünï": "çødé 🎉", "nul": "a\x00b", "big": strings.Repeat("v", 60000)}
	labels := map[string]string{"team": "ñ", "empty": ""}
	title := "Tïtle with \x00 and 🎉"

	// Through Create.
	se, ref := createRef(t, s, storage.CreateRequest{Namespace: nsA, Title: title, Summary: "sümmary\n", Metadata: meta, Labels: labels, Messages: sent})
	got, ms := loadAll(t, s, ref)
	checkExact(t, "Create", ms, sent)
	if got.Title != title || got.Summary != "sümmary\n" {
		t.Errorf("title %q, summary %q came back as %q, %q", title, "sümmary\n", got.Title, got.Summary)
	}
	want := &storage.Session{ID: se.ID, Namespace: nsA, Title: title, Summary: "sümmary\n", CreatedAt: got.CreatedAt, UpdatedAt: got.UpdatedAt, Revision: 1, MessageCount: int64(len(sent)), Metadata: meta, Labels: labels,
		Tally: storage.Tally{OpenToolCallIDs: []string{"call-2", "call-3"}}} // call-1 is answered; withUnknown is a user message
	if d := diffSession(want, got); d != "" {
		t.Errorf("session metadata (-want +got):\n%s", d)
	}
	if listed := listAll(t, s, storage.ListOptions{Namespace: nsA}); len(listed) != 1 || diffSession(want, listed[0]) != "" {
		t.Errorf("listed session differs from what was stored: %v", diffSession(want, listed[0]))
	}
	stored := ms

	// Through Append, one by one, and watched.
	_, appRef := createRef(t, s, storage.CreateRequest{Namespace: nsA})
	sub := watch(t, s, appRef, 0)
	for _, m := range sent {
		appendMsgs(t, s, appRef, m)
		ev := nextEvent(t, sub)
		checkExact(t, "appended event", ev.Messages, []*sessiondv1.Message{m})
	}
	_, ms = loadAll(t, s, appRef)
	checkExact(t, "Append", ms, sent)
	// A retry of the whole lot (with the stored created_at) is still a no-op:
	// "the same" holds for every awkward field.
	res, err := s.Append(t.Context(), storage.AppendRequest{Ref: appRef, Messages: ms})
	if err != nil || res.Revision != uint64(len(sent)+1) {
		t.Errorf("retry of the stored messages: %+v, %v; want a no-op at revision %d", res, err, len(sent)+1)
	}
	res, err = s.Append(t.Context(), storage.AppendRequest{Ref: appRef, Messages: sent})
	if err != nil || res.Revision != uint64(len(sent)+1) {
		t.Errorf("retry of the sent messages: %+v, %v; want a no-op at revision %d", res, err, len(sent)+1)
	}
	// One unknown field less is another message.
	plain := proto.Clone(sent[len(sent)-1]).(*sessiondv1.Message)
	plain.ProtoReflect().SetUnknown(nil)
	_, err = s.Append(t.Context(), storage.AppendRequest{Ref: appRef, Messages: []*sessiondv1.Message{plain}})
	wantErr(t, "Append of a stored id without its unknown fields", err, storage.ErrMessageConflict)

	// Through Save, Fork and windows of Load.
	_, savedRef := createRef(t, s, storage.CreateRequest{Namespace: nsA})
	_, err = s.Save(t.Context(), storage.SaveRequest{Ref: savedRef, Title: title, Metadata: meta, Messages: sent})
	must(t, "Save", err)
	_, ms = loadAll(t, s, savedRef)
	checkExact(t, "Save", ms, sent)
	f, err := s.Fork(t.Context(), storage.ForkRequest{Ref: ref})
	must(t, "Fork", err)
	_, ms = loadAll(t, s, storage.Ref{Namespace: nsA, ID: f.ID})
	checkExact(t, "Fork", ms, stored)
	_, ms, err = s.Load(t.Context(), ref, storage.LoadOptions{Tail: true, Limit: 2})
	must(t, "Load tail", err)
	checkExact(t, "Load tail", ms, stored[len(stored)-2:])

	// Client timestamps keep their nanoseconds.
	ts := time.Date(2001, 2, 3, 4, 5, 6, 7, time.UTC)
	m := msg("ns", "x")
	m.CreatedAt = timestamppb.New(ts)
	appendMsgs(t, s, appRef, m)
	_, ms, err = s.Load(t.Context(), appRef, storage.LoadOptions{Tail: true, Limit: 1})
	must(t, "Load", err)
	if len(ms) != 1 || !ms[0].GetCreatedAt().AsTime().Equal(ts) {
		t.Errorf("created_at %v did not come back exactly: %v", ts, ms)
	}
}

// testAliasing checks that the store shares no memory with its callers:
// changing what was passed in or handed out changes nothing stored. List is
// the exception: what it yields is read-only.
func testAliasing(t *testing.T, h *harness) {
	s := h.open(t)
	meta := map[string]string{"k": "v"}
	labels := map[string]string{"l": "v"}
	sent := msgs("m", 2)
	se, ref := createRef(t, s, storage.CreateRequest{Metadata: meta, Labels: labels, Messages: sent})
	before := takeSnapshot(t, s, ref)

	meta["k"], labels["l"], sent[0].Content = "changed", "changed", "changed"
	se.Metadata["k"], se.Labels["new"] = "changed", "x"
	checkUnchanged(t, "changing Create's arguments and answer", s, ref, before)

	got, ms := loadAll(t, s, ref)
	got.Metadata["k"], got.Labels["l"] = "changed", "changed"
	ms[0].Content, ms[1].Id = "changed", "changed"
	ms[0].CreatedAt.Seconds = 1
	checkUnchanged(t, "changing Load's answer", s, ref, before)

	m := msg("later", "x")
	appendMsgs(t, s, ref, m)
	m.Content = "changed"
	_, ms = loadAll(t, s, ref)
	if ms[2].GetContent() != "x" {
		t.Errorf("changing an appended message after Append changed the stored one to %q", ms[2].GetContent())
	}
	// List's sessions are read-only (the file store yields its index's
	// own), so they are left out here.
}

// testClosed checks that every method answers ErrClosed after Close.
func testClosed(t *testing.T, h *harness) {
	s := h.openUnchecked(t)
	_, ref := createRef(t, s, storage.CreateRequest{Alias: "x", Messages: msgs("m", 1)})
	must(t, "Close", s.Close())
	ctx := t.Context()
	nop := func(*storage.Session) error { return nil }
	for name, call := range map[string]func() error{
		"Create": func() error { _, err := s.Create(ctx, storage.CreateRequest{}); return err },
		"Get":    func() error { _, err := s.Get(ctx, ref); return err },
		"Load":   func() error { _, _, err := s.Load(ctx, ref, storage.LoadOptions{}); return err },
		"List":   func() error { return s.List(ctx, storage.ListOptions{}, nop) },
		"Save":   func() error { _, err := s.Save(ctx, storage.SaveRequest{Ref: ref}); return err },
		"Append": func() error { return errOf(s.Append(ctx, storage.AppendRequest{Ref: ref, Messages: msgs("n", 1)})) },
		"Update": func() error {
			return errOf(s.Update(ctx, storage.UpdateRequest{Ref: ref, Fields: storage.UpdateTitle, Title: "x"}))
		},
		"Delete": func() error { return s.Delete(ctx, ref, 0) },
		"Fork":   func() error { _, err := s.Fork(ctx, storage.ForkRequest{Ref: ref}); return err },
		"Rewind": func() error { _, err := s.Rewind(ctx, storage.RewindRequest{Ref: ref}); return err },
		"Search": func() error {
			return s.Search(ctx, storage.SearchOptions{Query: "x"}, func(storage.SearchHit) error { return nil })
		},
		"Watch": func() error { _, err := s.Watch(ctx, ref, 0); return err },
	} {
		wantErr(t, name+" after Close", call(), storage.ErrClosed)
	}
}
