package clienttest_test

import (
	"context"
	"encoding/binary"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/clienttest"
	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// TestNoPingPerCall: the client's fixed flow-control windows spare the
// daemon a PING to answer on every call; with grpc-go's window estimation
// the client sent one for each answer that brought data.
func TestNoPingPerCall(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := clienttest.NewServer(t, clienttest.WithListener(lis))
	var counter atomic.Pointer[pingCounter]
	dialer := func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		pc := &pingCounter{Conn: conn}
		counter.Store(pc)
		return pc, nil
	}
	c, err := client.Dial(t.Context(), srv.Addr(), client.WithContextDialer(dialer))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := c.Create(t.Context(), client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := c.Append(t.Context(), client.ID(s.ID), 0, &sessiondv1.Message{
			Id: "m" + strconv.Itoa(i), Role: sessiondv1.Role_ROLE_USER, Content: "hello"}); err != nil {
			t.Fatal(err)
		}
	}
	if n := counter.Load().count(); n != 0 {
		t.Errorf("the client sent %d PINGs over 21 calls; want none", n)
	}
}

// pingCounter counts the HTTP/2 PING frames (not acknowledgements) written
// on a client connection.
type pingCounter struct {
	net.Conn
	mu      sync.Mutex
	buf     []byte
	preface bool
	pings   int
}

func (p *pingCounter) Write(b []byte) (int, error) {
	p.mu.Lock()
	p.buf = append(p.buf, b...)
	if !p.preface && len(p.buf) >= 24 {
		p.buf, p.preface = p.buf[24:], true // "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
	}
	for p.preface && len(p.buf) >= 9 {
		n := 9 + int(binary.BigEndian.Uint32(append([]byte{0}, p.buf[:3]...)))
		if len(p.buf) < n {
			break
		}
		if typ, flags := p.buf[3], p.buf[4]; typ == 0x6 && flags&0x1 == 0 {
			p.pings++
		}
		p.buf = p.buf[n:]
	}
	p.mu.Unlock()
	return p.Conn.Write(b)
}

func (p *pingCounter) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pings
}
