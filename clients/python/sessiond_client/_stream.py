"""The AppendStream a Client opens for the appends of its handles after
their first: one stream, shared, with answers matched to appends in order."""

from __future__ import annotations

import collections
import queue
import threading
from typing import TYPE_CHECKING, Any, Deque, Optional, Tuple

import grpc
from sessiond.v1 import sessiond_pb2 as pb

from .errors import Unavailable, from_rpc_error

if TYPE_CHECKING:
    from .client import Client

# Ends the request iterator of a stream.
_END = object()

_CODES = {c.value[0]: c for c in grpc.StatusCode}


class StatusError(grpc.RpcError):
    """One append's failure on a stream, shaped as the RpcError of the unary
    call: AppendStatus has the fields of google.rpc.Status, so its bytes are
    the grpc-status-details-bin trailer the unary call would carry."""

    def __init__(self, st: pb.AppendStatus) -> None:
        super().__init__(st.message)
        self._st = st

    def code(self) -> grpc.StatusCode:
        return _CODES.get(self._st.code, grpc.StatusCode.UNKNOWN)

    def details(self) -> str:
        return self._st.message

    def trailing_metadata(self) -> Tuple[Tuple[str, bytes], ...]:
        return (("grpc-status-details-bin", self._st.SerializeToString()),)


class _Answer:
    __slots__ = ("done", "resp", "err")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.resp: Optional[pb.AppendStreamResponse] = None
        self.err: Optional[BaseException] = None


class Unsupported(Exception):
    """The daemon has no AppendStream (UNIMPLEMENTED)."""


class AppendStream:
    """Appends over one AppendStream call, opened by the first and reopened
    after a failure; safe for concurrent use (appends pipeline on it)."""

    def __init__(self, client: "Client") -> None:
        self._c = client
        self._mu = threading.Lock()
        self._requests: Optional["queue.Queue[Any]"] = None  # the open stream's, or None
        self._waiting: Deque[_Answer] = collections.deque()
        self.unsupported = False

    def append(self, req: pb.AppendMessagesRequest, timeout: float) -> pb.AppendMessagesResponse:
        """Sends req and waits for its answer. Raises Unsupported against a
        daemon without AppendStream, and the unary call's errors otherwise."""
        with self._mu:
            if self.unsupported:
                raise Unsupported()
            if self._requests is None:
                self._open()
            assert self._requests is not None
            ans = _Answer()
            self._waiting.append(ans)
            self._requests.put(pb.AppendStreamRequest(append=req))
        if not ans.done.wait(timeout):
            # The answer, when it comes, is dropped; the append may still
            # land, and a retry with the same message ids stores nothing twice.
            raise Unavailable("AppendStream: no answer within %.1f s" % timeout,
                              grpc.StatusCode.DEADLINE_EXCEEDED, "no answer in time")
        if ans.err is not None:
            if isinstance(ans.err, grpc.RpcError) and ans.err.code() == grpc.StatusCode.UNIMPLEMENTED:
                raise Unsupported()
            if isinstance(ans.err, grpc.RpcError):
                raise from_rpc_error("AppendStream", ans.err) from ans.err
            raise ans.err
        assert ans.resp is not None
        if ans.resp.HasField("status"):
            err = StatusError(ans.resp.status)
            # As the unary call's, so that ALREADY_EXISTS is MessageConflict.
            raise from_rpc_error("AppendMessages", err) from err
        return ans.resp.result

    def _open(self) -> None:
        # _mu held.
        requests: "queue.Queue[Any]" = queue.Queue()
        call = self._c.rpc.AppendStream(iter(requests.get, _END), metadata=self._c._metadata)
        self._requests = requests
        threading.Thread(target=self._receive, args=(call, requests), daemon=True,
                         name="sessiond-append-stream").start()

    def _receive(self, call: Any, requests: "queue.Queue[Any]") -> None:
        # Hands each answer to the append waiting for it, until the stream
        # ends; then fails every append still waiting on it.
        err: BaseException
        try:
            for resp in call:
                with self._mu:
                    ans = self._waiting.popleft() if self._waiting else None
                if ans is None:
                    call.cancel()
                    err = Unavailable("AppendStream: the daemon answered an append that was not sent",
                                      grpc.StatusCode.INTERNAL, "")
                    break
                ans.resp = resp
                ans.done.set()
            else:
                err = Unavailable("AppendStream: the daemon ended the stream", grpc.StatusCode.UNAVAILABLE, "")
        except grpc.RpcError as e:
            err = e
        except ValueError as e:  # the channel was closed
            err = e
        with self._mu:
            if self._requests is requests:
                self._requests = None
            if isinstance(err, grpc.RpcError) and err.code() == grpc.StatusCode.UNIMPLEMENTED:
                self.unsupported = True
            waiting = list(self._waiting)
            self._waiting.clear()
        requests.put(_END)  # ends gRPC's thread that reads the requests
        for ans in waiting:
            ans.err = err
            ans.done.set()
