"""sessiond_client: the Python SDK of sessiond, over the generated stubs in
gen/python, with the Go SDK's semantics.

    from sessiond_client import Client
    from sessiond.v1.sessiond_pb2 import Message, ROLE_USER

    client = Client("127.0.0.1:7437")  # token=..., tls=True or TLS(ca_file=...)
    with client.open_or_create(alias="my-project", autosave=300, spool_dir="spool") as h:
        h.append(Message(role=ROLE_USER, content="hello"))  # in memory; gets an id
        h.save()                                            # sends only what is new
    # leaving the block saved what was left; resume with h.id or the alias

Failures raise subclasses of SessiondError mapped from gRPC status codes
(NotFound, AliasInUse, MessageConflict, Conflict, Invalid, TooLarge,
DataLoss, WatchReset, Unavailable, Unauthenticated, PermissionDenied,
Closed, SpoolError, MessageState). A model's answer is streamed into a
session as a live turn: Handle.stream_turn or Client.open_turn returns a
Turn. Needs grpcio and protobuf (Debian: python3-grpcio, python3-protobuf)
and gen/python on sys.path.
"""

from ._ids import new_id
from .client import DEFAULT_TIMEOUT, TLS, TOKEN_ENV, Client
from .errors import (
    AliasInUse,
    Closed,
    Conflict,
    DataLoss,
    Invalid,
    MessageConflict,
    MessageState,
    NotFound,
    PermissionDenied,
    SessiondError,
    SpoolError,
    TooLarge,
    Unauthenticated,
    Unavailable,
    WatchReset,
)
from .handle import DEFAULT_AUTOSAVE, DEFAULT_CLOSE_TIMEOUT, Handle
from .live import Turn

__all__ = [
    "Client", "Handle", "TLS", "TOKEN_ENV", "DEFAULT_TIMEOUT", "DEFAULT_AUTOSAVE", "DEFAULT_CLOSE_TIMEOUT",
    "Turn", "new_id", "SessiondError", "NotFound", "AliasInUse", "MessageConflict", "Conflict", "Invalid",
    "TooLarge", "DataLoss", "WatchReset", "Unavailable", "Unauthenticated", "PermissionDenied",
    "Closed", "SpoolError", "MessageState",
]
