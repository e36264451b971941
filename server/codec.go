package server

import (
	"context"
	"fmt"
	"unicode/utf8"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// A request whose string field holds invalid UTF-8 fails to unmarshal, and
// grpc-go answers every unmarshal failure INTERNAL, writing that status
// itself before the handler sees the error. So the codec (utf8Codec) does
// not fail such a request of this service: it leaves the message empty and
// records the offending field in Server.utf8Bad, and the service's handlers
// (wrapped by Register) answer INVALID_ARGUMENT naming it. Until Register
// has wrapped them, and for every other service's messages (health,
// reflection), the codec fails as grpc-go's does.

// utf8Codec is grpc-go's protobuf codec, with unmarshal failures caused by
// invalid UTF-8 handed to the service's handlers.
type utf8Codec struct {
	encoding.CodecV2
	s *Server
}

func (s *Server) newUTF8Codec() utf8Codec {
	s.encodedFrames.Store(true)
	return utf8Codec{encoding.GetCodecV2("proto"), s}
}

// encodedFrame is a response already encoded (a ListSessions frame kept by
// the store; see listFrames): the codec sends its bytes as they are. Only a
// grpc.Server made with ServerOptions has this codec, so the handlers send
// one only then (Server.encodedFrames).
type encodedFrame []byte

func (c utf8Codec) Marshal(v any) (mem.BufferSlice, error) {
	if f, ok := v.(encodedFrame); ok {
		// The bytes are never modified (see storage.ListEncoder), so the
		// transport may hold them as they are; freeing them is a no-op.
		return mem.BufferSlice{mem.SliceBuffer(f)}, nil
	}
	return c.CodecV2.Marshal(v)
}

func (c utf8Codec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.CodecV2.Unmarshal(data, v)
	if err == nil || !c.s.utf8Wrapped.Load() {
		return err
	}
	m, ok := v.(proto.Message)
	if !ok {
		return err
	}
	md := m.ProtoReflect().Descriptor()
	if md.ParentFile().Package() != sessiondv1.File_sessiond_v1_sessiond_proto.Package() {
		return err
	}
	field := invalidUTF8Field(data.Materialize(), md)
	if field == "" {
		return err
	}
	proto.Reset(m)
	c.s.utf8Bad.Store(v, field)
	return nil
}

// invalidUTF8Field returns the path of the first string field in b (an
// encoded md) that is not valid UTF-8, such as "messages[2].content" or
// "metadata" (a map key or value), or "" if there is none or b does not
// parse.
func invalidUTF8Field(b []byte, md protoreflect.MessageDescriptor) string {
	counts := map[protowire.Number]int{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		fd := md.Fields().ByNumber(num)
		if fd == nil || typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return ""
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		name := string(fd.Name())
		if fd.IsList() {
			name = fmt.Sprintf("%s[%d]", name, counts[num])
			counts[num]++
		}
		switch {
		case fd.IsMap():
			if invalidUTF8Field(v, fd.Message()) != "" {
				return name
			}
		case fd.Kind() == protoreflect.StringKind:
			if !utf8.Valid(v) {
				return name
			}
		case fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind:
			if sub := invalidUTF8Field(v, fd.Message()); sub != "" {
				return name + "." + sub
			}
		}
	}
	return ""
}

// utf8Status answers INVALID_ARGUMENT naming the field when the codec found
// invalid UTF-8 in the request just received into v (logged at info: a
// client's mistake, not the daemon's), and nil otherwise.
func (s *Server) utf8Status(ctx context.Context, method string, v any) error {
	f, bad := s.utf8Bad.LoadAndDelete(v)
	if !bad {
		return nil
	}
	field := f.(string)
	s.log.Info("request with invalid UTF-8", zap.String("method", method), zap.String("field", field), peerField(ctx))
	ferr := storage.Invalid(field, "is not valid UTF-8 (string fields must be)")
	return withDetails(status.New(codes.InvalidArgument, ferr.Error()), ferr).Err()
}

// withUTF8Status wraps every handler of sd so that receiving a request with
// invalid UTF-8 answers INVALID_ARGUMENT (see utf8Status), and lets the
// codec hand such requests over.
func (s *Server) withUTF8Status(sd grpc.ServiceDesc) *grpc.ServiceDesc {
	methods := make([]grpc.MethodDesc, len(sd.Methods))
	for i, md := range sd.Methods {
		h, method := md.Handler, "/"+sd.ServiceName+"/"+md.MethodName
		md.Handler = func(srv any, ctx context.Context, dec func(any) error, in grpc.UnaryServerInterceptor) (any, error) {
			return h(srv, ctx, func(v any) error {
				if err := dec(v); err != nil {
					return err
				}
				return s.utf8Status(ctx, method, v)
			}, in)
		}
		methods[i] = md
	}
	streams := make([]grpc.StreamDesc, len(sd.Streams))
	for i, st := range sd.Streams {
		h, method := st.Handler, "/"+sd.ServiceName+"/"+st.StreamName
		st.Handler = func(srv any, ss grpc.ServerStream) error {
			return h(srv, utf8Stream{ServerStream: ss, s: s, method: method})
		}
		streams[i] = st
	}
	sd.Methods, sd.Streams = methods, streams
	s.utf8Wrapped.Store(true)
	return &sd
}

type utf8Stream struct {
	grpc.ServerStream
	s      *Server
	method string
}

func (u utf8Stream) RecvMsg(m any) error {
	if err := u.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return u.s.utf8Status(u.Context(), u.method, m)
}
