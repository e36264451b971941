"""Live turns: a model's answer written into a session as it streams."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Callable, Iterable, Optional

from sessiond.v1 import sessiond_pb2 as pb

from .errors import MessageState

if TYPE_CHECKING:
    from .client import Client

__all__ = ["Turn"]


class Turn:
    """A live turn: an open assistant message (MESSAGE_STATE_STREAMING) that
    a model's answer is written into as it streams, each piece stored
    durably when its write returns, so that a crash of the program, or of
    the daemon, loses nothing acknowledged and any client can follow the
    turn by watching the session. :meth:`finish` closes it; if the program
    dies first, the daemon closes it as MESSAGE_STATE_INTERRUPTED after its
    --stream-idle-timeout, keeping the text. A session holds one open
    message at a time, as its last: appends to it fail until it is finished.

    Made by :meth:`Client.open_turn`, :meth:`Client.resume_turn` and
    :meth:`Handle.stream_turn`. Safe to share between threads; writes are
    applied in the order they are made.

    Every write is safe to retry after Unavailable: a delta carries the byte
    offset it starts at, and the offset moves only when the daemon answers,
    so writing the same text again after a failure adds it once.
    """

    def __init__(self, client: "Client", ref: pb.SessionRef, message_id: str, length: int,
                 reasoning_length: int, revision: int) -> None:
        self._c = client
        self._ref = ref
        self._id = message_id
        self._mu = threading.Lock()  # guards below, and orders writes
        self._length = length
        self._reasoning_length = reasoning_length
        self._revision = revision
        self._done = False
        # Set by a Handle that opened the turn: told once the message is no
        # longer open, with its id, the message as stored (None when the
        # daemon had closed it) and the revision; called with _mu held.
        self._on_finish: Optional[Callable[[str, Optional[pb.Message], int], None]] = None

    @property
    def id(self) -> str:
        """The open message's id."""
        return self._id

    @property
    def length(self) -> int:
        """How many bytes (UTF-8) of content are stored: the next offset."""
        with self._mu:
            return self._length

    @property
    def revision(self) -> int:
        """The session's revision after the turn's last write."""
        with self._mu:
            return self._revision

    @property
    def done(self) -> bool:
        """Whether the message is closed: finish() returned, or raised
        MessageState (the daemon had closed it)."""
        with self._mu:
            return self._done

    def write(self, text: str, timeout: Optional[float] = None) -> None:
        """Adds text to the message's content, durably."""
        self._delta(pb.AppendDeltaRequest(content=text), timeout)

    def write_reasoning(self, text: str, timeout: Optional[float] = None) -> None:
        """Adds text to the message's reasoning, durably."""
        self._delta(pb.AppendDeltaRequest(reasoning=text), timeout)

    def set_usage(self, usage: pb.Usage, timeout: Optional[float] = None) -> None:
        """Stores the usage so far, replacing the message's."""
        self._delta(pb.AppendDeltaRequest(usage=usage), timeout)

    def _delta(self, req: pb.AppendDeltaRequest, timeout: Optional[float]) -> None:
        with self._mu:
            req.ref.CopyFrom(self._ref)
            req.message_id, req.offset, req.reasoning_offset = self._id, self._length, self._reasoning_length
            resp = self._c._call("AppendDelta", self._c.rpc.AppendDelta, req, timeout)
            self._length, self._reasoning_length, self._revision = resp.length, resp.reasoning_length, resp.revision

    def finish(self, *, tool_calls: Iterable[pb.ToolCall] = (), usage: Optional[pb.Usage] = None, model: str = "",
               interrupted: bool = False, timeout: Optional[float] = None) -> pb.Message:
        """Closes the message as MESSAGE_STATE_COMPLETE, or with
        ``interrupted`` as MESSAGE_STATE_INTERRUPTED (the answer was cut
        short: a user's Ctrl-C, a model stream that failed), and returns it
        as stored. The fields given replace the message's: ``tool_calls``
        the answer ends with (open until ROLE_TOOL results answer them),
        ``usage`` and ``model``. A retry after it landed, with the same
        fields, succeeds. A message that is no longer open (the daemon
        interrupted it) raises MessageState, except for an interrupt, which
        returns it as stored."""
        state = pb.MESSAGE_STATE_INTERRUPTED if interrupted else pb.MESSAGE_STATE_COMPLETE
        req = pb.FinishMessageRequest(ref=self._ref, message_id=self._id, tool_calls=list(tool_calls),
                                      usage=usage, model=model, state=state)
        with self._mu:
            try:
                resp = self._c._call("FinishMessage", self._c.rpc.FinishMessage, req, timeout)
            except MessageState:
                self._end_locked(None)
                raise
            self._revision = resp.revision
            self._end_locked(resp.message)
            return resp.message

    def _end_locked(self, message: Optional[pb.Message]) -> None:
        if not self._done:
            self._done = True
            if self._on_finish is not None:
                self._on_finish(self._id, message, self._revision)
