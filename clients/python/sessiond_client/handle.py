"""The Handle: one open session that keeps its messages in memory and saves
what is new (explicitly, on a background thread, and on close)."""

from __future__ import annotations

import logging
import math
import os
import random
import threading
import time
import unicodedata
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple, Union

from google.protobuf import field_mask_pb2, timestamp_pb2
from sessiond.v1 import sessiond_pb2 as pb

from . import _spool
from ._ids import new_id as _new_handle_id
from .errors import Closed, Conflict, Invalid, SessiondError, SpoolError, retryable

if TYPE_CHECKING:
    from types import TracebackType

    from .client import Client

__all__ = ["Handle", "DEFAULT_AUTOSAVE", "DEFAULT_CLOSE_TIMEOUT"]

#: The auto-save period of ``autosave=True``, in seconds.
DEFAULT_AUTOSAVE = 300.0
#: How long ``close()`` retries when given no timeout, in seconds.
DEFAULT_CLOSE_TIMEOUT = 30.0

# Retry tuning, as in the Go SDK: an auto-save round tries a few times, then
# reports; the next round tries again.
_AUTOSAVE_ATTEMPTS = 5
_BACKOFF_BASE = 0.1
_BACKOFF_MAX = 2.0

# The daemon's limits on ids and model names (gen/msgcheck).
_MAX_ID_BYTES = 256
_MAX_MODEL_BYTES = 256


class _Stopped(Exception):
    """The auto-save thread was asked to stop while it waited to retry."""


@dataclass(eq=False)
class _Write:
    """One RPC of a save, built under the state lock and sent without it."""

    request: Union[pb.AppendMessagesRequest, pb.UpdateSessionRequest]
    expected: int
    # The batch's last message: once it is stored, so is every entry up to it.
    last: Optional[pb.Message] = None
    # The summary and metadata an update carries; each is no longer dirty
    # once saved unless a set_* changed it meanwhile.
    summary: Optional[str] = None
    metadata: Optional[Dict[str, str]] = field(default=None)


def _check_id(op: str, where: str, value: str, what: str = "id", max_bytes: int = _MAX_ID_BYTES) -> None:
    # An id (or model name): 1-256 bytes of UTF-8, no control character
    # (C0, DEL or C1), as the daemon's msgcheck.ID.
    if not value:
        raise Invalid("%s: %s is empty" % (op, where))
    try:
        n = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise Invalid("%s: %s is not valid UTF-8" % (op, where)) from None
    if n > max_bytes:
        raise Invalid("%s: %s is %d bytes, more than %d" % (op, where, n, max_bytes))
    for i, c in enumerate(value):
        if unicodedata.category(c) == "Cc":
            raise Invalid("%s: %s has a control character at character %d" % (op, where, i))


def _check_message(op: str, i: int, m: object) -> None:
    """The daemon's rules for one message (gen/msgcheck), so that a message
    it would refuse fails in append(), not in a background save."""
    where = "messages[%d]" % i
    if not isinstance(m, pb.Message):
        raise Invalid("%s: %s is a %s, not a sessiond.v1 Message" % (op, where, type(m).__name__))
    if m.role == pb.ROLE_UNSPECIFIED:
        raise Invalid("%s: %s.role is unspecified" % (op, where))
    if m.role not in pb.Role.values():
        raise Invalid("%s: %s.role %d is not a known role" % (op, where, m.role))
    if m.id:
        _check_id(op, where + ".id", m.id)
    for j, tc in enumerate(m.tool_calls):
        _check_id(op, "%s.tool_calls[%d].id" % (where, j), tc.id)
    if m.model:
        _check_id(op, where + ".model", m.model, max_bytes=_MAX_MODEL_BYTES)
    if SYNTHETIC_KEY in m.metadata:
        raise Invalid("%s: %s.metadata[%r] is reserved for the tool results a load with close_open_tool_calls "
                      "makes up; such a result is never stored" % (op, where, SYNTHETIC_KEY))
    if m.HasField("usage"):
        for name in ("input_tokens", "output_tokens", "cached_input_tokens", "reasoning_tokens"):
            if getattr(m.usage, name) < 0:
                raise Invalid("%s: %s.usage.%s is %d; a token count must not be negative"
                              % (op, where, name, getattr(m.usage, name)))
    if m.HasField("created_at"):
        ts = m.created_at
        # google.protobuf.Timestamp's valid range: 0001-01-01 to 9999-12-31.
        if not (-62135596800 <= ts.seconds <= 253402300799 and 0 <= ts.nanos <= 999_999_999):
            raise Invalid("%s: %s.created_at is not a valid time" % (op, where))


class Handle:
    """An open session: messages appended to it live in memory until a save
    (explicit, automatic, or in close) sends what is new with
    AppendMessages. Every method is safe to call from several threads.

    Made by :meth:`Client.open`, :meth:`Client.open_or_create` and
    :meth:`Client.new`, which pass these options on:

    ``autosave``
        seconds between background saves (True: every 5 minutes; None: off).
        A round runs only when something is unsaved; it tries a few times with
        backoff, then reports the failure to ``on_error``.
    ``idle_save``
        also save once this many seconds have passed without an append.
    ``on_error``
        receives the failures of auto-save, on the auto-save thread (default:
        logged as warnings). It must not call close().
    ``close_timeout``
        how long close() retries when given no timeout (default 30 s).
    ``spool_dir``
        keep unsaved changes in a spool file in this folder (the Go SDK's
        format: either SDK replays the other's files), fsync'd before append()
        returns, so that a program that quits or crashes while the daemon is
        down loses nothing; the next open of the session with the same folder
        sends them.

    Used as a context manager, the handle is closed (saved) on exit.
    """

    def __init__(
        self,
        client: "Client",
        session: pb.Session,
        messages: Sequence[pb.Message],
        *,
        autosave: Union[None, bool, float] = None,
        idle_save: Optional[float] = None,
        on_error: Optional[Callable[[SessiondError], None]] = None,
        close_timeout: float = DEFAULT_CLOSE_TIMEOUT,
        spool_dir: Optional[str] = None,
    ) -> None:
        if autosave is True:
            autosave = DEFAULT_AUTOSAVE
        self._c = client
        self._log: logging.Logger = client.log
        self._autosave: Optional[float] = float(autosave) if autosave else None
        self._idle_save = idle_save if idle_save and idle_save > 0 else None
        self._on_error = on_error
        self._close_timeout = close_timeout
        self._spool_dir = spool_dir

        # _close_mu serialises close() and the start and stop of the auto-save
        # thread. _save_mu serialises the handle's RPC sequences (saves,
        # reload) so that the stored prefix and the revision change in one
        # order; it is taken before _mu, never after. _mu guards the state.
        self._close_mu = threading.Lock()
        self._save_mu = threading.Lock()
        self._mu = threading.Lock()
        # An append has been sent (_save_mu guards it): later ones go over
        # the client's AppendStream.
        self._appended = False

        self._id = session.id
        self._alias = session.alias
        self._title = session.title
        self._summary = session.summary
        self._metadata: Dict[str, str] = dict(session.metadata)
        self._revision = session.revision
        # The synthetic results a load made up for tool calls left open
        # (close_open_tool_calls) are not stored and never sent: they live
        # in _synthetic, each with how many entries come before it, and
        # `messages` shows them there. A real result for the call drops
        # its synthetic one.
        entries, self._synthetic = _split_synthetic(messages)
        self._entries: List[pb.Message] = entries
        self._ids = {m.id for m in self._entries}
        # entries[:synced] are stored; a save sends what comes after.
        self._synced = len(self._entries)
        self._summary_dirty = False
        self._metadata_dirty = False
        # The final error that stopped auto-save (a conflict, a refusal); a
        # successful save() or reload() clears it.
        self._paused: Optional[SessiondError] = None
        self._closed = False
        self._spool_path = ""
        self._spooled = False
        if spool_dir:
            self._spool_path = os.path.join(
                spool_dir, _spool.prefix(client.namespace, self._id) + _new_handle_id() + _spool.EXT)

        self._thread: Optional[threading.Thread] = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._kicked = False
        with self._close_mu:
            self._start_loop()

    # -- what it holds -------------------------------------------------------

    @property
    def id(self) -> str:
        """The session's id: what resumes it."""
        return self._id

    @property
    def namespace(self) -> str:
        return self._c.namespace

    @property
    def alias(self) -> str:
        with self._mu:
            return self._alias

    @property
    def title(self) -> str:
        with self._mu:
            return self._title

    @property
    def summary(self) -> str:
        with self._mu:
            return self._summary

    @property
    def metadata(self) -> Dict[str, str]:
        with self._mu:
            return dict(self._metadata)

    @property
    def revision(self) -> int:
        """The session's revision as of the handle's last exchange with the daemon."""
        with self._mu:
            return self._revision

    @property
    def messages(self) -> List[pb.Message]:
        """Copies of the handle's messages: stored ones, then unsaved ones.
        A tool call left open when the session was loaded (the program
        stopped between the call and its result) is followed by the
        synthetic result the daemon made up for it (metadata
        "sessiond.synthetic": "true"), so that a model API accepts the
        history; saves never send it, and appending the real result
        replaces it."""
        with self._mu:
            out: List[pb.Message] = []
            syn, k = self._synthetic, 0
            for i, m in enumerate(self._entries):
                while k < len(syn) and syn[k][0] <= i:
                    out.append(_copy(syn[k][1]))
                    k += 1
                out.append(_copy(m))
            out.extend(_copy(m) for _, m in syn[k:])
            return out

    @property
    def open_tool_calls(self) -> List[str]:
        """The ids of the tool calls among the handle's messages that no
        ROLE_TOOL message answers yet, in the order they were made (a
        synthetic result answers nothing)."""
        with self._mu:
            return _open_calls(self._entries)

    @property
    def unsaved(self) -> int:
        """How many messages wait for a save."""
        with self._mu:
            return len(self._entries) - self._synced

    @property
    def dirty(self) -> bool:
        """Whether the handle has anything unsaved."""
        with self._mu:
            return self._dirty_locked()

    @property
    def spool_path(self) -> str:
        """The file that holds the unsaved changes (spool_dir), or "" when
        there is none."""
        with self._mu:
            return self._spool_path if self._spooled else ""

    def _dirty_locked(self) -> bool:
        return self._summary_dirty or self._metadata_dirty or self._synced < len(self._entries)

    # -- changes -------------------------------------------------------------

    def append(self, *messages: pb.Message) -> None:
        """Adds messages, in memory (and in the spool): each gets a UUID id
        unless it has one, and created_at unless set. The handle keeps copies.
        A message the daemon would refuse (no role, a bad id, a ROLE_TOOL
        result that answers no open tool call) or an id already in the
        handle raises Invalid, and then nothing is appended. A result for a
        call a resume closed with a synthetic result replaces that result."""
        add, ids = _prepare("append", messages)
        with self._mu:
            if self._closed:
                raise Closed("append: handle closed")
            for c in add:
                if c.id in self._ids:
                    raise Invalid("append: message id %r is already in the session" % c.id)
            _open_calls(self._entries, add, "append")
            n = len(self._entries)
            self._entries.extend(add)
            try:
                self._sync_spool_locked()
            except SpoolError:
                del self._entries[n:]
                raise
            self._ids.update(ids)
            self._drop_answered_locked(add)
            self._poke()

    def _drop_answered_locked(self, messages: Sequence[pb.Message]) -> None:
        # Drops the synthetic results of the calls that messages answer.
        answered = {m.tool_call_id for m in messages if m.role == pb.ROLE_TOOL and m.tool_call_id}
        if answered:
            self._synthetic = [(at, m) for at, m in self._synthetic if m.tool_call_id not in answered]

    def set_summary(self, summary: str) -> None:
        """Sets the session's summary; the next save sends it."""
        self._set_meta(summary=summary)

    def set_metadata(self, metadata: Mapping[str, str]) -> None:
        """Replaces the session's metadata; the next save sends it."""
        self._set_meta(metadata=dict(metadata))

    def _set_meta(self, summary: Optional[str] = None, metadata: Optional[Dict[str, str]] = None) -> None:
        with self._mu:
            if self._closed:
                raise Closed("set: handle closed")
            old = (self._summary, self._summary_dirty, self._metadata, self._metadata_dirty)
            if summary is not None:
                self._summary, self._summary_dirty = summary, True
            if metadata is not None:
                self._metadata, self._metadata_dirty = metadata, True
            try:
                self._sync_spool_locked()
            except SpoolError:
                self._summary, self._summary_dirty, self._metadata, self._metadata_dirty = old
                raise
            self._poke()

    def _poke(self) -> None:
        # Wakes the auto-save thread to restart its idle timer. _mu held.
        if self._idle_save:
            self._kicked = True
            self._wake.set()

    # -- saving --------------------------------------------------------------

    def save(self, timeout: Optional[float] = None) -> None:
        """Sends what the daemon does not have yet: new messages with
        AppendMessages, then a changed summary or metadata. Returns when the
        daemon has acknowledged. Nothing unsaved is dropped on failure; a later
        save sends it again, and the daemon stores only the messages it lacks.
        A session changed by another writer raises Conflict: reload(), then
        save()."""
        with self._save_mu:
            self._save_locked(False, _deadline(timeout))
            with self._mu:
                self._paused = None

    def _save_locked(self, close_when_clean: bool, deadline: Optional[float]) -> None:
        # Runs the writes the handle needs until everything present when it
        # was called is saved; with close_when_clean, until the handle is
        # clean, closing it in the critical section that finds nothing left.
        with self._mu:
            goal = self._entries[-1] if self._entries else None
            meta_goal = self._summary_dirty or self._metadata_dirty
        # The messages, the metadata and, after a lost answer, one catch-up;
        # close() allows for a few rounds of appends made meanwhile.
        passes = 64 if close_when_clean else 4
        for _ in range(passes):
            with self._mu:
                if self._closed:
                    raise Closed("save: handle closed")
                goal_saved = self._stored_locked(goal)
                if not close_when_clean and goal_saved and not meta_goal:
                    return
                w = self._next_write(meta_first=not close_when_clean and goal_saved)
                if w is None and close_when_clean:
                    self._closed = True
            if w is None:
                return
            self._send(w, deadline)
            if isinstance(w.request, pb.UpdateSessionRequest):
                meta_goal = False
        if close_when_clean:
            raise SessiondError("close: the handle kept changing")
        raise SessiondError("save %s: still unsaved after %d writes" % (self._id, passes))

    def _index_locked(self, m: pb.Message) -> int:
        # The index of the entry that is m (the object), or -1. _mu held.
        for i in range(len(self._entries) - 1, -1, -1):
            if self._entries[i] is m:
                return i
        return -1

    def _stored_locked(self, m: Optional[pb.Message]) -> bool:
        # Whether m is stored: no longer in the handle (a reload replaced
        # it) or among entries[:synced]. _mu held.
        if m is None:
            return True
        return self._index_locked(m) < self._synced

    def _next_write(self, meta_first: bool) -> Optional[_Write]:
        if meta_first:
            w = self._update_write()
            if w is not None:
                return w
        if self._synced < len(self._entries):
            batch = self._entries[self._synced:]
            req = pb.AppendMessagesRequest(ref=self._ref(), messages=batch, expected_revision=self._revision)
            return _Write(req, self._revision, last=batch[-1])
        return self._update_write()

    def _update_write(self) -> Optional[_Write]:
        if not self._summary_dirty and not self._metadata_dirty:
            return None
        req = pb.UpdateSessionRequest(ref=self._ref(), update_mask=field_mask_pb2.FieldMask(),
                                      expected_revision=self._revision)
        w = _Write(req, self._revision)
        if self._summary_dirty:
            req.session.summary = w.summary = self._summary
            req.update_mask.paths.append("summary")
        if self._metadata_dirty:
            w.metadata = dict(self._metadata)
            req.session.metadata.update(self._metadata)
            req.update_mask.paths.append("metadata")
        return w

    def _ref(self) -> pb.SessionRef:
        return pb.SessionRef(namespace=self._c.namespace, id=self._id)

    def _send(self, w: _Write, deadline: Optional[float]) -> None:
        # Performs one write and records its outcome. A conflict that the
        # handle's own earlier write explains (it landed, but its answer was
        # lost) is caught up with instead of raised.
        timeout = _remaining(deadline, self._c.timeout)
        session: Optional[pb.Session] = None
        try:
            if isinstance(w.request, pb.AppendMessagesRequest):
                # The first append is a unary call; later ones share the
                # client's AppendStream (a handle that writes once opens none).
                if self._appended:
                    rev = self._c.append_streamed(w.request, timeout=timeout).revision
                else:
                    self._appended = True
                    rev = self._c.append(w.request, timeout=timeout).revision
            else:
                session = self._c.update(w.request, timeout=timeout)
                rev = session.revision
        except Conflict:
            if self._catch_up(w, deadline):
                return
            raise
        with self._mu:
            # An answer beyond expected+1 means another writer changed the
            # session too: keep expected+1 so that the next write finds the
            # conflict instead of adopting a session the handle has not seen.
            self._revision = min(rev, w.expected + 1)
            if session is not None:
                self._alias, self._title = session.alias, session.title
            self._record_locked(w)
            self._refresh_spool_locked()

    def _record_locked(self, w: _Write) -> None:
        # Marks what w carried as saved. _mu held.
        if w.last is not None:
            i = self._index_locked(w.last)
            if i >= 0:
                self._synced = max(self._synced, i + 1)
        if w.summary is not None and self._summary == w.summary:
            self._summary_dirty = False
        if w.metadata is not None and self._metadata == w.metadata:
            self._metadata_dirty = False

    def _catch_up(self, w: _Write, deadline: Optional[float]) -> bool:
        # Answers a conflict on w: when the session is one write ahead of the
        # handle and that write is the handle's own (its unsaved messages, in
        # order, after those it knows stored, or the very summary and
        # metadata it has not seen saved), an earlier write landed without
        # its answer. The handle then takes that write as saved: True, and
        # the save goes on. Anything else is another writer's change.
        session, stored = self._c.load(id=self._id, timeout=_remaining(deadline, self._c.timeout))
        with self._mu:
            if session.revision != w.expected + 1 or self._revision != w.expected:
                return False
            saved = self._entries[:self._synced]
            if len(stored) < len(saved) or any(a.id != b.id for a, b in zip(stored, saved)):
                return False
            landed = stored[len(saved):]
            unsaved = self._entries[self._synced:]
            if landed:
                if len(landed) > len(unsaved) or any(a.id != b.id for a, b in zip(landed, unsaved)):
                    return False
            elif (not (self._summary_dirty or self._metadata_dirty)
                  or self._summary_dirty and session.summary != self._summary
                  or self._metadata_dirty and dict(session.metadata) != self._metadata):
                return False
            self._revision, self._alias, self._title = session.revision, session.alias, session.title
            if landed:
                self._record_locked(_Write(w.request, w.expected, last=unsaved[len(landed) - 1]))
            else:
                self._summary_dirty = self._metadata_dirty = False
            self._refresh_spool_locked()
            return True

    def _save_retry(self, close_when_clean: bool, deadline: Optional[float], attempts: int = 0) -> None:
        # Saves, retrying what may succeed later with exponential backoff and
        # jitter, until it succeeds, fails for good, the deadline passes, or
        # (attempts > 0) it has tried that many times. _save_mu held.
        delay = _BACKOFF_BASE
        n = 0
        while True:
            n += 1
            try:
                self._save_locked(close_when_clean, deadline)
                return
            except SessiondError as err:
                if not retryable(err) or (attempts and n >= attempts):
                    raise
                wait = min(delay, _BACKOFF_MAX) * random.uniform(0.5, 1.5)
                if deadline is not None and time.monotonic() + wait >= deadline:
                    raise
                self._log.debug("sessiond save of %s failed (attempt %d), retrying in %.2fs: %s",
                                self._id, n, wait, err)
                if close_when_clean:
                    time.sleep(wait)  # close() stopped the auto-save thread: _stop is set
                elif self._stop.wait(wait):
                    raise _Stopped() from err
                delay *= 2

    def reload(self) -> None:
        """Fetches the stored session and puts the handle's unsaved messages
        after its messages, to be appended by the next save: the answer to
        Conflict. Unsaved messages the daemon already holds (a save whose
        answer was lost) count as stored. An unsaved summary or metadata is
        kept."""
        with self._save_mu:
            with self._mu:
                if self._closed:
                    raise Closed("reload: handle closed")
            session, loaded = self._c.load(id=self._id, close_open_tool_calls=True)
            stored, synthetic = _split_synthetic(loaded)
            with self._mu:
                stored_ids = {m.id for m in stored}
                unsaved = [m for m in self._entries[self._synced:] if m.id not in stored_ids]
                self._entries = stored + unsaved
                self._synthetic = synthetic
                self._drop_answered_locked(unsaved)
                self._synced = len(stored)
                self._ids = {m.id for m in self._entries}
                self._revision, self._alias, self._title = session.revision, session.alias, session.title
                if not self._summary_dirty:
                    self._summary = session.summary
                if not self._metadata_dirty:
                    self._metadata = dict(session.metadata)
                self._paused = None
                self._refresh_spool_locked()

    # -- compaction ----------------------------------------------------------

    def compact(self, through_message_id: str, summary: pb.Message, timeout: Optional[float] = None) -> None:
        """Saves what is unsaved, then stores a compaction of the session
        (see :meth:`Client.compact`) at the revision the handle holds: a
        session changed by another writer since the handle last synced
        raises Conflict (reload(), then summarise again). The handle's
        messages stay whole; context_messages() loads what a model should
        see."""
        deadline = _deadline(timeout)
        with self._save_mu:
            self._save_locked(False, deadline)
            with self._mu:
                if self._closed:
                    raise Closed("compact: handle closed")
                expected = self._revision
            session = self._c.compact(id=self._id, through_message_id=through_message_id, summary=summary,
                                      expected_revision=expected,
                                      timeout=_remaining(deadline, self._c.timeout))
            with self._mu:
                # As after a save: an answer beyond expected+1 (a repeated
                # compaction answered with a session others changed since)
                # must not let the handle adopt changes it has not seen.
                self._revision = min(session.revision, expected + 1)

    def context_messages(self, timeout: Optional[float] = None) -> List[pb.Message]:
        """Saves what is unsaved, then loads the session's context view: the
        latest compaction's summary and the messages after its range (every
        message without a compaction), with a synthetic result closing each
        open tool call, as a model API wants them."""
        deadline = _deadline(timeout)
        with self._save_mu:
            self._save_locked(False, deadline)
            _, messages = self._c.load(id=self._id, close_open_tool_calls=True, view=pb.LOAD_VIEW_CONTEXT,
                                       timeout=_remaining(deadline, self._c.timeout))
            return messages

    # -- closing -------------------------------------------------------------

    def close(self, timeout: Optional[float] = None) -> None:
        """Stops auto-save, then saves what is left, retrying with backoff for
        up to ``timeout`` seconds (default: close_timeout). On success the
        handle is closed: later calls raise Closed and a second close() does
        nothing. If the save fails, close() raises its error and the handle
        stays open, auto-save included, its unsaved messages intact (and in
        the spool, with spool_dir)."""
        with self._close_mu:
            with self._mu:
                if self._closed:
                    return
            self._stop_loop()
            deadline = _deadline(timeout if timeout is not None else self._close_timeout)
            try:
                with self._save_mu:
                    self._save_retry(True, deadline)
            except BaseException:
                self._start_loop()
                raise

    def __enter__(self) -> "Handle":
        return self

    def __exit__(self, exc_type: Optional[type], exc: Optional[BaseException],
                 tb: "Optional[TracebackType]") -> None:
        if exc is None:
            self.close()
            return
        # Save on the way out of a failing block too, but let the block's
        # own error be the one that propagates.
        try:
            self.close()
        except SessiondError as err:
            self._log.warning("sessiond: close of %s failed while handling %r: %s", self._id, exc, err)

    # -- auto-save -----------------------------------------------------------

    def _start_loop(self) -> None:
        # _close_mu held.
        if not self._autosave and not self._idle_save:
            return
        self._stop.clear()
        self._wake.clear()
        self._thread = threading.Thread(target=self._loop, name="sessiond-autosave-" + self._id[:8], daemon=True)
        self._thread.start()

    def _stop_loop(self) -> None:
        # Stops the auto-save thread and waits for it, so that no auto-save
        # runs during or after the final save. _close_mu held.
        if self._thread is None:
            return
        self._stop.set()
        self._wake.set()
        self._thread.join()
        self._thread = None

    def _loop(self) -> None:
        now = time.monotonic()
        next_tick = now + self._autosave if self._autosave else math.inf
        idle_at = math.inf
        while True:
            wait = min(next_tick, idle_at) - time.monotonic()
            self._wake.wait(min(max(wait, 0.0), 3600.0))
            self._wake.clear()
            if self._stop.is_set():
                return
            now = time.monotonic()
            with self._mu:
                kicked, self._kicked = self._kicked, False
            if kicked and self._idle_save:
                idle_at = now + self._idle_save
            if now >= next_tick:
                next_tick = now + (self._autosave or math.inf)
                idle_at = math.inf
                self._auto_save()
            elif now >= idle_at:
                idle_at = math.inf
                self._auto_save()

    def _auto_save(self) -> None:
        # One auto-save round: a few attempts, then a report.
        with self._mu:
            if self._paused is not None or self._closed or not self._dirty_locked():
                return
        try:
            with self._save_mu:
                self._save_retry(False, None, attempts=_AUTOSAVE_ATTEMPTS)
            return
        except _Stopped:
            return  # close() saves next
        except SessiondError as err:
            if not retryable(err):
                # A conflict or a refusal does not go away by itself: pause
                # until the caller acts (reload, or a successful save).
                with self._mu:
                    self._paused = err
            if self._on_error is not None:
                try:
                    self._on_error(err)
                except Exception:
                    self._log.exception("sessiond: auto-save error callback failed")
                return
            self._log.warning("sessiond: auto-save of %s failed: %s", self._id, err)
        except Exception:
            self._log.exception("sessiond: auto-save of %s failed", self._id)

    # -- spool ---------------------------------------------------------------

    def _sync_spool_locked(self) -> None:
        # Makes the spool file hold what is unsaved, or removes it. _mu held.
        if not self._spool_path:
            return
        flags = 0
        sess = pb.Session(id=self._id, namespace=self._c.namespace, revision=self._revision,
                          messages=self._entries[self._synced:])
        if self._summary_dirty:
            flags |= _spool.SUMMARY
            sess.summary = self._summary
        if self._metadata_dirty:
            flags |= _spool.METADATA
            sess.metadata.update(self._metadata)
        try:
            if not sess.messages and not flags:
                if self._spooled:
                    _spool.remove_durably(self._spool_path)
                    self._spooled = False
                return
            _spool.write_atomic(self._spool_path, _spool.encode(_spool.SpoolState(sess, flags)))
        except (OSError, ValueError) as err:
            raise SpoolError("spool: write %s: %s" % (self._spool_path, err)) from err
        self._spooled = True

    def _refresh_spool_locked(self) -> None:
        # After a save or reload a failure leaves the file holding more than
        # is unsaved (what the next open skips), never less: logged only.
        try:
            self._sync_spool_locked()
        except SpoolError as err:
            self._log.warning("sessiond: spool of %s not updated: %s", self._id, err)

    def _replay_spools(self) -> None:
        # Takes in the spool files that earlier handles on this session (of
        # either SDK) left, records them in this handle's own spool, removes
        # them, and saves. Damaged files are renamed aside and reported after
        # the good ones are saved.
        if not self._spool_dir:
            return
        try:
            paths = _spool.files(self._spool_dir, self._c.namespace, self._id)
        except OSError as err:
            raise SpoolError("open %s: spool: %s" % (self._id, err)) from err
        if not paths:
            return
        problems: List[str] = []
        used: List[str] = []
        with self._save_mu:
            with self._mu:
                for p in paths:
                    if p == self._spool_path:
                        continue
                    try:
                        st = _spool.read(p)
                        if st.session.id != self._id or st.session.namespace != self._c.namespace:
                            raise _spool.Damaged("it holds session %r of namespace %r"
                                                 % (st.session.id, st.session.namespace))
                    except _spool.Damaged as err:
                        problems.append(_spool.quarantine(p, ".damaged", "damaged: %s" % err))
                        continue
                    except OSError as err:
                        problems.append("spool file %s: %s; left for a later open" % (p, err))
                        continue
                    if st.flags & _spool.REPLACE:
                        problems.append(_spool.quarantine(p, ".conflict", "conflict: it replaces the messages of "
                                                          "revision %d, which no save sends" % st.session.revision))
                        continue
                    self._take_spool_locked(st)
                    used.append(p)
                self._sync_spool_locked()
            for p in used:
                try:
                    _spool.remove_durably(p)
                except OSError as err:
                    # Left in place, it is sent again next time: a no-op then.
                    self._log.warning("sessiond: spool file %s not removed: %s", p, err)
            try:
                self._save_locked(False, None)
            except SessiondError as err:
                raise type(err)("open %s: send spooled messages (kept in %s): %s"
                                % (self._id, self._spool_path, err), err.code, err.details) from err
        if problems:
            raise SpoolError("open %s: %s" % (self._id, "; ".join(problems)))

    def _take_spool_locked(self, st: _spool.SpoolState) -> None:
        # Adds a spool file's contents as unsaved changes; messages the
        # handle holds already (by id) are left out. _mu held.
        for m in st.session.messages:
            if m.id in self._ids:
                continue
            self._entries.append(m)
            self._ids.add(m.id)
        self._drop_answered_locked(st.session.messages)
        if st.flags & _spool.SUMMARY:
            self._summary, self._summary_dirty = st.session.summary, True
        if st.flags & _spool.METADATA:
            self._metadata, self._metadata_dirty = dict(st.session.metadata), True


def _prepare(op: str, messages: Sequence[pb.Message]) -> Tuple[List[pb.Message], Set[str]]:
    # Copies messages for append, giving each an id and
    # created_at where missing; returns the copies and their ids.
    now = _now()
    out: List[pb.Message] = []
    ids: Set[str] = set()
    for i, m in enumerate(messages):
        _check_message(op, i, m)
        c = _copy(m)
        if not c.id:
            c.id = _new_handle_id()
        if not c.HasField("created_at"):
            c.created_at.CopyFrom(now)
        if c.id in ids:
            raise Invalid("%s: message id %r repeats" % (op, c.id))
        ids.add(c.id)
        out.append(c)
    return out, ids


#: The metadata key that marks a result a load made up for a tool call left
#: open (close_open_tool_calls); the daemon refuses to store such a message.
SYNTHETIC_KEY = "sessiond.synthetic"


def _is_synthetic(m: pb.Message) -> bool:
    return m.role == pb.ROLE_TOOL and m.metadata.get(SYNTHETIC_KEY) == "true"


def _split_synthetic(messages: Sequence[pb.Message]) -> Tuple[List[pb.Message], List[Tuple[int, pb.Message]]]:
    # Separates the synthetic results from the other messages: each with
    # how many of the others come before it.
    kept: List[pb.Message] = []
    synthetic: List[Tuple[int, pb.Message]] = []
    for m in messages:
        if _is_synthetic(m):
            synthetic.append((len(kept), _copy(m)))
        else:
            kept.append(m)
    return kept, synthetic


def _open_calls(messages: Sequence[pb.Message], batch: Sequence[pb.Message] = (), op: str = "") -> List[str]:
    # The tool calls of messages, then batch, that no later ROLE_TOOL message
    # answers, in the order made. In batch, as the daemon's pairing rule
    # (msgcheck.OpenCalls, strict), a result that answers no open call or a
    # call whose id is still open raises Invalid naming the field.
    open_: Dict[str, None] = {}
    for strict, msgs in ((False, messages), (True, batch)):
        for i, m in enumerate(msgs):
            if m.role == pb.ROLE_ASSISTANT:
                for j, tc in enumerate(m.tool_calls):
                    if tc.id in open_ and strict:
                        raise Invalid("%s: messages[%d].tool_calls[%d].id %r is the id of a tool call that is still "
                                      "open; a session's open calls need distinct ids" % (op, i, j, tc.id))
                    open_[tc.id] = None
            elif m.role == pb.ROLE_TOOL and m.tool_call_id:
                if m.tool_call_id in open_:
                    del open_[m.tool_call_id]
                elif strict:
                    raise Invalid("%s: messages[%d].tool_call_id %r answers no open tool call: no earlier assistant "
                                  "message of the session made it, or another ROLE_TOOL message answered it"
                                  % (op, i, m.tool_call_id))
    return list(open_)


def _copy(m: pb.Message) -> pb.Message:
    c = pb.Message()
    c.CopyFrom(m)
    return c


def _now() -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.GetCurrentTime()
    return ts


def _deadline(timeout: Optional[float]) -> Optional[float]:
    return None if timeout is None else time.monotonic() + timeout


def _remaining(deadline: Optional[float], default: float) -> float:
    if deadline is None:
        return default
    return max(0.001, min(default, deadline - time.monotonic()))
