"""The Client: one gRPC channel to sessiond, its token and TLS settings, and
thin wrappers of the RPCs a Handle needs."""

from __future__ import annotations

import ipaddress
import logging
import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, TypeVar, Union

import grpc
from sessiond.v1 import sessiond_pb2 as pb
from sessiond.v1 import sessiond_pb2_grpc as pb_grpc

from ._ids import new_id
from ._stream import AppendStream, Unsupported
from .errors import AliasInUse, Closed, Invalid, MessageState, NotFound, SessiondError, from_rpc_error
from .live import Turn

if TYPE_CHECKING:
    from .handle import Handle

__all__ = ["Client", "TLS", "TOKEN_ENV", "new_id"]

#: The environment variable Client reads the token from when none is given.
TOKEN_ENV = "SESSIOND_TOKEN"

#: The deadline of one RPC when Client is given none.
DEFAULT_TIMEOUT = 30.0

# SaveSession sends messages in frames of about this many bytes.
_SAVE_FRAME_BYTES = 1 << 20

T = TypeVar("T")


@dataclass(frozen=True)
class TLS:
    """TLS settings: ``ca_file`` is a PEM file of the CAs that sign the
    daemon's certificate (None: the system's roots), ``cert_file`` and
    ``key_file`` a PEM client certificate and key for mutual TLS (None: none),
    ``server_name`` overrides the name the certificate must carry."""

    ca_file: Optional[str] = None
    cert_file: Optional[str] = None
    key_file: Optional[str] = None
    server_name: Optional[str] = None

    def credentials(self) -> grpc.ChannelCredentials:
        def read(path: Optional[str], what: str) -> Optional[bytes]:
            if path is None:
                return None
            try:
                with open(path, "rb") as f:
                    return f.read()
            except OSError as err:
                raise Invalid("TLS %s %s: %s" % (what, path, err)) from err

        if (self.cert_file is None) != (self.key_file is None):
            raise Invalid("a TLS client certificate needs both cert_file and key_file")
        return grpc.ssl_channel_credentials(
            root_certificates=read(self.ca_file, "CA file"),
            private_key=read(self.key_file, "key file"),
            certificate_chain=read(self.cert_file, "certificate file"),
        )


def _local_addr(addr: str) -> bool:
    """Whether a sessiond address stays on this machine: a unix socket,
    localhost, or a loopback IP."""
    if addr.startswith(("unix:", "unix-abstract:")):
        return True
    for p in ("dns:///", "passthrough:///", "ipv4:", "ipv6:"):
        if addr.startswith(p):
            addr = addr[len(p):]
    host = addr
    if addr.startswith("["):
        host = addr[1:].split("]", 1)[0]
    elif addr.count(":") == 1:
        host = addr.split(":", 1)[0]
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Client:
    """A connection to sessiond at ``addr`` ("host:port" or "unix:///path").

    ``token`` is sent as "authorization: Bearer <token>" on every call (default:
    the SESSIOND_TOKEN environment variable; "" sends none). It is refused
    without TLS unless the address is a unix socket or a loopback host.
    ``tls`` is None or False for plaintext, True for TLS with the system's
    roots, or a :class:`TLS`. ``namespace`` is the namespace of every session
    this client names. ``timeout`` is each RPC's deadline, in seconds.
    ``logger`` receives the SDK's logs (default: the "sessiond_client"
    logger). ``options`` are gRPC channel arguments, after the SDK's own
    (which reconnect within 2 s of a daemon's restart).

    A Client is safe to share between threads; close it (or use ``with``) to
    release the channel.
    """

    def __init__(
        self,
        addr: str = "127.0.0.1:7437",
        *,
        token: Optional[str] = None,
        tls: Union[None, bool, TLS] = None,
        namespace: str = "",
        timeout: float = DEFAULT_TIMEOUT,
        logger: Optional[logging.Logger] = None,
        options: Iterable[Tuple[str, object]] = (),
    ) -> None:
        if token is None:
            token = os.environ.get(TOKEN_ENV, "")
        if tls is True:
            tls = TLS()
        if token and not tls and not _local_addr(addr):
            raise Invalid("refusing to send a token without TLS to %s, which is not a loopback host; use tls=" % addr)
        self.addr = addr
        self.namespace = namespace
        self.timeout = timeout
        self.log = logger or logging.getLogger("sessiond_client")
        self._metadata: Tuple[Tuple[str, str], ...] = (("authorization", "Bearer " + token),) if token else ()
        # Reconnect within a couple of seconds of a daemon's restart, as the
        # handle's retries expect (gRPC's default waits up to two minutes).
        # Not grpc.min_reconnect_backoff_ms: gRPC takes it as the time a
        # connection attempt may last, and 200 ms fails a busy machine's
        # handshakes.
        opts = [("grpc.initial_reconnect_backoff_ms", 200), ("grpc.max_reconnect_backoff_ms", 2000)] + list(options)
        if isinstance(tls, TLS):
            if tls.server_name:
                opts.append(("grpc.ssl_target_name_override", tls.server_name))
            self._channel = grpc.secure_channel(addr, tls.credentials(), options=opts)
        else:
            self._channel = grpc.insecure_channel(addr, options=opts)
        self.rpc = pb_grpc.SessionStoreServiceStub(self._channel)
        self._closed = False
        self._lock = threading.Lock()
        self._appends: Optional[AppendStream] = None  # guarded by _lock

    # -- lifecycle -----------------------------------------------------------

    def close(self) -> None:
        """Closes the channel. Handles of this client must be closed first."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def ref(self, id: str = "", alias: str = "") -> pb.SessionRef:
        """A SessionRef in this client's namespace, by id or by alias."""
        if bool(id) == bool(alias):
            raise Invalid("ref: give exactly one of id and alias")
        if id:
            return pb.SessionRef(namespace=self.namespace, id=id)
        return pb.SessionRef(namespace=self.namespace, alias=alias)

    def _call(self, op: str, fn: Callable[..., T], req: object, timeout: Optional[float] = None) -> T:
        if self._closed:
            raise Closed("%s: client closed" % op)
        try:
            return fn(req, timeout=timeout or self.timeout, metadata=self._metadata)
        except grpc.RpcError as err:
            raise from_rpc_error(op, err) from err
        except ValueError as err:  # grpc raises it for a closed channel
            if self._closed:
                raise Closed("%s: client closed" % op) from err
            raise

    # -- RPCs ----------------------------------------------------------------

    def create(self, *, alias: str = "", title: str = "", id: str = "",
               labels: Optional[Mapping[str, str]] = None,
               metadata: Optional[Mapping[str, str]] = None) -> pb.Session:
        """CreateSession; returns the session's metadata. A taken alias or id
        is AliasInUse."""
        req = pb.CreateSessionRequest(namespace=self.namespace, alias=alias, title=title, id=id,
                                      labels=dict(labels or {}), metadata=dict(metadata or {}))
        return self._call("CreateSession", self.rpc.CreateSession, req).session

    def get(self, id: str = "", alias: str = "") -> pb.Session:
        """GetSession: a session's metadata, without messages."""
        return self._call("GetSession", self.rpc.GetSession, pb.GetSessionRequest(ref=self.ref(id, alias))).session

    def load(self, id: str = "", alias: str = "", *, close_open_tool_calls: bool = False,
             timeout: Optional[float] = None, view: int = pb.LOAD_VIEW_FULL,
             limit: int = 0, tail: bool = False) -> Tuple[pb.Session, List[pb.Message]]:
        """LoadSession: a session's metadata and all its messages. With
        close_open_tool_calls, each tool call that no result answers is
        followed by a synthetic ROLE_TOOL result (metadata
        "sessiond.synthetic": "true") saying it was interrupted, so that a
        model API accepts the history; the daemon refuses to store it.

        ``view`` selects the messages: LOAD_VIEW_FULL every stored message,
        LOAD_VIEW_CONTEXT what to send a model (the latest compaction's
        summary, then the messages after its range; see compact()).
        ``limit`` sends at most that many messages (0: all): the first ones,
        or with ``tail`` the last ones."""
        if view not in pb.LoadView.values():
            raise Invalid("load: view %r is not a LoadView" % (view,))
        req = pb.LoadSessionRequest(ref=self.ref(id, alias), close_open_tool_calls=close_open_tool_calls,
                                    view=view, limit=limit, tail=tail)
        if self._closed:
            raise Closed("LoadSession: client closed")
        session: Optional[pb.Session] = None
        messages: List[pb.Message] = []
        try:
            for frame in self.rpc.LoadSession(req, timeout=self.timeout if timeout is None else timeout,
                                              metadata=self._metadata):
                if frame.HasField("session"):
                    session = frame.session
                messages.extend(frame.messages)
        except grpc.RpcError as err:
            raise from_rpc_error("LoadSession", err) from err
        if session is None:
            raise SessiondError("LoadSession: the stream carried no session")
        return session, messages

    def append(self, req: pb.AppendMessagesRequest, timeout: Optional[float] = None) -> pb.AppendMessagesResponse:
        """AppendMessages with a ready request (a Handle builds it)."""
        return self._call("AppendMessages", self.rpc.AppendMessages, req, timeout)

    def append_streamed(self, req: pb.AppendMessagesRequest,
                        timeout: Optional[float] = None) -> pb.AppendMessagesResponse:
        """As append, over the AppendStream this client keeps open for it
        (opened by the first call, shared by every thread, reopened after a
        failure), or with AppendMessages against a daemon without
        AppendStream. A handle sends its appends after the first this way."""
        if self._closed:
            raise Closed("AppendStream: client closed")
        with self._lock:
            if self._appends is None:
                self._appends = AppendStream(self)
            stream = self._appends
        try:
            return stream.append(req, timeout or self.timeout)
        except Unsupported:
            return self.append(req, timeout)

    def save(self, header: pb.SaveSessionHeader, messages: Sequence[pb.Message],
             timeout: Optional[float] = None) -> pb.Session:
        """SaveSession: the session's messages, title, summary and metadata
        become header's and messages, atomically. Messages travel in frames of
        about 1 MiB (a bigger message alone)."""
        def frames() -> Iterator[pb.SaveSessionRequest]:
            frame = pb.SaveSessionRequest(header=header)
            size = 0
            for m in messages:
                n = m.ByteSize()
                if len(frame.messages) > 0 and size + n > _SAVE_FRAME_BYTES:
                    yield frame
                    frame, size = pb.SaveSessionRequest(), 0
                frame.messages.append(m)
                size += n
            yield frame

        return self._call("SaveSession", self.rpc.SaveSession, frames(), timeout).session

    def update(self, req: pb.UpdateSessionRequest, timeout: Optional[float] = None) -> pb.Session:
        """UpdateSession with a ready request; returns the session."""
        return self._call("UpdateSession", self.rpc.UpdateSession, req, timeout).session

    def delete(self, id: str = "", alias: str = "", expected_revision: int = 0) -> None:
        """DeleteSession."""
        req = pb.DeleteSessionRequest(ref=self.ref(id, alias), expected_revision=expected_revision)
        self._call("DeleteSession", self.rpc.DeleteSession, req)

    def list(self, alias_prefix: str = "", labels: Optional[Mapping[str, str]] = None,
             limit: int = 0) -> Iterator[pb.Session]:
        """ListSessions: sessions' metadata, newest update first."""
        req = pb.ListSessionsRequest(namespace=self.namespace, alias_prefix=alias_prefix,
                                     labels=dict(labels or {}), limit=limit)
        try:
            for frame in self.rpc.ListSessions(req, timeout=self.timeout, metadata=self._metadata):
                yield frame.session
        except grpc.RpcError as err:
            raise from_rpc_error("ListSessions", err) from err

    def compact(self, id: str = "", alias: str = "", *, through_message_id: str, summary: pb.Message,
                expected_revision: int = 0, timeout: Optional[float] = None) -> pb.Session:
        """CompactSession: stores a compaction, in which ``summary``
        (typically a system or user message holding the summary text) stands
        for the session's messages up to and including
        ``through_message_id`` in the context view (load with
        view=LOAD_VIEW_CONTEXT). Every message stays stored. With
        ``expected_revision`` non-zero, a session changed since raises
        Conflict, so that a summary computed from a stale read never hides
        newer messages. A range that separates a tool call from its result
        raises Invalid. Returns the session, whose ``compaction`` describes
        the new range. Sending the latest compaction again (the same range
        and the summary with the same id) is a no-op, so a retry is safe."""
        if not through_message_id:
            raise Invalid("compact: through_message_id is empty")
        if not isinstance(summary, pb.Message):
            raise Invalid("compact: summary is a %s, not a sessiond.v1 Message" % type(summary).__name__)
        if summary.role == pb.ROLE_UNSPECIFIED:
            raise Invalid("compact: summary.role is unspecified")
        req = pb.CompactSessionRequest(ref=self.ref(id, alias), through_message_id=through_message_id,
                                       summary=summary, expected_revision=expected_revision)
        return self._call("CompactSession", self.rpc.CompactSession, req, timeout).session

    def watch(self, id: str = "", alias: str = "", from_revision: int = 0,
              timeout: Optional[float] = None) -> Iterator[pb.WatchSessionResponse]:
        """WatchSession: the session's changes as they happen, each an event
        with its type and the revision after it: every change after
        ``from_revision`` (0: from now on). It returns once the daemon has
        subscribed, so that every change made after it returns is
        delivered. A live turn's deltas are EVENT_TYPE_DELTA events, its end
        EVENT_TYPE_FINISHED. Leave the loop (or close the iterator) to stop
        watching; ``timeout`` bounds the whole watch (None: none). A watch
        that cannot continue raises WatchReset: load the session and watch
        again from its revision."""
        req = pb.WatchSessionRequest(ref=self.ref(id, alias), from_revision=from_revision)
        if self._closed:
            raise Closed("WatchSession: client closed")
        call = self.rpc.WatchSession(req, timeout=timeout, metadata=self._metadata)
        call.initial_metadata()  # the daemon sends its headers once subscribed; a failure surfaces below
        return _events(call)

    # -- live turns ----------------------------------------------------------

    def open_turn(self, id: str = "", alias: str = "", message: Optional[pb.Message] = None, *,
                  expected_revision: int = 0, timeout: Optional[float] = None) -> Turn:
        """Appends ``message`` (copied; default: an empty one) to the session
        as an open message and returns its :class:`Turn`, which writes a
        model's answer into it as it streams. The message gets
        MESSAGE_STATE_STREAMING, ROLE_ASSISTANT when it names no role, and
        an id when it has none (give it one to make a retry after
        Unavailable safe: the same message is then stored once). A session
        holds one open message at a time, as its last: appends, and opening
        another, raise Conflict until it is finished. With
        ``expected_revision`` non-zero, a session at another revision raises
        Conflict."""
        m = pb.Message()
        if message is not None:
            m.CopyFrom(message)
        if m.role == pb.ROLE_UNSPECIFIED:
            m.role = pb.ROLE_ASSISTANT
        if not m.id:
            m.id = new_id()
        m.state = pb.MESSAGE_STATE_STREAMING
        ref = self.ref(id, alias)
        resp = self.append(pb.AppendMessagesRequest(ref=ref, messages=[m], expected_revision=expected_revision),
                           timeout)
        return Turn(self, ref, m.id, _utf8_len(m.content), _utf8_len(m.reasoning.text), resp.revision)

    def resume_turn(self, id: str = "", alias: str = "", *, message_id: str) -> Turn:
        """The Turn of the session's open message ``message_id``, as far as
        it is stored: a program that restarted carries on where the daemon
        has it. A message that is not open (finished, or interrupted by the
        daemon) raises MessageState."""
        session, last = self.load(id, alias, limit=1, tail=True)
        if not last or last[0].id != message_id or last[0].state != pb.MESSAGE_STATE_STREAMING:
            raise MessageState("resume_turn: message %r is not the session's open message" % message_id)
        m = last[0]
        return Turn(self, self.ref(id, alias), message_id, _utf8_len(m.content), _utf8_len(m.reasoning.text),
                    session.revision)

    # -- handles -------------------------------------------------------------

    def open(self, id: str = "", alias: str = "", **options: Any) -> "Handle":
        """Opens an existing session by id or alias, loading its messages (a
        missing one is NotFound). With ``spool_dir``, spooled messages of the
        session (from this SDK or the Go SDK) are sent before it returns.
        Options are those of :class:`Handle`."""
        from .handle import Handle

        session, messages = self.load(id, alias, close_open_tool_calls=True)
        h = Handle(self, session, messages, **options)
        try:
            h._replay_spools()
        except BaseException:
            with h._close_mu:
                h._stop_loop()
            raise
        return h

    def open_or_create(self, id: str = "", alias: str = "", *, title: str = "",
                       labels: Optional[Mapping[str, str]] = None,
                       metadata: Optional[Mapping[str, str]] = None,
                       **options: Any) -> "Handle":
        """Opens the session by id or alias, creating it (with that alias or
        id, and title, labels and metadata) when it does not exist yet."""
        from .handle import Handle

        try:
            return self.open(id, alias, **options)
        except NotFound:
            pass
        try:
            session = self.create(id=id or new_id(), alias=alias, title=title, labels=labels, metadata=metadata)
        except AliasInUse:
            if not alias:
                raise
            # Another client created it between our load and our create.
            return self.open(id, alias, **options)
        return Handle(self, session, [], **options)

    def new(self, *, alias: str = "", title: str = "",
            labels: Optional[Mapping[str, str]] = None,
            metadata: Optional[Mapping[str, str]] = None, **options: Any) -> "Handle":
        """Creates a session and opens it."""
        from .handle import Handle

        session = self.create(id=new_id(), alias=alias, title=title, labels=labels, metadata=metadata)
        return Handle(self, session, [], **options)


def _utf8_len(s: str) -> int:
    return len(s.encode("utf-8"))


def _events(call: Any) -> Iterator[pb.WatchSessionResponse]:
    try:
        for event in call:
            yield event
    except grpc.RpcError as err:
        raise from_rpc_error("WatchSession", err) from err
    finally:
        call.cancel()
