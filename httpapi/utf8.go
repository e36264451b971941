package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// jsonBodies is the gateway's proto3 JSON marshaler with a request body
// checked for strings that are not valid UTF-8 (raw bytes, or an escaped
// lone surrogate) before it is decoded: protojson refuses such a body with
// a syntax error that names no field, and the gateway would answer it
// INVALID_ARGUMENT without saying which field to fix.
type jsonBodies struct {
	*runtime.JSONPb
}

// NewDecoder reads the whole body (bounded by WithMaxBodyBytes), names the
// first string field that is not valid UTF-8, if any, and otherwise decodes
// it as JSONPb does. The gateway answers the error INVALID_ARGUMENT with its
// text.
func (j jsonBodies) NewDecoder(r io.Reader) runtime.Decoder {
	return runtime.DecoderFunc(func(v any) error {
		body, err := io.ReadAll(r)
		if err != nil {
			return err
		}
		if m, ok := v.(proto.Message); ok {
			if field := invalidUTF8Field(body, m.ProtoReflect().Descriptor()); field != "" {
				return fmt.Errorf("%s is not valid UTF-8 (string fields must be)", field)
			}
		}
		return j.JSONPb.NewDecoder(bytes.NewReader(body)).Decode(v)
	})
}

// jsonFrame is an object or array being walked: the path that names it
// and what its members are.
type jsonFrame struct {
	path  string
	array bool
	// For an object: md when it is a message (fields by JSON or proto
	// name), mapField when it is a map; neither for an unknown field's value.
	md       protoreflect.MessageDescriptor
	mapField protoreflect.FieldDescriptor
	// For an array: its list field, if known.
	list    protoreflect.FieldDescriptor
	n       int    // array: the next element's index
	key     string // object: the member whose value comes next
	wantKey bool
}

// invalidUTF8Field returns the path of the first string in the JSON body
// (a message md in proto3 JSON) that is not valid UTF-8, in the names the
// gRPC side uses ("messages[2].content", "metadata[\"k\"]"; a map key names
// its map), or "" if every string is valid or body is not JSON (the decoder
// then says what is wrong).
func invalidUTF8Field(body []byte, md protoreflect.MessageDescriptor) string {
	dec := json.NewDecoder(bytes.NewReader(body))
	var stack []*jsonFrame
	// child returns the path and field of the value that comes next in top.
	child := func(top *jsonFrame) (string, protoreflect.FieldDescriptor) {
		join := func(name string) string {
			if top.path == "" {
				return name
			}
			return top.path + "." + name
		}
		switch {
		case top.array:
			return fmt.Sprintf("%s[%d]", top.path, top.n), top.list
		case top.mapField != nil:
			return fmt.Sprintf("%s[%q]", top.path, top.key), top.mapField.MapValue()
		case top.md != nil:
			fd := top.md.Fields().ByJSONName(top.key)
			if fd == nil {
				fd = top.md.Fields().ByTextName(top.key)
			}
			if fd != nil {
				return join(string(fd.Name())), fd
			}
		}
		return join(top.key), nil
	}
	for {
		start := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		raw := body[start:dec.InputOffset()]
		var top *jsonFrame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && !top.array && top.wantKey {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:len(stack)-1]
				if len(stack) == 0 {
					return ""
				}
				done(stack[len(stack)-1])
				continue
			}
			top.key, top.wantKey = tok.(string), false
			if !validJSONString(raw) {
				if top.path == "" {
					return top.key
				}
				return top.path
			}
			continue
		}
		switch tok := tok.(type) {
		case json.Delim:
			switch tok {
			case '{', '[':
				f := &jsonFrame{array: tok == '[', wantKey: tok == '{'}
				var fd protoreflect.FieldDescriptor
				if top == nil {
					f.md = md
				} else {
					f.path, fd = child(top)
				}
				if fd != nil {
					switch {
					case f.array && fd.IsList():
						f.list = fd
					case !f.array && fd.IsMap():
						f.mapField = fd
					case !f.array && fd.Message() != nil:
						f.md = fd.Message()
					}
				}
				if f.array && top != nil && top.array {
					f.list = nil // a list of lists is not proto3 JSON
				}
				stack = append(stack, f)
			case ']':
				stack = stack[:len(stack)-1]
				if len(stack) == 0 {
					return ""
				}
				done(stack[len(stack)-1])
			}
		case string:
			if !validJSONString(raw) {
				if top == nil {
					return ""
				}
				path, _ := child(top)
				return path
			}
			if top == nil {
				return ""
			}
			done(top)
		default:
			if top == nil {
				return ""
			}
			done(top)
		}
	}
}

// done moves f past the value just walked.
func done(f *jsonFrame) {
	if f.array {
		f.n++
	} else {
		f.wantKey = true
	}
}

// validJSONString reports whether raw, the bytes of one JSON string token
// (with the separators before it), holds only valid UTF-8, raw and escaped:
// no invalid byte and no \u escape of a lone surrogate.
func validJSONString(raw []byte) bool {
	if !utf8.Valid(raw) {
		return false
	}
	for i := 0; i+1 < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		if raw[i+1] != 'u' {
			i++ // an escaped character: skip it, so "\\u" is not an escape
			continue
		}
		r, ok := hexRune(raw, i+2)
		if !ok {
			return true // not valid JSON: the decoder says so
		}
		i += 5
		if !utf16.IsSurrogate(r) {
			continue
		}
		if r >= 0xdc00 || i+6 >= len(raw) || raw[i+1] != '\\' || raw[i+2] != 'u' {
			return false
		}
		r2, ok := hexRune(raw, i+3)
		if !ok || utf16.DecodeRune(r, r2) == utf8.RuneError {
			return false
		}
		i += 6
	}
	return true
}

// hexRune reads the four hex digits of a \u escape at raw[at:].
func hexRune(raw []byte, at int) (rune, bool) {
	if at+4 > len(raw) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(raw[at:at+4]), 16, 16)
	return rune(n), err == nil
}
