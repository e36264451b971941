"""Create (or resume) a session, append a turn, and load it back.

Run from the repository root: PYTHONPATH=gen/python /usr/bin/python3 clients/python/example.py 127.0.0.1:7437
"""
import sys

import grpc
from sessiond.v1 import sessiond_pb2 as pb
from sessiond.v1 import sessiond_pb2_grpc as pb_grpc

addr = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:7437"
stub = pb_grpc.SessionStoreServiceStub(grpc.insecure_channel(addr))
ref = pb.SessionRef(alias="python-example")

try:  # create the session, or resume it by its alias if it exists
    stub.CreateSession(pb.CreateSessionRequest(alias="python-example", title="Example"), timeout=10)
except grpc.RpcError as err:
    if err.code() != grpc.StatusCode.ALREADY_EXISTS:
        raise

stub.AppendMessages(pb.AppendMessagesRequest(ref=ref, messages=[
    pb.Message(role=pb.ROLE_USER, content="What is 2+2?"),
    pb.Message(role=pb.ROLE_ASSISTANT, content="4"),
]), timeout=10)

for frame in stub.LoadSession(pb.LoadSessionRequest(ref=ref), timeout=10):
    if frame.HasField("session"):
        print("session", frame.session.id, "revision", frame.session.revision)
    for m in frame.messages:
        print(pb.Role.Name(m.role), m.content)
