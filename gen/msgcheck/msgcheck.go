// Package msgcheck holds the rules for one message that the daemon applies
// to every request (package storage) and that the Go SDK applies when a
// message is added to a handle, long before a background save would send
// it, so that each rule is written once. It is hand-written, and lives in
// the gen module beside the generated types it checks, so that the SDK and
// any other Go client can apply the daemon's rules without depending on the
// daemon's module.
package msgcheck

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/reflect/protoreflect"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// MaxIDBytes is the longest message or tool-call id.
const MaxIDBytes = 256

// Fault is a field that breaks a rule: Description is the rest of a
// sentence that starts with the field's name.
type Fault struct {
	Field       string
	Description string
}

func fault(field, format string, args ...any) *Fault {
	return &Fault{Field: field, Description: fmt.Sprintf(format, args...)}
}

// ID checks a client-chosen message or tool-call id: 1-256 bytes of UTF-8,
// no control characters (C0, DEL or C1).
func ID(field, id string) *Fault {
	if id == "" {
		return fault(field, "is empty")
	}
	if len(id) > MaxIDBytes {
		return fault(field, "is %d bytes, more than %d", len(id), MaxIDBytes)
	}
	// Invalid UTF-8 would only fail later, when the message is encoded
	// (protobuf strings are UTF-8), as an internal error.
	if !utf8.ValidString(id) {
		return fault(field, "is not valid UTF-8")
	}
	if i := strings.IndexFunc(id, unicode.IsControl); i >= 0 {
		return fault(field, "has a control character at byte %d", i)
	}
	return nil
}

// SyntheticKey is the metadata key (value "true") that marks a ROLE_TOOL
// result a load with close_open_tool_calls made up for a call left open. It
// is reserved: a message that carries it is refused, so that a made-up
// result is never stored as if a tool had answered.
const SyntheticKey = "sessiond.synthetic"

// IsSynthetic reports whether m is a result a load made up for an open call.
func IsSynthetic(m *sessiondv1.Message) bool {
	return m.GetRole() == sessiondv1.Role_ROLE_TOOL && m.GetMetadata()[SyntheticKey] == "true"
}

// OpenCalls applies msgs (field names the batch, e.g. "messages"), in
// order, to open, a session's open tool calls (ids in the order made), and
// returns the new list; open is not modified. An assistant message's tool
// calls open; a ROLE_TOOL message with a tool_call_id closes that open
// call. With strict set, a result that answers no open call, or a call
// whose id is already open, is a Fault naming its field; otherwise it is
// skipped (for messages stored before the rule).
func OpenCalls(open []string, field string, msgs []*sessiondv1.Message, strict bool) ([]string, *Fault) {
	out := slices.Clone(open)
	for i, m := range msgs {
		switch m.GetRole() {
		case sessiondv1.Role_ROLE_ASSISTANT:
			for j, tc := range m.GetToolCalls() {
				if !slices.Contains(out, tc.GetId()) {
					out = append(out, tc.GetId())
				} else if strict {
					return open, fault(fmt.Sprintf("%s[%d].tool_calls[%d].id", field, i, j),
						"%q is the id of a tool call that is still open; a session's open calls need distinct ids", Clip(tc.GetId()))
				}
			}
		case sessiondv1.Role_ROLE_TOOL:
			id := m.GetToolCallId()
			if id == "" {
				continue
			}
			if k := slices.Index(out, id); k >= 0 {
				out = slices.Delete(out, k, k+1)
			} else if strict {
				return open, fault(fmt.Sprintf("%s[%d].tool_call_id", field, i),
					"%q answers no open tool call: no earlier assistant message of the session made it, or another ROLE_TOOL message answered it", Clip(id))
			}
		}
	}
	return out, nil
}

// TouchesCalls says whether OpenCalls could refuse msgs or change the open
// calls: whether one of them is an assistant message that makes tool calls
// or a ROLE_TOOL message that names the call it answers.
func TouchesCalls(msgs []*sessiondv1.Message) bool {
	for _, m := range msgs {
		switch m.GetRole() {
		case sessiondv1.Role_ROLE_ASSISTANT:
			if len(m.GetToolCalls()) > 0 {
				return true
			}
		case sessiondv1.Role_ROLE_TOOL:
			if m.GetToolCallId() != "" {
				return true
			}
		}
	}
	return false
}

// Clip shortens a client's string for an error message.
func Clip(s string) string {
	const n = 32
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// MaxModelBytes is the longest model name.
const MaxModelBytes = 256

// Model checks a model name: empty, or at most MaxModelBytes of UTF-8
// without control characters.
func Model(field, model string) *Fault {
	if model == "" {
		return nil
	}
	return ID(field, model)
}

// Message checks one message (field names it, e.g. "messages[3]"): not
// null, only valid UTF-8 strings, and Fields' rules.
func Message(field string, m *sessiondv1.Message) *Fault {
	if m == nil {
		return fault(field, "is null")
	}
	// Protobuf strings must be UTF-8; refuse here what would otherwise
	// fail (or panic) later, inside an encoder.
	if f := UTF8(field, m); f != nil {
		return f
	}
	return Fields(field, m)
}

// UTF8 names the first string of m (field names m) that is not valid
// UTF-8, or returns nil. proto.Marshal refuses such a message without
// naming the field: a caller that marshals anyway may call this only when
// the marshal fails.
func UTF8(field string, m *sessiondv1.Message) *Fault {
	if path, bad := invalidUTF8(m.ProtoReflect()); bad {
		return fault(field+"."+path, "is not valid UTF-8")
	}
	return nil
}

// Fields checks a message that is not null (field names it) for what
// proto.Marshal does not check: a known role, a valid id when set, valid
// tool-call ids, a known state (open only for an assistant message), a
// valid created_at when set, a valid model name, no
// reserved metadata key, and usage counts that are not negative.
func Fields(field string, m *sessiondv1.Message) *Fault {
	if m.GetRole() == sessiondv1.Role_ROLE_UNSPECIFIED {
		return fault(field+".role", "is unspecified")
	}
	if _, ok := sessiondv1.Role_name[int32(m.GetRole())]; !ok {
		return fault(field+".role", "%d is not a known role", m.GetRole())
	}
	if _, ok := sessiondv1.MessageState_name[int32(m.GetState())]; !ok {
		return fault(field+".state", "%d is not a known message state", m.GetState())
	}
	if m.GetState() == sessiondv1.MessageState_MESSAGE_STATE_STREAMING && m.GetRole() != sessiondv1.Role_ROLE_ASSISTANT {
		return fault(field+".state", "is MESSAGE_STATE_STREAMING on a %s message; only an assistant message can be open", m.GetRole())
	}
	if id := m.GetId(); id != "" {
		if f := ID(field+".id", id); f != nil {
			return f
		}
	}
	for j, tc := range m.GetToolCalls() {
		if f := ID(fmt.Sprintf("%s.tool_calls[%d].id", field, j), tc.GetId()); f != nil {
			return f
		}
	}
	if f := Model(field+".model", m.GetModel()); f != nil {
		return f
	}
	if _, ok := m.GetMetadata()[SyntheticKey]; ok {
		return fault(fmt.Sprintf("%s.metadata[%q]", field, SyntheticKey), "is reserved for the tool results a load with close_open_tool_calls makes up; such a result is never stored")
	}
	if u := m.GetUsage(); u != nil {
		for _, c := range []struct {
			name string
			n    int64
		}{{"input_tokens", u.GetInputTokens()}, {"output_tokens", u.GetOutputTokens()},
			{"cached_input_tokens", u.GetCachedInputTokens()}, {"reasoning_tokens", u.GetReasoningTokens()}} {
			if c.n < 0 {
				return fault(field+".usage."+c.name, "is %d; a token count must not be negative", c.n)
			}
		}
	}
	if ts := m.GetCreatedAt(); ts != nil {
		if err := ts.CheckValid(); err != nil {
			return fault(field+".created_at", "is not a valid time: %v", err)
		}
	}
	return nil
}

// invalidUTF8 finds the first string (field, list element, map key or value,
// nested ones included) of m that is not valid UTF-8 and returns its path.
// Fields are visited in declaration order, without a closure per message
// (this runs on every message a daemon stores).
func invalidUTF8(m protoreflect.Message) (path string, bad bool) {
	fds := m.Descriptor().Fields()
	for i := range fds.Len() {
		fd := fds.Get(i)
		if !m.Has(fd) {
			continue
		}
		v := m.Get(fd)
		name := string(fd.Name())
		switch {
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				if p, ok := invalidUTF8Value(fd, l.Get(i)); ok {
					return fmt.Sprintf("%s[%d]%s", name, i, p), true
				}
			}
		case fd.IsMap():
			if p, ok := invalidUTF8Map(name, fd, v.Map()); ok {
				return p, true
			}
		default:
			if p, ok := invalidUTF8Value(fd, v); ok {
				return name + p, true
			}
		}
	}
	return "", false
}

// invalidUTF8Map is invalidUTF8 for the map field fd (named name), apart
// so that only a message with a map pays for the closure.
func invalidUTF8Map(name string, fd protoreflect.FieldDescriptor, m protoreflect.Map) (path string, bad bool) {
	m.Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
		if fd.MapKey().Kind() == protoreflect.StringKind && !utf8.ValidString(k.String()) {
			path, bad = name+" (a key)", true
			return false
		}
		if p, ok := invalidUTF8Value(fd.MapValue(), mv); ok {
			path, bad = fmt.Sprintf("%s[%q]%s", name, k.String(), p), true
			return false
		}
		return true
	})
	return path, bad
}

func invalidUTF8Value(fd protoreflect.FieldDescriptor, v protoreflect.Value) (string, bool) {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return "", !utf8.ValidString(v.String())
	case protoreflect.MessageKind, protoreflect.GroupKind:
		if p, bad := invalidUTF8(v.Message()); bad {
			return "." + p, true
		}
	}
	return "", false
}
