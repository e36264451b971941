"""Read which field a request got wrong, without parsing the error's text.

sessiond answers INVALID_ARGUMENT and RESOURCE_EXHAUSTED with a
google.rpc.BadRequest (a field violation per bad field) and a
google.rpc.ErrorInfo (a stable reason, domain "sessiond", and metadata such as
the limit's name) in the status details, which gRPC carries in the
grpc-status-details-bin trailer. The message text stays as it was.

gen/python/google/rpc holds the status_pb2 and error_details_pb2 modules that
decode them (the same modules pip's googleapis-common-protos ships; with pip's
grpcio-status, rpc_status.from_call(err) does what details() does here).

Run from the repository root:
PYTHONPATH=gen/python /usr/bin/python3 clients/python/error_details.py 127.0.0.1:7437
"""
import sys

import grpc
from google.rpc import error_details_pb2, status_pb2
from sessiond.v1 import sessiond_pb2 as pb
from sessiond.v1 import sessiond_pb2_grpc as pb_grpc


def details(err):
    """The google.rpc.Status of a failed call, from its trailers; None if it has none."""
    for key, value in err.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            return status_pb2.Status.FromString(value)
    return None


def describe(err):
    print("code", err.code().name)
    print("message", err.details())
    st = details(err)
    if st is None:
        print("no details")
        return
    for detail in st.details:
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            for v in bad.field_violations:
                print("field", v.field, "|", v.description)
        elif detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            meta = " ".join(f"{k}={info.metadata[k]}" for k in sorted(info.metadata))
            print("reason", info.reason, "domain", info.domain, meta)
        else:
            print("other detail", detail.type_url)


addr = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:7437"
stub = pb_grpc.SessionStoreServiceStub(grpc.insecure_channel(addr))
calls = [
    ("bad alias", lambda: stub.CreateSession(pb.CreateSessionRequest(alias="no/slash"), timeout=10)),
    ("title over its limit", lambda: stub.CreateSession(pb.CreateSessionRequest(title="x" * 100_000), timeout=10)),
]
for name, call in calls:
    try:
        call()
    except grpc.RpcError as err:
        print("--", name)
        describe(err)
    else:
        sys.exit(f"{name}: the call succeeded")
