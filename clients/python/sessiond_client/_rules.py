"""The daemon's rules for the messages a handle takes (gen/msgcheck, as the
Go SDK applies them), so that a message the daemon would refuse fails when
it is appended, not in a background save."""

from __future__ import annotations

import unicodedata
from typing import Dict, List, Sequence

from sessiond.v1 import sessiond_pb2 as pb

from .errors import Invalid

# The daemon's limits on ids and model names.
MAX_ID_BYTES = 256
MAX_MODEL_BYTES = 256

#: The metadata key that marks a result a load made up for a tool call left
#: open (close_open_tool_calls); the daemon refuses to store such a message.
SYNTHETIC_KEY = "sessiond.synthetic"

_USAGE_FIELDS = ("input_tokens", "output_tokens", "cached_input_tokens", "reasoning_tokens")


def clip(s: str) -> str:
    """Shortens a caller's string for an error message, as the daemon does."""
    b = s.encode("utf-8", "surrogatepass")
    return s if len(b) <= 32 else b[:32].decode("utf-8", "ignore") + "..."


def check_id(op: str, field: str, value: str, max_bytes: int = MAX_ID_BYTES) -> None:
    """An id (or model name): 1-256 bytes of UTF-8 without a control
    character (C0, DEL or C1: Go's unicode.IsControl, category Cc)."""
    if not value:
        raise Invalid("%s: %s is empty" % (op, field))
    try:
        b = value.encode("utf-8")
    except UnicodeEncodeError:
        raise Invalid("%s: %s is not valid UTF-8" % (op, field)) from None
    if len(b) > max_bytes:
        raise Invalid("%s: %s is %d bytes, more than %d" % (op, field, len(b), max_bytes))
    for i, c in enumerate(value):
        if unicodedata.category(c) == "Cc":
            at = len(value[:i].encode("utf-8"))
            raise Invalid("%s: %s has a control character at byte %d" % (op, field, at))


def check_message(op: str, field: str, m: object) -> None:
    """One message's rules (msgcheck.Fields): a known role, a known state
    (open only on an assistant message), valid ids and model name, no
    reserved metadata key, no negative token count, a valid created_at."""
    if not isinstance(m, pb.Message):
        raise Invalid("%s: %s is a %s, not a sessiond.v1 Message" % (op, field, type(m).__name__))
    if m.role == pb.ROLE_UNSPECIFIED:
        raise Invalid("%s: %s.role is unspecified" % (op, field))
    if m.role not in pb.Role.values():
        raise Invalid("%s: %s.role %d is not a known role" % (op, field, m.role))
    if m.state not in pb.MessageState.values():
        raise Invalid("%s: %s.state %d is not a known message state" % (op, field, m.state))
    if m.state == pb.MESSAGE_STATE_STREAMING and m.role != pb.ROLE_ASSISTANT:
        raise Invalid("%s: %s.state is MESSAGE_STATE_STREAMING on a %s message; only an assistant message can be "
                      "open" % (op, field, pb.Role.Name(m.role)))
    if m.id:
        check_id(op, field + ".id", m.id)
    for j, tc in enumerate(m.tool_calls):
        check_id(op, "%s.tool_calls[%d].id" % (field, j), tc.id)
    if m.model:
        check_id(op, field + ".model", m.model, MAX_MODEL_BYTES)
    if SYNTHETIC_KEY in m.metadata:
        raise Invalid("%s: %s.metadata[%r] is reserved for the tool results a load with close_open_tool_calls "
                      "makes up; such a result is never stored" % (op, field, SYNTHETIC_KEY))
    if m.HasField("usage"):
        for name in _USAGE_FIELDS:
            if getattr(m.usage, name) < 0:
                raise Invalid("%s: %s.usage.%s is %d; a token count must not be negative"
                              % (op, field, name, getattr(m.usage, name)))
    if m.HasField("created_at"):
        ts = m.created_at
        # google.protobuf.Timestamp's valid range: 0001-01-01 to 9999-12-31.
        if not (-62135596800 <= ts.seconds <= 253402300799 and 0 <= ts.nanos <= 999_999_999):
            raise Invalid("%s: %s.created_at is not a valid time" % (op, field))


def is_synthetic(m: pb.Message) -> bool:
    return m.role == pb.ROLE_TOOL and m.metadata.get(SYNTHETIC_KEY) == "true"


def touches_calls(batch: Sequence[pb.Message]) -> bool:
    """Whether open_calls could refuse batch or change the open calls: one
    of its messages makes a tool call or names the call it answers."""
    return any(m.role == pb.ROLE_ASSISTANT and len(m.tool_calls) > 0 or m.role == pb.ROLE_TOOL and m.tool_call_id
               for m in batch)


def open_calls(messages: Sequence[pb.Message], batch: Sequence[pb.Message] = (), op: str = "") -> List[str]:
    """The tool calls of messages, then batch, that no later ROLE_TOOL
    message answers, in the order made (msgcheck.OpenCalls). In batch, the
    daemon's pairing rule applies: a result that answers no open call, or a
    call whose id is still open, raises Invalid naming the field."""
    open_: Dict[str, None] = {}
    for strict, msgs in ((False, messages), (True, batch)):
        for i, m in enumerate(msgs):
            if m.role == pb.ROLE_ASSISTANT:
                for j, tc in enumerate(m.tool_calls):
                    if tc.id not in open_:
                        open_[tc.id] = None
                    elif strict:
                        raise Invalid("%s: messages[%d].tool_calls[%d].id %r is the id of a tool call that is still "
                                      "open; a session's open calls need distinct ids" % (op, i, j, clip(tc.id)))
            elif m.role == pb.ROLE_TOOL and m.tool_call_id:
                if m.tool_call_id in open_:
                    del open_[m.tool_call_id]
                elif strict:
                    raise Invalid("%s: messages[%d].tool_call_id %r answers no open tool call: no earlier assistant "
                                  "message of the session made it, or another ROLE_TOOL message answered it"
                                  % (op, i, clip(m.tool_call_id)))
    return list(open_)
