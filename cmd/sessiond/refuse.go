package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
)

// Refusals answered at once, per listener: each is a goroutine with a few
// KiB of buffers for at most 1.25 refuseTimeout; past maxRefusing, more
// connections over the cap are closed without an answer.
const (
	maxRefusing   = 64
	refuseTimeout = 2 * time.Second
)

// connLimitMessage is what a client over --max-connections is told.
func connLimitMessage(max int64) string {
	return fmt.Sprintf("sessiond: connection limit (--max-connections=%d) reached", max)
}

// refusal is how a listener answers a connection over --max-connections
// (max): with refuse (refuseGRPC or refuseHTTP), over TLS offering alpn when
// the daemon serves TLS.
func refusal(sec *security, max int, alpn string, refuse func(net.Conn, *tls.Config, string)) func(net.Conn) {
	msg := connLimitMessage(int64(max))
	var cfg *tls.Config
	if sec.certs != nil {
		cfg = sec.certs.refusalConfig(alpn)
	}
	return func(c net.Conn) { refuse(c, cfg, msg) }
}

// refuseHTTP answers a connection over the cap as the HTTP API answers
// UNAVAILABLE: it reads the first request's head and answers 503 with the
// status {"code": 14, "message": msg} as its body, then closes, all within
// 1.25 refuseTimeout. With tlsConfig (HTTP/1.1 only) it first does the TLS
// handshake.
func refuseHTTP(c net.Conn, tlsConfig *tls.Config, msg string) {
	defer func() { _ = c.Close() }()
	c, ok := startRefusal(c, tlsConfig)
	if !ok {
		return
	}
	if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
		return
	}
	_ = c.SetDeadline(time.Now().Add(refuseTimeout / 4))
	body, _ := json.Marshal(struct {
		Code    codes.Code `json:"code"`
		Message string     `json:"message"`
	}{codes.Unavailable, msg}) // a struct of a number and a string always encodes
	head := fmt.Sprintf("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", len(body))
	if _, err := c.Write(append([]byte(head), body...)); err != nil {
		return
	}
	finishRefusal(c)
}

// startRefusal sets the refusal's deadline and, with tlsConfig, does the
// TLS handshake; it returns the connection to speak on (and to close), and
// whether to go on.
func startRefusal(c net.Conn, tlsConfig *tls.Config) (net.Conn, bool) {
	_ = c.SetDeadline(time.Now().Add(refuseTimeout))
	if tlsConfig == nil {
		return c, true
	}
	tc := tls.Server(c, tlsConfig)
	if err := tc.Handshake(); err != nil {
		return c, false
	}
	return tc, true
}

// finishRefusal ends a refusal once its answer is written. Closing with the
// client's bytes unread would reset the connection, and the client could
// lose the answer: stop writing, then read until the client closes (or
// the deadline).
func finishRefusal(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(c, 1<<20))
}

// refuseGRPC answers a connection over the cap as a gRPC server that
// cannot take its calls: it reads the client's HTTP/2 preface, answers
// the first call with UNAVAILABLE and msg, sends a GOAWAY carrying msg, and
// closes, all within 1.25 refuseTimeout. With tlsConfig it first does the TLS
// handshake the client expects. The client sees msg instead of a reset
// connection.
func refuseGRPC(c net.Conn, tlsConfig *tls.Config, msg string) {
	defer func() { _ = c.Close() }()
	c, ok := startRefusal(c, tlsConfig)
	if !ok {
		return
	}
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(c, preface); err != nil || string(preface) != http2.ClientPreface {
		return
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		return
	}
	var lastStream uint32
	for lastStream == 0 {
		f, err := fr.ReadFrame()
		if err != nil {
			break // no call came: the GOAWAY alone says why
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				err = fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				err = fr.WritePing(true, f.Data)
			}
		case *http2.HeadersFrame:
			if f.HeadersEnded() {
				lastStream = f.StreamID
			}
		case *http2.ContinuationFrame:
			if f.HeadersEnded() {
				lastStream = f.StreamID
			}
		}
		if err != nil {
			return
		}
	}
	// A client that made no call gets its GOAWAY after refuseTimeout: a
	// little more time to write it and see the client close.
	_ = c.SetDeadline(time.Now().Add(refuseTimeout / 4))
	if lastStream != 0 {
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: lastStream, BlockFragment: unavailableTrailers(msg), EndStream: true, EndHeaders: true}); err != nil {
			return
		}
	}
	if err := fr.WriteGoAway(lastStream, http2.ErrCodeNo, []byte(msg)); err != nil {
		return
	}
	finishRefusal(c)
}

// unavailableTrailers is the HPACK block of a trailers-only gRPC response
// with status UNAVAILABLE and msg.
func unavailableTrailers(msg string) []byte {
	var b bytes.Buffer
	enc := hpack.NewEncoder(&b)
	for _, f := range []hpack.HeaderField{
		{Name: ":status", Value: "200"},
		{Name: "content-type", Value: "application/grpc"},
		{Name: "grpc-status", Value: strconv.Itoa(int(codes.Unavailable))},
		{Name: "grpc-message", Value: percentEncode(msg)},
	} {
		_ = enc.WriteField(f) // writes to a bytes.Buffer cannot fail
	}
	return b.Bytes()
}

// percentEncode encodes grpc-message as the gRPC protocol asks: bytes
// outside printable ASCII, and '%', as %XX.
func percentEncode(s string) string {
	var b []byte
	for i := range len(s) {
		if c := s[i]; c < ' ' || c > '~' || c == '%' {
			b = fmt.Appendf(b, "%%%02X", c)
		} else {
			b = append(b, c)
		}
	}
	return string(b)
}
