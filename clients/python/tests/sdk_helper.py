"""A program on sessiond_client that the tests run in processes of their own.

    sdk_helper.py turn ADDR ALIAS SPOOL_DIR TEXT...
        open_or_create ALIAS, append one user message per TEXT, close (save);
        prints "id <session id> messages <count>"
    sdk_helper.py quit-while-down ADDR ID SPOOL_DIR
        open ID, print "ready", wait for a line on stdin (the caller stops the
        daemon meanwhile), append two messages, fail to close, print
        "spooled <file>" and quit
    sdk_helper.py replay ADDR ID SPOOL_DIR
        open ID (sending what is spooled), print "<ROLE> <content>" per message
"""

import sys

from sessiond.v1 import sessiond_pb2 as pb

import sessiond_client as sc


def main() -> int:
    mode, addr = sys.argv[1], sys.argv[2]
    client = sc.Client(addr, timeout=10)
    if mode == "turn":
        alias, spool, texts = sys.argv[3], sys.argv[4], sys.argv[5:]
        with client.open_or_create(alias=alias, spool_dir=spool) as h:
            h.append(*[pb.Message(role=pb.ROLE_USER, content=t) for t in texts])
        print("id", h.id, "messages", len(h.messages))
        return 0
    sid, spool = sys.argv[3], sys.argv[4]
    if mode == "quit-while-down":
        h = client.open(id=sid, spool_dir=spool)
        print("ready", flush=True)
        sys.stdin.readline()
        h.append(pb.Message(role=pb.ROLE_USER, content="spooled question"),
                 pb.Message(role=pb.ROLE_ASSISTANT, content="spooled answer"))
        try:
            h.close(timeout=1)
        except sc.Unavailable:
            print("spooled", h.spool_path)
            return 0
        print("close succeeded, but the daemon was to be down", file=sys.stderr)
        return 3
    if mode == "replay":
        with client.open(id=sid, spool_dir=spool) as h:
            for m in h.messages:
                print(pb.Role.Name(m.role), m.content)
        return 0
    print("unknown mode", mode, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
