package server

import (
	"io"
	"testing"

	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// rawCodec sends and receives bytes as they are, so that a test can send
// what no protobuf library would encode.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

// field encodes one length-delimited field of m by name.
func field(m proto.Message, name string, v []byte) []byte {
	fd := m.ProtoReflect().Descriptor().Fields().ByName(protoreflect.Name(name))
	b := protowire.AppendTag(nil, fd.Number(), protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func TestInvalidUTF8(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	bad := []byte("ok\xff\xfe")
	okMsg := func() []byte {
		b, _ := proto.Marshal(&sessiondv1.Message{Id: "a", Role: sessiondv1.Role_ROLE_USER, Content: "fine"})
		return b
	}
	badMsg := append(okMsg(), field(&sessiondv1.Message{}, "content", bad)...)
	ref := field(&sessiondv1.LoadSessionRequest{}, "ref", field(&sessiondv1.SessionRef{}, "alias", bad))
	mapEntry := append(protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte("k")),
		protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), bad)...)

	const svc = "/sessiond.v1.SessionStoreService/"
	unary := []struct {
		method, field string
		req           []byte
	}{
		{"CreateSession", "title", field(&sessiondv1.CreateSessionRequest{}, "title", bad)},
		{"CreateSession", "metadata", field(&sessiondv1.CreateSessionRequest{}, "metadata", mapEntry)},
		{"CreateSession", "messages[1].content", append(field(&sessiondv1.CreateSessionRequest{}, "messages", okMsg()),
			field(&sessiondv1.CreateSessionRequest{}, "messages", badMsg)...)},
		{"AppendMessages", "messages[0].content", field(&sessiondv1.AppendMessagesRequest{}, "messages", badMsg)},
		{"GetSession", "ref.alias", ref},
		{"SearchSessions", "query", field(&sessiondv1.SearchSessionsRequest{}, "query", bad)},
	}
	for _, tc := range unary {
		t.Run(tc.method+"/"+tc.field, func(t *testing.T) {
			var out []byte
			var err error
			if tc.method == "SearchSessions" {
				err = h.rawStream(t, svc+tc.method, false, tc.req)
			} else {
				err = h.conn.Invoke(t.Context(), svc+tc.method, &tc.req, &out, grpc.ForceCodecV2(rawCodec{}))
			}
			wantCode(t, err, codes.InvalidArgument, tc.field)
		})
	}
	t.Run("LoadSession/ref.alias", func(t *testing.T) {
		wantCode(t, h.rawStream(t, svc+"LoadSession", false, ref), codes.InvalidArgument, "ref.alias")
	})
	t.Run("SaveSession/header.title", func(t *testing.T) {
		hdr := field(&sessiondv1.SaveSessionRequest{}, "header", field(&sessiondv1.SaveSessionHeader{}, "title", bad))
		wantCode(t, h.rawStream(t, svc+"SaveSession", true, hdr), codes.InvalidArgument, "header.title")
	})
	// The refused requests changed nothing.
	st, err := h.client.ListSessions(t.Context(), &sessiondv1.ListSessionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := recvAll(st); err != nil || len(got) != 0 {
		t.Fatalf("after refused creates, ListSessions = %d sessions, %v; want none", len(got), err)
	}
	logged := h.logs.FilterMessage("request with invalid UTF-8")
	if logged.Len() == 0 {
		t.Fatal("no log of the invalid UTF-8")
	}
	for _, e := range logged.All() {
		if e.Level != zapcore.InfoLevel {
			t.Errorf("logged at %v, want info", e.Level)
		}
	}
}

// rawStream sends req on a streaming method and returns the stream's end.
func (h *harness) rawStream(t *testing.T, method string, clientStream bool, req []byte) error {
	t.Helper()
	st, err := h.conn.NewStream(t.Context(), &grpc.StreamDesc{ClientStreams: clientStream, ServerStreams: !clientStream}, method, grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		return err
	}
	if err := st.SendMsg(&req); err != nil && err != io.EOF {
		return err
	}
	if err := st.CloseSend(); err != nil {
		return err
	}
	for {
		var out []byte
		if err := st.RecvMsg(&out); err != nil {
			return err
		}
	}
}
