package client_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/sessiond/sessiond/client"
	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// AppendStreamError makes of a raw AppendStream's answer nil for a result,
// and for a refusal the error AppendMessages gives for the same request,
// details included.
func TestAppendStreamError(t *testing.T) {
	c, ctx := dialSessiond(t)
	sess, err := c.Create(ctx, client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ref := &sessiondv1.SessionRef{Key: &sessiondv1.SessionRef_Id{Id: sess.ID}}
	stream, err := c.RPC().AppendStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.CloseSend()
	answer := func(req *sessiondv1.AppendMessagesRequest) *sessiondv1.AppendStreamResponse {
		t.Helper()
		if err := stream.Send(&sessiondv1.AppendStreamRequest{Append: req}); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}

	ok := answer(&sessiondv1.AppendMessagesRequest{Ref: ref, Messages: []*sessiondv1.Message{client.UserText("hi")}})
	if err := client.AppendStreamError(ok); err != nil || ok.GetResult().GetMessageCount() != 1 {
		t.Fatalf("AppendStreamError of %v = %v, want nil", ok, err)
	}

	noRole := &sessiondv1.AppendMessagesRequest{Ref: ref, Messages: []*sessiondv1.Message{{Content: "no role"}}}
	streamErr := client.AppendStreamError(answer(noRole))
	_, unaryErr := c.RPC().AppendMessages(ctx, noRole)
	got := status.Convert(streamErr)
	if got.Code() != codes.InvalidArgument || len(got.Details()) == 0 {
		t.Errorf("AppendStreamError of a message without a role = %v with details %v; want INVALID_ARGUMENT with details", streamErr, got.Details())
	}
	if diff := cmp.Diff(status.Convert(unaryErr).Proto(), got.Proto(), protocmp.Transform()); diff != "" {
		t.Errorf("AppendStreamError differs from AppendMessages' error (-unary +stream):\n%s", diff)
	}
}
