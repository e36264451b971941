package server

import (
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	protoreflect "google.golang.org/protobuf/proto"
)

// requestCodec is grpc-go's protobuf codec, logging the requests it cannot
// decode. grpc-go answers them INTERNAL ("error unmarshalling request")
// before any interceptor runs, so without this the daemon's log would not
// show them at all. The lines are rate-limited like the store's
// conditions: a client sending garbage in a loop cannot flood the log.
type requestCodec struct {
	encoding.CodecV2
	s *Server
}

func (c requestCodec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.CodecV2.Unmarshal(data, v)
	if err != nil {
		typ := "unknown"
		if m, ok := v.(protoreflect.Message); ok {
			typ = string(m.ProtoReflect().Descriptor().FullName())
		}
		c.s.cond.Log(c.s.log, zapcore.WarnLevel, "malformed request", "malformed protobuf bytes in a request; answered INTERNAL",
			zap.String("message_type", typ), zap.Int("bytes", data.Len()), zap.Error(err))
	}
	return err
}

// Marshal sends a watch event's shared encoding as it is, so that the
// session's watchers send the same bytes instead of a copy each (in a
// pooled buffer rounded up to the next size class: 1 MiB for an event of
// 64 KiB); anything else goes through grpc-go's codec.
func (c requestCodec) Marshal(v any) (mem.BufferSlice, error) {
	if e, ok := v.(*encodedEvent); ok {
		return mem.BufferSlice{mem.SliceBuffer(e.b)}, nil
	}
	return c.CodecV2.Marshal(v)
}

// codecOption makes the grpc server decode requests with requestCodec.
func (s *Server) codecOption() grpc.ServerOption {
	return grpc.ForceServerCodecV2(requestCodec{CodecV2: encoding.GetCodecV2(proto.Name), s: s})
}
