package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	sdk "github.com/sessiond/sessiond/client"
	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// leanConn is the append loop's client (--client lean): gRPC over one
// HTTP/2 connection, one call at a time, written out by hand. Each call is
// a real unary AppendMessages (HEADERS and DATA in one write, the answer
// read and its grpc-status and message checked), without grpc-go's
// per-call machinery: no goroutines of its own (grpc-go hands every call
// to a writer and a reader goroutine), no stream bookkeeping, buffers
// reused. The daemon serves it exactly as it serves grpc-go. Like
// redis-benchmark and pgbench, it keeps the measuring client from eating
// the CPU that the daemon it measures needs on a small machine.
//
// It follows HTTP/2 as a gRPC server speaks it: it acknowledges SETTINGS
// and PINGs, honours the server's flow-control windows and frame size, and
// opens its own receive windows wide (the answers are a few bytes). A
// GOAWAY or a reset stream fails the call.
type leanConn struct {
	conn    net.Conn
	bw      *bufio.Writer
	fr      *http2.Framer
	henc    *hpack.Encoder
	hbuf    bytes.Buffer
	path    string
	host    string
	timeout string // grpc-timeout, as grpc-go sends it for the per-call deadline
	callTTL time.Duration

	stream   uint32 // the current call's stream id
	connWin  int64  // what the server lets us send on the connection
	initWin  int64  // what it lets us send on a new stream
	strWin   int64  // ... on the current stream
	maxFrame int
	recvd    int64 // DATA bytes received since the last connection window update

	req  []byte // the gRPC message being sent: 5-byte prefix + proto
	resp []byte // the answer's gRPC message

	// An AppendStream call (--rpc stream) keeps one stream open: streaming
	// says it is; pending holds its bytes received not yet answered;
	// strRecvd counts DATA bytes since its last window update.
	streaming bool
	pending   []byte
	strRecvd  int64

	stop func() bool // unregisters the close on the dial context's end
}

const (
	leanRecvWindow = 1 << 30 // the connection receive window we grant
	leanStreamWin  = 1 << 20 // and each stream's
)

// dialLean opens a lean connection to c.addr for calls to method (a full
// gRPC method name, "/package.Service/Method"). The connection is closed
// when ctx ends.
func dialLean(ctx context.Context, c *config, method string) (*leanConn, error) {
	var d net.Dialer
	dctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	conn, err := d.DialContext(dctx, "tcp", c.addr)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", c.addr, err)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	l := &leanConn{conn: conn, path: method, host: c.addr, callTTL: c.timeout,
		timeout: strconv.FormatInt(c.timeout.Milliseconds(), 10) + "m",
		connWin: 65535, initWin: 65535, maxFrame: 16384}
	l.bw = bufio.NewWriterSize(conn, 32<<10)
	l.fr = http2.NewFramer(l.bw, bufio.NewReaderSize(conn, 32<<10))
	l.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	l.fr.MaxHeaderListSize = 1 << 20
	l.henc = hpack.NewEncoder(&l.hbuf)
	_ = conn.SetDeadline(time.Now().Add(c.timeout))
	_, err = l.bw.WriteString(http2.ClientPreface)
	if err == nil {
		err = l.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: leanStreamWin},
			http2.Setting{ID: http2.SettingEnablePush, Val: 0})
	}
	if err == nil {
		err = l.fr.WriteWindowUpdate(0, leanRecvWindow-65535)
	}
	if err == nil {
		err = l.bw.Flush()
	}
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("start HTTP/2 with %s: %w", c.addr, err)
	}
	l.stop = context.AfterFunc(ctx, func() { _ = l.conn.Close() })
	return l, nil
}

// closeOn closes l when ctx ends, ending a call in progress at once.
func (l *leanConn) closeOn(ctx context.Context) {
	context.AfterFunc(ctx, func() { _ = l.conn.Close() })
}

func (l *leanConn) Close() error {
	l.stop()
	return l.conn.Close()
}

// appendMessages is one unary AppendMessages call: req sent, the answer
// read into resp. A non-OK grpc-status is returned as a status error.
func (l *leanConn) appendMessages(ctx context.Context, req *sessiondv1.AppendMessagesRequest, resp *sessiondv1.AppendMessagesResponse) error {
	return l.roundTrip(ctx, l.call, req, resp)
}

// roundTrip sends req with send, which reads the answer's message into
// l.resp, and decodes it into resp. A call cut by ctx returns ctx's error.
func (l *leanConn) roundTrip(ctx context.Context, send func(proto.Message) error, req, resp proto.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := send(req); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	if err := proto.Unmarshal(l.resp, resp); err != nil {
		return fmt.Errorf("decode %s: %w", resp.ProtoReflect().Descriptor().Name(), err)
	}
	return nil
}

// frame encodes m as a length-prefixed gRPC message into l.req.
func (l *leanConn) frame(m proto.Message) error {
	var err error
	l.req, err = proto.MarshalOptions{}.MarshalAppend(append(l.req[:0], 0, 0, 0, 0, 0), m)
	if err != nil {
		return fmt.Errorf("encode request: %w", err)
	}
	binary.BigEndian.PutUint32(l.req[1:5], uint32(len(l.req)-5))
	return nil
}

// call sends m on a new stream and reads the answer's message into l.resp.
func (l *leanConn) call(m proto.Message) error {
	_ = l.conn.SetDeadline(time.Now().Add(l.callTTL))
	if err := l.frame(m); err != nil {
		return err
	}
	if err := l.newStream(hpack.HeaderField{Name: "grpc-timeout", Value: l.timeout}); err != nil {
		return err
	}
	if err := l.sendRequest(true); err != nil {
		return err
	}
	return l.readAnswer()
}

// sendRequest sends the framed request in l.req on the current stream and
// flushes it; end closes the client's side of the stream.
func (l *leanConn) sendRequest(end bool) error {
	if err := l.writeData(l.req, end); err != nil {
		return err
	}
	return l.bw.Flush()
}

// newStream sends the HEADERS of a new call on the next stream id, with
// extra header fields after the standard ones.
func (l *leanConn) newStream(extra ...hpack.HeaderField) error {
	l.stream += 2
	if l.stream == 2 {
		l.stream = 1 // client streams are odd, from 1
	}
	if l.stream > 1<<31-1 {
		return errors.New("HTTP/2 stream ids used up on this connection")
	}
	l.strWin = l.initWin
	l.hbuf.Reset()
	std := [...]hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: l.path}, {Name: ":authority", Value: l.host},
		{Name: "content-type", Value: "application/grpc"}, {Name: "user-agent", Value: "sessiond-load"},
		{Name: "te", Value: "trailers"},
	}
	for _, fields := range [][]hpack.HeaderField{std[:], extra} {
		for _, f := range fields {
			if err := l.henc.WriteField(f); err != nil {
				return err
			}
		}
	}
	return l.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: l.stream, BlockFragment: l.hbuf.Bytes(), EndHeaders: true})
}

// readAnswer reads frames until the current stream ends, checking its
// headers, collecting its message and returning its grpc-status.
func (l *leanConn) readAnswer() error {
	l.resp = l.resp[:0]
	headers := false
	for {
		f, err := l.readFrame()
		if err != nil {
			return err
		}
		if f == nil || f.Header().StreamID != l.stream {
			continue
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if !headers {
				headers = true
				if s := f.PseudoValue("status"); s != "200" {
					return fmt.Errorf("daemon answered HTTP status %q", s)
				}
			}
			if f.StreamEnded() {
				return l.grpcStatus(f)
			}
		case *http2.DataFrame:
			l.resp = append(l.resp, f.Data()...)
			if f.StreamEnded() {
				return errors.New("daemon ended the call without trailers")
			}
		case *http2.RSTStreamFrame:
			return fmt.Errorf("daemon reset the call: %v", f.ErrCode)
		}
	}
}

// grpcStatus turns the trailers into the call's result and unframes the
// message.
func (l *leanConn) grpcStatus(f *http2.MetaHeadersFrame) error {
	code := header(f, "grpc-status")
	if code != "0" {
		n, err := strconv.Atoi(code)
		if err != nil {
			return fmt.Errorf("daemon sent grpc-status %q", code)
		}
		return status.Error(codes.Code(n), decodeGRPCMessage(header(f, "grpc-message")))
	}
	if len(l.resp) < 5 || l.resp[0] != 0 || int(binary.BigEndian.Uint32(l.resp[1:5])) != len(l.resp)-5 {
		return fmt.Errorf("daemon sent a malformed gRPC message (%d bytes)", len(l.resp))
	}
	l.resp = l.resp[5:]
	return nil
}

// readFrame reads one frame and handles what concerns the connection:
// SETTINGS, PING, WINDOW_UPDATE and GOAWAY. It returns the frame (nil for
// one it handled).
func (l *leanConn) readFrame() (http2.Frame, error) {
	f, err := l.fr.ReadFrame()
	if err != nil {
		return nil, fmt.Errorf("read from daemon: %w", err)
	}
	switch f := f.(type) {
	case *http2.SettingsFrame:
		if f.IsAck() {
			return nil, nil
		}
		err := f.ForeachSetting(func(s http2.Setting) error {
			switch s.ID {
			case http2.SettingInitialWindowSize:
				l.strWin += int64(s.Val) - l.initWin
				l.initWin = int64(s.Val)
			case http2.SettingMaxFrameSize:
				l.maxFrame = int(s.Val)
			}
			return nil
		})
		if err == nil {
			err = l.fr.WriteSettingsAck()
		}
		if err == nil {
			err = l.bw.Flush()
		}
		return nil, err
	case *http2.PingFrame:
		if f.IsAck() {
			return nil, nil
		}
		err := l.fr.WritePing(true, f.Data)
		if err == nil {
			err = l.bw.Flush()
		}
		return nil, err
	case *http2.WindowUpdateFrame:
		switch f.StreamID {
		case 0:
			l.connWin += int64(f.Increment)
		case l.stream:
			l.strWin += int64(f.Increment)
		}
		return nil, nil
	case *http2.GoAwayFrame:
		return nil, fmt.Errorf("daemon closed the connection (GOAWAY %v: %q)", f.ErrCode, f.DebugData())
	case *http2.DataFrame:
		// Give the connection window back long before it runs out; each
		// stream's is fresh.
		if l.recvd += int64(f.Length); l.recvd > leanRecvWindow/2 {
			if err := l.fr.WriteWindowUpdate(0, uint32(l.recvd)); err != nil {
				return nil, err
			}
			l.recvd = 0
		}
	}
	return f, nil
}

// header is the value of the regular header field name in f, or "".
func header(f *http2.MetaHeadersFrame, name string) string {
	for _, hf := range f.RegularFields() {
		if hf.Name == name {
			return hf.Value
		}
	}
	return ""
}

// decodeGRPCMessage undoes the percent-encoding of grpc-message.
func decodeGRPCMessage(s string) string {
	if !bytes.ContainsRune([]byte(s), '%') {
		return s
	}
	var b []byte
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b = append(b, byte(v))
				i += 2
				continue
			}
		}
		b = append(b, s[i])
	}
	return string(b)
}

// appendStreamed is one append over an AppendStream call that stays open
// on l (--rpc stream): the first opens it with HEADERS; each then sends its
// request as DATA and reads the one answer. A per-request status is
// returned as a status error, as a unary call's grpc-status would be.
func (l *leanConn) appendStreamed(ctx context.Context, req *sessiondv1.AppendStreamRequest, resp *sessiondv1.AppendStreamResponse) error {
	if err := l.roundTrip(ctx, l.streamCall, req, resp); err != nil {
		return err
	}
	return sdk.AppendStreamError(resp)
}

// streamCall sends m on the open stream (opening it first) and reads the
// next answer's message into l.resp.
func (l *leanConn) streamCall(m proto.Message) error {
	_ = l.conn.SetDeadline(time.Now().Add(l.callTTL))
	if !l.streaming {
		if err := l.openStream(); err != nil {
			return err
		}
	}
	if err := l.frame(m); err != nil {
		return err
	}
	if err := l.sendRequest(false); err != nil {
		return err
	}
	return l.readStreamed()
}

// openStream starts the stream: HEADERS without a deadline (the stream
// lives as long as the run), and no END_STREAM.
func (l *leanConn) openStream() error {
	if err := l.newStream(); err != nil {
		return err
	}
	l.streaming, l.pending = true, l.pending[:0]
	return nil
}

// writeData sends data on the current stream within the server's windows.
func (l *leanConn) writeData(data []byte, end bool) error {
	for {
		n := min(int64(len(data)), int64(l.maxFrame), l.connWin, l.strWin)
		if n <= 0 && len(data) > 0 {
			if err := l.bw.Flush(); err != nil {
				return err
			}
			if _, err := l.readFrame(); err != nil {
				return err
			}
			continue
		}
		if err := l.fr.WriteData(l.stream, end && int(n) == len(data), data[:n]); err != nil {
			return err
		}
		l.connWin -= n
		l.strWin -= n
		if data = data[n:]; len(data) == 0 {
			return nil
		}
	}
}

// readStreamed reads frames until the stream's next gRPC message is whole,
// and moves it into l.resp. The stream's receive window is given back as
// answers arrive, as the connection's is in readFrame.
func (l *leanConn) readStreamed() error {
	for {
		if len(l.pending) >= 5 {
			n := int(binary.BigEndian.Uint32(l.pending[1:5]))
			if len(l.pending) >= 5+n {
				l.resp = append(l.resp[:0], l.pending[5:5+n]...)
				l.pending = append(l.pending[:0], l.pending[5+n:]...)
				return nil
			}
		}
		f, err := l.readFrame()
		if err != nil {
			return err
		}
		if f == nil || f.Header().StreamID != l.stream {
			continue
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() {
				l.streaming = false
				if err := l.grpcStatus(f); err != nil {
					return err
				}
				return errors.New("daemon ended the stream before answering")
			}
		case *http2.DataFrame:
			l.pending = append(l.pending, f.Data()...)
			if l.strRecvd += int64(f.Length); l.strRecvd > leanStreamWin/2 {
				if err := l.fr.WriteWindowUpdate(l.stream, uint32(l.strRecvd)); err != nil {
					return err
				}
				l.strRecvd = 0
			}
		case *http2.RSTStreamFrame:
			l.streaming = false
			return fmt.Errorf("daemon reset the stream: %v", f.ErrCode)
		}
	}
}

// leanAppenders opens one lean connection per client for c.rpc (unary
// AppendMessages or a streamed AppendStream) and returns the call that
// sends an append over client i's connection, with the daemon's answer
// (valid until that client's next call), and the function closing them
// all. Every connection is closed at once when run ends, as grpc-go's
// would be, so that a failing daemon stops every client.
func leanAppenders(ctx, run context.Context, c *config) (appendOn func(ctx context.Context, client int, req *sessiondv1.AppendMessagesRequest) (*sessiondv1.AppendMessagesResponse, error), closeAll func(), err error) {
	lean := make([]*leanConn, c.clients)
	closeAll = func() {
		for _, l := range lean {
			if l != nil {
				_ = l.Close()
			}
		}
	}
	method := sessiondv1.SessionStoreService_AppendMessages_FullMethodName
	if c.rpc == rpcStream {
		method = sessiondv1.SessionStoreService_AppendStream_FullMethodName
	}
	for i := range lean {
		if lean[i], err = dialLean(ctx, c, method); err != nil {
			closeAll()
			return nil, func() {}, err
		}
		lean[i].closeOn(run)
	}
	if c.rpc == rpcStream {
		resps := make([]sessiondv1.AppendStreamResponse, c.clients)
		return func(ctx context.Context, client int, req *sessiondv1.AppendMessagesRequest) (*sessiondv1.AppendMessagesResponse, error) {
			err := lean[client].appendStreamed(ctx, &sessiondv1.AppendStreamRequest{Append: req}, &resps[client])
			return resps[client].GetResult(), err
		}, closeAll, nil
	}
	resps := make([]sessiondv1.AppendMessagesResponse, c.clients)
	return func(ctx context.Context, client int, req *sessiondv1.AppendMessagesRequest) (*sessiondv1.AppendMessagesResponse, error) {
		err := lean[client].appendMessages(ctx, req, &resps[client])
		return &resps[client], err
	}, closeAll, nil
}
