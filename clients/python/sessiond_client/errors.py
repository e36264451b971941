"""Exceptions of sessiond_client, mapped from gRPC status codes.

Every failed call raises a subclass of :class:`SessiondError`. It keeps the
gRPC status code (``err.code``, a ``grpc.StatusCode`` or None) and the
daemon's message (``err.details``), and chains the original
``grpc.RpcError`` as ``__cause__``. The classes match the Go SDK's sentinel
errors (``client.ErrNotFound`` is :class:`NotFound`, and so on).

For INVALID_ARGUMENT and RESOURCE_EXHAUSTED the daemon also sends standard
google.rpc details, decoded here with the modules in gen/python/google/rpc:
``err.field`` is the request field at fault ("ref.alias",
"messages[2].role"), ``err.reason`` the stable reason ("INVALID_FIELD",
"OVER_LIMIT", "STORAGE_FULL") and ``err.info`` its metadata (for a limit:
"limit", "size", "max").
"""

from __future__ import annotations

from typing import Dict, Optional, Type

import grpc

__all__ = [
    "SessiondError",
    "NotFound",
    "AliasInUse",
    "MessageConflict",
    "Conflict",
    "Invalid",
    "TooLarge",
    "DataLoss",
    "WatchReset",
    "Unavailable",
    "Unauthenticated",
    "PermissionDenied",
    "Closed",
    "SpoolError",
    "MessageState",
    "from_rpc_error",
    "retryable",
]


class SessiondError(Exception):
    """A sessiond call failed. ``code`` is the gRPC status code (None when the
    error did not come from the daemon) and ``details`` the daemon's message,
    which names the field or limit at fault."""

    def __init__(self, message: str, code: Optional[grpc.StatusCode] = None, details: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.details = details
        #: The request field at fault, from the google.rpc.BadRequest detail.
        self.field = ""
        #: The google.rpc.ErrorInfo reason and metadata.
        self.reason = ""
        self.info: Dict[str, str] = {}


class NotFound(SessiondError):
    """No session with that id or alias in the namespace (NOT_FOUND)."""


class AliasInUse(SessiondError):
    """The alias or the client-chosen session id is taken (ALREADY_EXISTS
    where sessions are created or renamed)."""


class MessageConflict(SessiondError):
    """AppendMessages carried a message id the session holds with other
    content (ALREADY_EXISTS); nothing of the batch is stored. Messages the
    session holds with the same content are merely skipped."""


class Conflict(SessiondError):
    """The session is not at the expected revision: another writer changed
    it (ABORTED). A Handle answers it with ``reload()``, then ``save()``."""


class Invalid(SessiondError):
    """A request field is malformed or out of range (INVALID_ARGUMENT); the
    message names the field."""


class TooLarge(SessiondError):
    """A message, frame or field is over a server limit, or the daemon's disk
    is full (RESOURCE_EXHAUSTED); the message names the limit."""


class DataLoss(SessiondError):
    """The stored session failed its checksum (DATA_LOSS); the daemon keeps
    serving every other session."""


class WatchReset(SessiondError):
    """A watch cannot continue (OUT_OF_RANGE): reload the session and watch
    again from its current revision."""


class Unavailable(SessiondError):
    """The daemon cannot be reached, is shutting down, or did not answer in
    time. A write that failed with it may be retried: a Handle's appends are
    idempotent."""


class Unauthenticated(SessiondError):
    """The call had no token, or one the daemon does not know
    (UNAUTHENTICATED)."""


class PermissionDenied(SessiondError):
    """The token may not use that namespace or method (PERMISSION_DENIED)."""


class Closed(SessiondError):
    """The Client or Handle has been closed."""


class SpoolError(SessiondError):
    """A handle's spool file could not be written, or a spool file found when
    opening a session was damaged or conflicted with it; the message names the
    file, which is kept."""


class MessageState(SessiondError):
    """AppendDelta or FinishMessage named a message that is not open (it was
    finished, or the daemon interrupted it), or a delta's offset is past the
    end of the message (FAILED_PRECONDITION; the message gives its length)."""


_BY_CODE = {
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ABORTED: Conflict,
    grpc.StatusCode.FAILED_PRECONDITION: Conflict,
    grpc.StatusCode.INVALID_ARGUMENT: Invalid,
    grpc.StatusCode.RESOURCE_EXHAUSTED: TooLarge,
    grpc.StatusCode.DATA_LOSS: DataLoss,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: Unavailable,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
}


def _class_for(op: str, code: Optional[grpc.StatusCode]) -> Type[SessiondError]:
    # The meaning of a code depends on the RPC, as in the Go SDK.
    if code == grpc.StatusCode.ALREADY_EXISTS:
        return MessageConflict if op == "AppendMessages" else AliasInUse
    if code == grpc.StatusCode.FAILED_PRECONDITION and op in ("AppendDelta", "FinishMessage"):
        return MessageState
    if code == grpc.StatusCode.OUT_OF_RANGE:
        return WatchReset if op == "WatchSession" else Invalid
    if code is None:
        return SessiondError
    return _BY_CODE.get(code, SessiondError)


def from_rpc_error(op: str, err: grpc.RpcError) -> SessiondError:
    """Turns the grpc.RpcError of RPC ``op`` into the SessiondError subclass
    for its status code, with the original error chained as ``__cause__``."""
    code = err.code() if hasattr(err, "code") else None
    details = (err.details() if hasattr(err, "details") else "") or ""
    name = code.name if code is not None else "error"
    exc = _class_for(op, code)("%s: %s: %s" % (op, name, details or err), code, details)
    exc.__cause__ = err
    _read_details(exc, err)
    return exc


def _read_details(exc: SessiondError, err: grpc.RpcError) -> None:
    # The google.rpc.Status in the grpc-status-details-bin trailer, if any.
    trailers = err.trailing_metadata() if hasattr(err, "trailing_metadata") else None
    raw = next((v for k, v in trailers or () if k == "grpc-status-details-bin"), None)
    if raw is None:
        return
    try:
        from google.rpc import error_details_pb2, status_pb2

        st = status_pb2.Status.FromString(raw)
        for d in st.details:
            if d.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                bad = error_details_pb2.BadRequest()
                d.Unpack(bad)
                if bad.field_violations:
                    exc.field = bad.field_violations[0].field
            elif d.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                d.Unpack(info)
                exc.reason, exc.info = info.reason, dict(info.metadata)
                exc.field = exc.field or info.metadata.get("field", "")
    except Exception:  # no google.rpc modules on the path, or a detail that does not decode
        return


_FINAL = (NotFound, AliasInUse, MessageConflict, Conflict, Invalid, TooLarge, DataLoss,
          Unauthenticated, PermissionDenied, Closed, SpoolError, MessageState)


def retryable(err: BaseException) -> bool:
    """Whether a write that failed with err may succeed if sent again: the
    daemon was unreachable, the call timed out, or its outcome is unknown.
    Conflicts, refusals and closed handles are final."""
    if isinstance(err, _FINAL):
        return False
    if isinstance(err, SessiondError) and err.code == grpc.StatusCode.UNIMPLEMENTED:
        return False
    return True
