package server

import (
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// rawBytes is a client codec that sends the bytes it is given as they are.
type rawBytes struct{}

func (rawBytes) Marshal(v any) ([]byte, error)      { return v.([]byte), nil }
func (rawBytes) Unmarshal(data []byte, v any) error { return nil }
func (rawBytes) Name() string                       { return "proto" }

// TestMalformedRequestLogged: a unary request whose bytes do not decode
// (a string field holding invalid UTF-8) is answered INTERNAL by grpc-go
// before any interceptor runs; the daemon logs it, naming the message type.
func TestMalformedRequestLogged(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	// GetSessionRequest field 1 (ref), holding SessionRef field 1 (id) = "\xff".
	body := []byte{0x0a, 0x03, 0x0a, 0x01, 0xff}
	var out []byte
	err := h.conn.Invoke(t.Context(), "/sessiond.v1.SessionStoreService/GetSession", body, &out, grpc.ForceCodec(rawBytes{}))
	if status.Code(err) != codes.Internal {
		t.Fatalf("malformed request: %v, want INTERNAL", err)
	}
	lines := h.logs.FilterMessage("malformed protobuf bytes in a request; answered INTERNAL").All()
	if len(lines) != 1 || lines[0].ContextMap()["message_type"] != "sessiond.v1.GetSessionRequest" {
		t.Fatalf("log lines about the malformed request: %+v, want one naming sessiond.v1.GetSessionRequest", lines)
	}
}
