"""Like example.py, over TLS with a token: for a daemon started with
--tls-cert, --tls-key and --auth-tokens. The token comes from SESSIOND_TOKEN
(the secret `sessionctl token add` printed) and the namespace from
SESSIOND_NAMESPACE (default: the default namespace).

Run from the repository root:
SESSIOND_TOKEN=... PYTHONPATH=gen/python /usr/bin/python3 clients/python/example_tls.py 127.0.0.1:7437 ca.pem
"""
import os
import sys

import grpc
from sessiond.v1 import sessiond_pb2 as pb
from sessiond.v1 import sessiond_pb2_grpc as pb_grpc

addr = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:7437"
ca = open(sys.argv[2], "rb").read() if len(sys.argv) > 2 else None  # None: the system's CAs
namespace = os.environ.get("SESSIOND_NAMESPACE", "")

# TLS for the channel; "authorization: Bearer <token>" on every call.
creds = grpc.composite_channel_credentials(
    grpc.ssl_channel_credentials(root_certificates=ca),
    grpc.access_token_call_credentials(os.environ["SESSIOND_TOKEN"]),
)
stub = pb_grpc.SessionStoreServiceStub(grpc.secure_channel(addr, creds))
ref = pb.SessionRef(namespace=namespace, alias="python-tls-example")

try:  # create the session, or resume it by its alias if it exists
    stub.CreateSession(pb.CreateSessionRequest(namespace=namespace, alias="python-tls-example", title="Example"), timeout=10)
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
