package client_test

import (
	"errors"
	"maps"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sessiond/sessiond/client"
	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// A Client's namespace is WithNamespace's, or In's; a Handle's is the one
// its session is in, whether the Client or the Ref named it.
func TestNamespaces(t *testing.T) {
	addr, ctx, _ := runSessiond(t)
	c := dial(t, ctx, addr, client.WithNamespace("team-a"))
	if ns := c.Namespace(); ns != "team-a" {
		t.Errorf("Namespace() = %q, want team-a", ns)
	}
	b := c.In("team-b")
	if ns := b.Namespace(); ns != "team-b" {
		t.Errorf("In(team-b).Namespace() = %q", ns)
	}
	for _, tc := range []struct {
		c    *client.Client
		ref  client.Ref
		want string
	}{
		{c, client.Alias("x"), "team-a"},
		{b, client.Alias("x"), "team-b"},
		{c, client.Alias("x").In("team-c"), "team-c"},
	} {
		h, err := tc.c.OpenOrCreate(ctx, tc.ref)
		if err != nil {
			t.Fatal(err)
		}
		if ns := h.Namespace(); ns != tc.want {
			t.Errorf("%s: handle's Namespace() = %q, want %q", tc.ref, ns, tc.want)
		}
		if s, err := c.Get(ctx, client.ID(h.ID()).In(tc.want)); err != nil || s.Namespace != tc.want {
			t.Errorf("%s: session in namespace %q: %+v, %v", tc.ref, tc.want, s, err)
		}
		if err := h.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// Handle.Metadata is a copy of the session's metadata: what SetMetadata
// set, and, after a save, what a new handle on the session loads.
func TestHandleMetadata(t *testing.T) {
	c, ctx := dialSessiond(t)
	h, err := c.New(ctx, client.WithSessionMetadata(map[string]string{"model": "a"}))
	if err != nil {
		t.Fatal(err)
	}
	if md := h.Metadata(); !maps.Equal(md, map[string]string{"model": "a"}) {
		t.Errorf("new handle's Metadata() = %v", md)
	}
	md := map[string]string{"model": "b", "temperature": "0.2"}
	if err := h.SetMetadata(md); err != nil {
		t.Fatal(err)
	}
	got := h.Metadata()
	if !maps.Equal(got, md) {
		t.Errorf("Metadata() after SetMetadata = %v, want %v", got, md)
	}
	got["model"] = "changed by the caller" // a copy: not saved below
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := c.Open(ctx, client.ID(h.ID()))
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close(ctx)
	if got := again.Metadata(); !maps.Equal(got, md) {
		t.Errorf("reopened handle's Metadata() = %v, want %v", got, md)
	}
}

// RPC is the generated stub on the client's connection: its calls reach
// the daemon, and its errors are gRPC's, not the SDK's sentinels.
func TestRPC(t *testing.T) {
	c, ctx := dialSessiond(t)
	sess, err := c.Create(ctx, client.CreateOptions{Title: "raw"})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.RPC().GetSession(ctx, &sessiondv1.GetSessionRequest{
		Ref: &sessiondv1.SessionRef{Key: &sessiondv1.SessionRef_Id{Id: sess.ID}}})
	if err != nil || resp.GetSession().GetTitle() != "raw" {
		t.Fatalf("RPC().GetSession = %v, %v", resp, err)
	}
	_, err = c.RPC().GetSession(ctx, &sessiondv1.GetSessionRequest{
		Ref: &sessiondv1.SessionRef{Key: &sessiondv1.SessionRef_Alias{Alias: "none"}}})
	if status.Code(err) != codes.NotFound || errors.Is(err, client.ErrNotFound) {
		t.Errorf("RPC().GetSession of a missing session: %v; want NOT_FOUND, unmapped", err)
	}
}
