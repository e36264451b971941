package server

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// TestErrorDetails checks the exact google.rpc details a Go client reads
// from a few answers: the field path in the request's own terms, the
// stable reason, and for a limit its name, size and maximum. (wantCode
// checks the shape of the details of every INVALID_ARGUMENT and
// RESOURCE_EXHAUSTED the other tests provoke.)
func TestErrorDetails(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	ctx := t.Context()
	s := h.create(t, &sessiondv1.CreateSessionRequest{Alias: "d"})
	tests := []struct {
		name   string
		call   func() error
		code   codes.Code
		field  string
		reason string
		meta   map[string]string
	}{
		{"bad alias", func() error {
			_, err := h.client.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Alias: "no/slash"})
			return err
		}, codes.InvalidArgument, "alias", ReasonInvalidField, map[string]string{"field": "alias"}},
		{"unspecified role", func() error {
			_, err := h.client.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byID(s.GetId()), Messages: []*sessiondv1.Message{user("a", "b"), {Id: "c"}}})
			return err
		}, codes.InvalidArgument, "messages[1].role", ReasonInvalidField, map[string]string{"field": "messages[1].role"}},
		{"title over its limit in an update", func() error {
			_, err := h.client.UpdateSession(ctx, &sessiondv1.UpdateSessionRequest{
				Ref: byID(s.GetId()), Session: &sessiondv1.Session{Title: strings.Repeat("t", 2000)},
				UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"title"}},
			})
			return err
		}, codes.ResourceExhausted, "session.title", ReasonOverLimit, map[string]string{
			"field": "session.title", "limit": "max_title_bytes", "size": "2000", "max": "1024",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			wantCode(t, err, tt.code, tt.field)
			var gotField string
			var gotInfo *errdetails.ErrorInfo
			for _, d := range status.Convert(err).Details() {
				switch d := d.(type) {
				case *errdetails.BadRequest:
					gotField = d.GetFieldViolations()[0].GetField()
				case *errdetails.ErrorInfo:
					gotInfo = d
				}
			}
			if gotField != tt.field {
				t.Errorf("BadRequest field %q, want %q", gotField, tt.field)
			}
			want := &errdetails.ErrorInfo{Reason: tt.reason, Domain: ErrorDomain, Metadata: tt.meta}
			if diff := cmp.Diff(want, gotInfo, protocmp.Transform()); diff != "" {
				t.Errorf("ErrorInfo (-want +got):\n%s", diff)
			}
		})
	}
}
