package main

import (
	"io"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// TestLeanStatus: the lean client returns the daemon's refusals as gRPC
// status errors, code and message intact, and its connection goes on
// serving calls after them.
func TestLeanStatus(t *testing.T) {
	d := startDaemon(t)
	c := &config{addr: d.addr, timeout: 10 * time.Second}
	l, err := dialLean(t.Context(), c, sessiondv1.SessionStoreService_AppendMessages_FullMethodName)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	msg := []*sessiondv1.Message{{Id: "m1", Role: sessiondv1.Role_ROLE_USER, Content: "hi"}}
	var resp sessiondv1.AppendMessagesResponse
	call := func(ref *sessiondv1.SessionRef, msgs []*sessiondv1.Message) error {
		return l.appendMessages(t.Context(), &sessiondv1.AppendMessagesRequest{Ref: ref, Messages: msgs}, &resp)
	}
	const missing = "0190c6c8-0000-7000-8000-000000000001"
	for _, tt := range []struct {
		name string
		ref  *sessiondv1.SessionRef
		msgs []*sessiondv1.Message
		code codes.Code
		has  string
	}{
		{"no such session", idRef("", missing), msg, codes.NotFound, missing},
		{"no ref", nil, msg, codes.InvalidArgument, "ref"},
		{"bad namespace", idRef("no/slash", missing), msg, codes.InvalidArgument, "namespace"},
	} {
		err := call(tt.ref, tt.msgs)
		if status.Code(err) != tt.code || !strings.Contains(status.Convert(err).Message(), tt.has) {
			t.Errorf("%s: err = %v; want %v naming %q", tt.name, err, tt.code, tt.has)
		}
	}
	id, err := createSession(t.Context(), &config{timeout: 10 * time.Second}, sessionClient(t, d.addr), "lean")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		m := []*sessiondv1.Message{{Id: "m" + string(rune('a'+i)), Role: sessiondv1.Role_ROLE_USER, Content: "hi"}}
		if err := call(idRef("", id), m); err != nil {
			t.Fatalf("append %d after the refusals: %v", i, err)
		}
		if resp.GetRevision() < 2 || resp.GetMessageCount() != int64(i+1) {
			t.Errorf("append %d answered %v; want message count %d", i, &resp, i+1)
		}
	}
}

// TestNoPingPerCall: the daemon's fixed flow-control windows
// (server.ServerOptions) spare each call a PING and its answer; grpc-go's
// window estimation sent one per call that brought data.
func TestNoPingPerCall(t *testing.T) {
	d := startDaemon(t)
	c := &config{addr: d.addr, timeout: 10 * time.Second}
	id, err := createSession(t.Context(), c, sessionClient(t, d.addr), "pings")
	if err != nil {
		t.Fatal(err)
	}
	var pings atomic.Int64
	c.addr = pingCounter(t, d.addr, &pings)
	l, err := dialLean(t.Context(), c, sessiondv1.SessionStoreService_AppendMessages_FullMethodName)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var resp sessiondv1.AppendMessagesResponse
	for i := range 20 {
		req := &sessiondv1.AppendMessagesRequest{Ref: idRef("", id), Messages: []*sessiondv1.Message{
			{Id: "m" + strconv.Itoa(i), Role: sessiondv1.Role_ROLE_USER, Content: strings.Repeat("x", 1024)}}}
		if err := l.appendMessages(t.Context(), req, &resp); err != nil {
			t.Fatal(err)
		}
	}
	if n := pings.Load(); n != 0 {
		t.Errorf("the daemon sent %d PINGs over 20 appends; want none", n)
	}
}

// pingCounter relays one connection to addr, counting in pings the PING
// frames (not acknowledgements) the server sends, and returns its own
// address. A frame reaches the client only once counted.
func pingCounter(t *testing.T, addr string, pings *atomic.Int64) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		client, err := ln.Accept()
		if err != nil {
			return
		}
		defer client.Close()
		server, err := net.Dial("tcp", addr)
		if err != nil {
			return
		}
		defer server.Close()
		go func() { _, _ = io.Copy(server, client) }()
		fr := http2.NewFramer(nil, io.TeeReader(server, client))
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			if p, ok := f.(*http2.PingFrame); ok && !p.IsAck() {
				pings.Add(1)
			}
		}
	}()
	return ln.Addr().String()
}

func TestDecodeGRPCMessage(t *testing.T) {
	for in, want := range map[string]string{
		"plain":              "plain",
		"50%25 done":         "50% done",
		"caf%C3%A9":          "café",
		"bad %zz and tail %": "bad %zz and tail %",
		"%0A":                "\n",
	} {
		if got := decodeGRPCMessage(in); got != want {
			t.Errorf("decodeGRPCMessage(%q) = %q; want %q", in, got, want)
		}
	}
}

// sessionClient is a grpc-go client of the daemon at addr.
func sessionClient(t *testing.T, addr string) sessiondv1.SessionStoreServiceClient {
	t.Helper()
	cc, err := dial(&config{addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return sessiondv1.NewSessionStoreServiceClient(cc)
}
