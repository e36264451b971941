"""A chat REPL on sessiond_client: resumes the session by alias, saves on exit.

Run from the repository root: PYTHONPATH=gen/python:clients/python /usr/bin/python3 clients/python/repl.py my-project
"""
import sys

from sessiond.v1.sessiond_pb2 import ROLE_ASSISTANT, ROLE_USER, Message
from sessiond_client import Client

client = Client(sys.argv[2] if len(sys.argv) > 2 else "127.0.0.1:7437")  # token=..., tls=...
with client.open_or_create(alias=sys.argv[1], autosave=300, spool_dir=".sessiond-spool",
                           on_error=lambda err: print("auto-save:", err, file=sys.stderr)) as h:
    print("session", h.id, "with", len(h.messages), "messages")
    for line in sys.stdin:
        reply = "echo: " + line.strip()  # call your model here, with h.messages as the history
        h.append(Message(role=ROLE_USER, content=line.strip()), Message(role=ROLE_ASSISTANT, content=reply))
        print(reply)
print("saved; resume with:", sys.argv[0], h.alias or h.id)
