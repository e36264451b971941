"""The Handle: one open session that keeps its messages in memory and saves
what is new (explicitly, on a background thread, and on close)."""

from __future__ import annotations

import logging
import math
import os
import random
import threading
import time
from typing import TYPE_CHECKING, Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple, Union

from google.protobuf import field_mask_pb2, timestamp_pb2
from sessiond.v1 import sessiond_pb2 as pb

from . import _spool
from ._ids import new_id
from ._rules import SYNTHETIC_KEY, check_message, is_synthetic, open_calls, touches_calls
from .errors import Closed, Conflict, Invalid, SessiondError, SpoolError, retryable
from .live import Turn

if TYPE_CHECKING:
    from types import TracebackType

    from .client import Client

__all__ = ["Handle", "DEFAULT_AUTOSAVE", "DEFAULT_CLOSE_TIMEOUT", "SYNTHETIC_KEY"]

#: The auto-save period of ``autosave=True``, in seconds.
DEFAULT_AUTOSAVE = 300.0
#: How long ``close()`` retries when given no timeout, in seconds.
DEFAULT_CLOSE_TIMEOUT = 30.0

# Retry tuning, as in the Go SDK: an auto-save round tries a few times, then
# reports; the next round tries again.
_AUTOSAVE_ATTEMPTS = 5
_BACKOFF_BASE = 0.1
_BACKOFF_MAX = 2.0


class _Stopped(Exception):
    """The auto-save thread was asked to stop while it waited to retry."""


class Handle:
    """An open session: messages appended to it live in memory until a save
    (explicit, automatic, or in close) sends what is new with
    AppendMessages. Every method is safe to call from several threads.

    Saving needs no bookkeeping of what may have landed: a save sends the
    unsaved messages with their ids, and the daemon stores only those it
    does not hold yet. A write whose answer was lost is sent again as it
    was, before anything appended since, so that its retry is a no-op.

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
        # reload, opening a turn), so that entries change only by growing
        # while one runs; it is taken before _mu, never after. _mu guards the
        # state.
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
        # The messages as loaded, then those appended since. The synthetic
        # results a load made up for tool calls left open
        # (close_open_tool_calls) sit among the stored ones, where `messages`
        # shows them; they answer no call, and a real result for the call
        # drops its synthetic one.
        self._entries: List[pb.Message] = list(messages)
        self._ids = {m.id for m in self._entries}
        # entries[:synced] are stored (or synthetic); a save sends what comes
        # after.
        self._synced = len(self._entries)
        # How many unsaved messages (from synced on) the last append carried
        # when its outcome is unknown (it may have landed): the next save
        # sends exactly those first, a no-op if they did land.
        self._uncertain = 0
        self._summary_dirty = False
        self._metadata_dirty = False
        # The id of the live turn this handle opened, until it ends: appends
        # wait for it, as the daemon's do.
        self._turn_id = ""
        # The final error that stopped auto-save (a conflict, a refusal); a
        # successful save() or reload() clears it.
        self._paused: Optional[SessiondError] = None
        self._closed = False
        self._spool_path = ""
        self._spooled = False
        if spool_dir:
            self._spool_path = os.path.join(spool_dir, _spool.prefix(client.namespace, self._id) + new_id() + _spool.EXT)

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
        replaces it. A live turn's message joins them when it finishes."""
        with self._mu:
            return [_copy(m) for m in self._entries]

    @property
    def open_tool_calls(self) -> List[str]:
        """The ids of the tool calls among the handle's messages that no
        ROLE_TOOL message answers yet, in the order they were made (a
        synthetic result answers nothing)."""
        with self._mu:
            return open_calls(_answerable(self._entries))

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
        result that answers no open tool call, a tool call whose id is still
        open), an open message (use stream_turn()) or an id already in the
        handle raises Invalid, and then nothing is appended; so does any
        append while a live turn of this handle is open (Conflict). A result
        for a call a resume closed with a synthetic result replaces that
        result."""
        add, ids = _prepare("append", messages)
        with self._mu:
            if self._closed:
                raise Closed("append: handle closed")
            if self._turn_id:
                raise Conflict("append: the live turn %r is open; finish it first" % self._turn_id)
            for c in add:
                if c.id in self._ids:
                    raise Invalid("append: message id %r is already in the session" % c.id)
            # A turn of plain text skips the walk of every message.
            if touches_calls(add):
                open_calls(_answerable(self._entries), add, "append")
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
        if not answered:
            return
        kept, synced = [], self._synced
        for i, m in enumerate(self._entries):
            if is_synthetic(m) and m.tool_call_id in answered:
                self._ids.discard(m.id)
                if i < synced:
                    self._synced -= 1
            else:
                kept.append(m)
        self._entries = kept

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
            self._save_locked(_deadline(timeout))
            with self._mu:
                self._paused = None

    def _save_locked(self, deadline: Optional[float], close: bool = False) -> None:
        # Sends writes until what was unsaved when it was called is saved;
        # with close, until the handle is clean, closing it in the critical
        # section that finds it so. _save_mu held.
        with self._mu:
            pending = len(self._entries) - self._synced
            meta = self._summary_dirty or self._metadata_dirty
        while True:
            with self._mu:
                if self._closed:
                    raise Closed("save: handle closed")
                if self._synced < len(self._entries) and (close or pending > 0):
                    n = self._uncertain or len(self._entries) - self._synced
                    req: Union[pb.AppendMessagesRequest, pb.UpdateSessionRequest] = pb.AppendMessagesRequest(
                        ref=self._ref(), messages=self._entries[self._synced:self._synced + n],
                        expected_revision=self._revision)
                elif (close or meta) and (self._summary_dirty or self._metadata_dirty):
                    req = self._update_request_locked()
                else:
                    if close:
                        self._closed = True
                    return
            if isinstance(req, pb.AppendMessagesRequest):
                self._send_append(req, deadline)
                pending -= len(req.messages)
            else:
                self._send_update(req, deadline)
                meta = False

    def _ref(self) -> pb.SessionRef:
        return pb.SessionRef(namespace=self._c.namespace, id=self._id)

    def _send_append(self, req: pb.AppendMessagesRequest, deadline: Optional[float]) -> None:
        timeout = _remaining(deadline, self._c.timeout)
        try:
            # The first append is a unary call; later ones share the
            # client's AppendStream (a handle that writes once opens none).
            if self._appended:
                resp = self._c.append_streamed(req, timeout=timeout)
            else:
                self._appended = True
                resp = self._c.append(req, timeout=timeout)
        except SessiondError as err:
            if retryable(err):
                with self._mu:
                    self._uncertain = len(req.messages)
            raise
        with self._mu:
            self._synced += len(req.messages)
            self._uncertain = 0
            self._revision = _own_revision(resp.revision, req.expected_revision)
            self._refresh_spool_locked()

    def _update_request_locked(self) -> pb.UpdateSessionRequest:
        req = pb.UpdateSessionRequest(ref=self._ref(), update_mask=field_mask_pb2.FieldMask(),
                                      expected_revision=self._revision)
        if self._summary_dirty:
            req.session.summary = self._summary
            req.update_mask.paths.append("summary")
        if self._metadata_dirty:
            req.session.metadata.update(self._metadata)
            req.update_mask.paths.append("metadata")
        return req

    def _send_update(self, req: pb.UpdateSessionRequest, deadline: Optional[float]) -> None:
        # The retry of an update that landed changes nothing, which the
        # daemon answers as a no-op whatever revision it expects.
        session = self._c.update(req, timeout=_remaining(deadline, self._c.timeout))
        with self._mu:
            self._revision = _own_revision(session.revision, req.expected_revision)
            self._alias, self._title = session.alias, session.title
            if "summary" in req.update_mask.paths and self._summary == req.session.summary:
                self._summary_dirty = False
            if "metadata" in req.update_mask.paths and self._metadata == dict(req.session.metadata):
                self._metadata_dirty = False
            self._refresh_spool_locked()

    def _save_retry(self, deadline: Optional[float], attempts: int = 0, close: bool = False) -> None:
        # Saves, retrying what may succeed later with exponential backoff and
        # jitter, until it succeeds, fails for good, the deadline passes, or
        # (attempts > 0) it has tried that many times. _save_mu held.
        delay = _BACKOFF_BASE
        n = 0
        while True:
            n += 1
            try:
                self._save_locked(deadline, close)
                return
            except SessiondError as err:
                if not retryable(err) or (attempts and n >= attempts):
                    raise
                wait = min(delay, _BACKOFF_MAX) * random.uniform(0.5, 1.5)
                if deadline is not None and time.monotonic() + wait >= deadline:
                    raise
                self._log.debug("sessiond save of %s failed (attempt %d), retrying in %.2fs: %s",
                                self._id, n, wait, err)
                if close:
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
            session, stored = self._c.load(id=self._id, close_open_tool_calls=True)
            with self._mu:
                stored_ids = {m.id for m in stored}
                unsaved = [m for m in self._entries[self._synced:] if m.id not in stored_ids]
                self._entries = stored + unsaved
                self._synced = len(stored)
                self._ids = {m.id for m in self._entries}
                self._drop_answered_locked(unsaved)
                self._uncertain = 0
                self._revision, self._alias, self._title = session.revision, session.alias, session.title
                if not self._summary_dirty:
                    self._summary = session.summary
                if not self._metadata_dirty:
                    self._metadata = dict(session.metadata)
                if self._turn_id and not (stored and stored[-1].id == self._turn_id
                                          and stored[-1].state == pb.MESSAGE_STATE_STREAMING):
                    self._turn_id = ""  # the daemon closed it: interrupted
                self._paused = None
                self._refresh_spool_locked()

    # -- live turns ----------------------------------------------------------

    def stream_turn(self, message: Optional[pb.Message] = None, timeout: Optional[float] = None) -> Turn:
        """Saves what is unsaved, then opens a live turn in the session: an
        assistant message (``message``, copied, or an empty one) stored open
        (MESSAGE_STATE_STREAMING) at once, that the returned :class:`Turn`
        writes a model's answer into as it streams, and finishes. Until the
        turn ends, append() raises Conflict; when it finishes, the message
        as stored joins the handle's messages. A session changed by another
        writer raises Conflict, as a save does. If the program dies first,
        the daemon closes the message as interrupted, and the next open
        finds it so."""
        m = _copy(message) if message is not None else pb.Message()
        if m.role == pb.ROLE_UNSPECIFIED:
            m.role = pb.ROLE_ASSISTANT
        m.state = pb.MESSAGE_STATE_STREAMING
        check_message("stream_turn", "message", m)
        if not m.id:
            m.id = new_id()
        if not m.HasField("created_at"):
            m.created_at.CopyFrom(_now())
        deadline = _deadline(timeout)
        with self._save_mu:
            # The open message must be the session's last.
            self._save_locked(deadline)
            with self._mu:
                if self._closed:
                    raise Closed("stream_turn: handle closed")
                if self._turn_id:
                    raise Conflict("stream_turn: the live turn %r is open; finish it first" % self._turn_id)
                if m.id in self._ids:
                    raise Invalid("stream_turn: message id %r is already in the session" % m.id)
                expected = self._revision
            turn = self._c.open_turn(id=self._id, message=m, expected_revision=expected,
                                     timeout=_remaining(deadline, self._c.timeout))
            turn._on_finish = self._turn_ended
            with self._mu:
                self._revision = _own_revision(turn.revision, expected)
                self._turn_id = m.id
            return turn

    def _turn_ended(self, message_id: str, message: Optional[pb.Message], revision: int) -> None:
        # The turn's message is closed: finished (message is it as stored,
        # revision the finish's), or closed by the daemon (None: a reload
        # shows it interrupted).
        with self._mu:
            if message_id != self._turn_id:
                return
            self._turn_id = ""
            if message is None:
                return
            # While the message was open no other writer could append, so
            # the finish's revision follows the handle's own writes.
            self._revision = revision
            m = _copy(message)
            for i, e in enumerate(self._entries):
                if e.id == m.id:  # a reload met it open
                    self._entries[i] = m
                    return
            self._entries.insert(self._synced, m)
            self._synced += 1
            self._ids.add(m.id)

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
            self._save_locked(deadline)
            with self._mu:
                if self._closed:
                    raise Closed("compact: handle closed")
                expected = self._revision
            session = self._c.compact(id=self._id, through_message_id=through_message_id, summary=summary,
                                      expected_revision=expected,
                                      timeout=_remaining(deadline, self._c.timeout))
            with self._mu:
                self._revision = _own_revision(session.revision, expected)

    def context_messages(self, timeout: Optional[float] = None) -> List[pb.Message]:
        """Saves what is unsaved, then loads the session's context view: the
        latest compaction's summary and the messages after its range (every
        message without a compaction), with a synthetic result closing each
        open tool call, as a model API wants them."""
        deadline = _deadline(timeout)
        with self._save_mu:
            self._save_locked(deadline)
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
        the spool, with spool_dir). A live turn left open stays open: finish
        it first, or the daemon closes it as interrupted."""
        with self._close_mu:
            with self._mu:
                if self._closed:
                    return
            self._stop_loop()
            deadline = _deadline(timeout if timeout is not None else self._close_timeout)
            try:
                with self._save_mu:
                    self._save_retry(deadline, close=True)
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
                self._save_retry(None, attempts=_AUTOSAVE_ATTEMPTS)
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
                self._save_locked(None)
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


def _own_revision(answered: int, expected: int) -> int:
    # The revision a handle takes from the answer to its write at expected.
    # Beyond expected+1, another writer changed the session too (a retried
    # write answers the current revision): the handle keeps expected+1 so
    # that its next write finds the conflict instead of adopting changes it
    # has not seen.
    return min(answered, expected + 1)


def _prepare(op: str, messages: Sequence[pb.Message]) -> Tuple[List[pb.Message], Set[str]]:
    # Copies messages for append, giving each an id and
    # created_at where missing; returns the copies and their ids.
    now = _now()
    out: List[pb.Message] = []
    ids: Set[str] = set()
    for i, m in enumerate(messages):
        check_message(op, "messages[%d]" % i, m)
        if m.state == pb.MESSAGE_STATE_STREAMING:
            raise Invalid("%s: messages[%d].state is MESSAGE_STATE_STREAMING; open a live turn with stream_turn()"
                          % (op, i))
        c = _copy(m)
        if not c.id:
            c.id = new_id()
        if not c.HasField("created_at"):
            c.created_at.CopyFrom(now)
        if c.id in ids:
            raise Invalid("%s: message id %r repeats" % (op, c.id))
        ids.add(c.id)
        out.append(c)
    return out, ids


def _answerable(messages: Sequence[pb.Message]) -> List[pb.Message]:
    # The messages that count for tool-call pairing: all but the synthetic
    # results, which answer no call.
    return [m for m in messages if not is_synthetic(m)]


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
