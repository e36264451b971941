package storage

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sessiond/sessiond/gen/msgcheck"
	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// Usage counts the tokens of model calls (sessiond.v1.Usage).
type Usage struct {
	InputTokens       int64
	OutputTokens      int64
	CachedInputTokens int64
	ReasoningTokens   int64
}

// plus returns u + v, each count saturating at math.MaxInt64 (every count
// is validated non-negative, so a sum only overflows upwards).
func (u Usage) plus(v *sessiondv1.Usage) Usage {
	add := func(a, b int64) int64 {
		if b > math.MaxInt64-a {
			return math.MaxInt64
		}
		return a + b
	}
	return Usage{
		InputTokens:       add(u.InputTokens, v.GetInputTokens()),
		OutputTokens:      add(u.OutputTokens, v.GetOutputTokens()),
		CachedInputTokens: add(u.CachedInputTokens, v.GetCachedInputTokens()),
		ReasoningTokens:   add(u.ReasoningTokens, v.GetReasoningTokens()),
	}
}

// Tally is what a session's messages say about the session as a whole,
// kept with its metadata so that metadata answers need no message:
// the tool calls still open, the usage totals and the models used. Every
// backend derives it with the same two functions of this package: Count
// (or Recount) over a session's whole messages, and Tally.Add for an
// append. A Tally's slices are never modified in place: Add returns new
// ones, so copies of a Session may share them.
type Tally struct {
	// OpenToolCallIDs are the ids of the tool calls the session's assistant
	// messages made that no later ROLE_TOOL message answers, in the order
	// they were made.
	OpenToolCallIDs []string
	// Usage is the sum of every message's usage.
	Usage Usage
	// Models are the models the messages name, most recently used first,
	// each once.
	Models []string
	// OpenMessageID is the id of the session's open message
	// (MESSAGE_STATE_STREAMING), always its last message, or "" when none
	// is open. An open message's tool calls, usage and model count only
	// once it is closed (Close).
	OpenMessageID string
	// Unknown is set on a session stored by a version that kept no tally:
	// the fields above are empty, and a Driver recounts the messages
	// (Recount) before it writes to the session.
	Unknown bool
}

// SameTally reports whether a and b are equal.
func SameTally(a, b Tally) bool {
	return a.Usage == b.Usage && a.Unknown == b.Unknown && a.OpenMessageID == b.OpenMessageID &&
		slices.Equal(a.OpenToolCallIDs, b.OpenToolCallIDs) && slices.Equal(a.Models, b.Models)
}

// Count returns the tally of msgs as a session's whole messages (a create,
// a save), applying the pairing rule as Add does.
func Count(field string, msgs []*sessiondv1.Message) (Tally, error) {
	return Tally{}.Add(field, msgs)
}

// Recount returns the tally of messages already stored (a rewind or fork
// keeping some of them, a session stored before tallies were kept). It
// never fails: what is stored stays readable, so a ROLE_TOOL message that
// answers no open call is skipped rather than refused.
func Recount(msgs []*sessiondv1.Message) Tally { return Tally{}.AddStored(msgs) }

// AddStored is Add for messages already stored (a backend replaying its
// journal): it never fails, skipping what the pairing rule would refuse, as
// Recount does.
func (t Tally) AddStored(msgs []*sessiondv1.Message) Tally {
	out, _ := t.add("", msgs, false)
	return out
}

// Clone returns a copy of t that shares no slice with it.
func (t Tally) Clone() Tally {
	t.OpenToolCallIDs, t.Models = slices.Clone(t.OpenToolCallIDs), slices.Clone(t.Models)
	return t
}

// Add returns the tally after msgs are appended to a session whose tally is
// t; t is unchanged. It applies the pairing rule: a ROLE_TOOL message with
// a tool_call_id must answer a tool call that is open (made by an earlier
// assistant message of the session, or earlier in msgs, and answered by no
// other ROLE_TOOL message), else the batch is ErrInvalid naming
// field[i].tool_call_id; an assistant message may not make a tool call
// whose id is open already (field[i].tool_calls[j].id). A ROLE_TOOL
// message without a tool_call_id answers nothing and is allowed.
func (t Tally) Add(field string, msgs []*sessiondv1.Message) (Tally, error) {
	return t.add(field, msgs, true)
}

func (t Tally) add(field string, msgs []*sessiondv1.Message, strict bool) (Tally, error) {
	if len(msgs) == 0 {
		return t, nil
	}
	if strict && t.OpenMessageID != "" {
		return t, fmt.Errorf("message %q is open (MESSAGE_STATE_STREAMING): FinishMessage must close it before anything is appended: %w", msgcheck.Clip(t.OpenMessageID), ErrMessageState)
	}
	// Only the last message of a batch may be open; it counts once closed.
	t.OpenMessageID = ""
	for i, m := range msgs {
		if m.GetState() != sessiondv1.MessageState_MESSAGE_STATE_STREAMING {
			continue
		}
		if i < len(msgs)-1 {
			if strict {
				return t, Invalid(fmt.Sprintf("%s[%d].state", field, i), "is MESSAGE_STATE_STREAMING; only the last message of a session can be open")
			}
			continue
		}
		t.OpenMessageID = m.GetId()
		msgs = msgs[:i]
	}
	if !AffectsTally(msgs) {
		// Most appends: nothing to check or copy (t's slices are never
		// modified in place, so sharing them is safe).
		return t, nil
	}
	open, f := msgcheck.OpenCalls(t.OpenToolCallIDs, field, msgs, strict)
	if f != nil {
		return t, fromFault(f)
	}
	out := Tally{Usage: t.Usage, Unknown: t.Unknown, OpenMessageID: t.OpenMessageID}
	models := slices.Clone(t.Models)
	for _, m := range msgs {
		if u := m.GetUsage(); u != nil {
			out.Usage = out.Usage.plus(u)
		}
		if model := m.GetModel(); model != "" {
			if k := slices.Index(models, model); k >= 0 {
				models = slices.Delete(models, k, k+1)
			}
			models = slices.Insert(models, 0, model)
		}
	}
	if len(open) > 0 {
		out.OpenToolCallIDs = open
	}
	if len(models) > 0 {
		out.Models = models
	}
	return out, nil
}

// AffectsTally reports whether appending msgs can change a session's tally
// (or break the pairing rule): whether one makes a tool call, answers one,
// or names a model or usage. A backend may take a faster path for a batch
// that does not, leaving the tally as it is.
func AffectsTally(msgs []*sessiondv1.Message) bool {
	return slices.ContainsFunc(msgs, func(m *sessiondv1.Message) bool {
		return len(m.GetToolCalls()) > 0 || m.GetToolCallId() != "" || m.GetModel() != "" || m.GetUsage() != nil
	})
}

// SyntheticKey is the metadata key (value "true") that marks a ROLE_TOOL
// message a load with CloseOpenToolCalls made up for a call left open. It
// is reserved: a message that carries it is ErrInvalid, so such a message
// is never stored.
const SyntheticKey = msgcheck.SyntheticKey

// InterruptedContent is the content of a synthetic tool result.
const InterruptedContent = "The tool call was interrupted: no result was recorded, and the call may or may not have run."

// syntheticPrefix begins a synthetic result's id.
const syntheticPrefix = "sessiond-interrupted-"

// SyntheticResult returns the synthetic ROLE_TOOL result a load with
// CloseOpenToolCalls sends for the open tool call tc of the assistant
// message call. Its id is deterministic ("sessiond-interrupted-" and the
// call's id, or a hash of it when that would pass the id limit), so two
// loads send the same message; created_at is the assistant message's.
func SyntheticResult(call *sessiondv1.Message, tc *sessiondv1.ToolCall) *sessiondv1.Message {
	id := syntheticPrefix + tc.GetId()
	if len(id) > MaxMessageIDBytes {
		h := sha256.Sum256([]byte(tc.GetId()))
		id = syntheticPrefix + hex.EncodeToString(h[:16])
	}
	var at *timestamppb.Timestamp
	if call.GetCreatedAt() != nil {
		at = timestamppb.New(call.GetCreatedAt().AsTime())
	}
	return &sessiondv1.Message{
		Id:         id,
		Role:       sessiondv1.Role_ROLE_TOOL,
		Content:    InterruptedContent,
		ToolCallId: tc.GetId(),
		Name:       tc.GetName(),
		CreatedAt:  at,
		Metadata:   map[string]string{SyntheticKey: "true"},
	}
}

// toolCallCloser inserts synthetic results into a stream of stored
// messages (a load's window, in order) for the calls open in the session:
// the results for an assistant message's open calls come after the
// ROLE_TOOL messages that directly follow it in the window, just before the
// next other message or at the window's end. Calls made by an assistant
// message outside the window get none.
type toolCallCloser struct {
	open    map[string]bool
	pending []*sessiondv1.Message // synthetic results waiting for the end of a tool run
}

func newToolCallCloser(open []string) *toolCallCloser {
	c := &toolCallCloser{open: make(map[string]bool, len(open))}
	for _, id := range open {
		c.open[id] = true
	}
	return c
}

// next returns what to send for the stored message m: the pending
// synthetic results (when m ends a tool run), then m.
func (c *toolCallCloser) next(m *sessiondv1.Message, send func(*sessiondv1.Message) error) error {
	if m.GetRole() != sessiondv1.Role_ROLE_TOOL {
		if err := c.flush(send); err != nil {
			return err
		}
	} else if id := m.GetToolCallId(); id != "" {
		// A result in the run answers that call here: the open call with
		// this id is a later one, made again after this answer.
		for k, p := range c.pending {
			if p.GetToolCallId() == id {
				c.pending = slices.Delete(c.pending, k, k+1)
				c.open[id] = true
				break
			}
		}
	}
	if err := send(m); err != nil {
		return err
	}
	if m.GetRole() == sessiondv1.Role_ROLE_ASSISTANT {
		for _, tc := range m.GetToolCalls() {
			if c.open[tc.GetId()] {
				delete(c.open, tc.GetId()) // one result per call, even if an id came back later
				c.pending = append(c.pending, SyntheticResult(m, tc))
			}
		}
	}
	return nil
}

// flush sends the pending synthetic results.
func (c *toolCallCloser) flush(send func(*sessiondv1.Message) error) error {
	for _, p := range c.pending {
		if err := send(p); err != nil {
			return err
		}
	}
	c.pending = c.pending[:0]
	return nil
}

// Retention bounds.
const (
	// MinExpireAfter is the shortest idle TTL a session may carry.
	MinExpireAfter = time.Second
	// MaxExpireAfter is the longest: 100 years.
	MaxExpireAfter = 100 * 365 * 24 * time.Hour
)

// ValidateExpireAfter checks an idle TTL: 0 (none), or between
// MinExpireAfter and MaxExpireAfter.
func ValidateExpireAfter(field string, d time.Duration) error {
	if d == 0 {
		return nil
	}
	if d < MinExpireAfter || d > MaxExpireAfter {
		return Invalid(field, "is %v; an idle time to live is at least %v and at most %v (100 years), or unset for none", d, MinExpireAfter, MaxExpireAfter)
	}
	return nil
}

// MaxModelBytes is the longest model name.
const MaxModelBytes = msgcheck.MaxModelBytes

// ValidateModel checks a model name (a message's model, a listing's model
// filter): empty, or at most MaxModelBytes of UTF-8 without control
// characters.
func ValidateModel(field, model string) error { return fromFault(msgcheck.Model(field, model)) }
