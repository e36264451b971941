#!/usr/bin/python3
"""Conformance check of sessiond from Python, through the generated stubs.

Usage: PYTHONPATH=gen/python /usr/bin/python3 clients/python/conformance.py ADDR

It drives a running daemon at ADDR (plaintext gRPC) through a session's life:
create, append, load, whole save, list by label, and the error codes of a bad
alias and of a stale expected_revision. Every check prints PASS or FAIL with
what differed (the checks after a failure, which build on it, are skipped); the
last line counts them, and the exit status is non-zero when any check failed.
"""

import sys
import uuid

try:
    import grpc
    from google.protobuf import timestamp_pb2
    from sessiond.v1 import sessiond_pb2 as pb
    from sessiond.v1 import sessiond_pb2_grpc as pb_grpc
except ImportError as err:  # say how to fix it rather than only what broke
    sys.exit(
        "python conformance: cannot import the stubs (%s); run with "
        "PYTHONPATH=gen/python and Debian's /usr/bin/python3 "
        "(apt-get install python3-grpcio python3-protobuf)" % err
    )

# Every call has a deadline, so a hung daemon fails the run instead of hanging it.
TIMEOUT = 10.0


class CheckFailed(Exception):
    """One check found something other than what the API contract promises."""


def expect(cond, what):
    if not cond:
        raise CheckFailed(what)


def expect_eq(got, want, what):
    if got != want:
        raise CheckFailed("%s: got %r, want %r" % (what, got, want))


def expect_code(call, want, what):
    """Runs call and checks that it fails with the gRPC status code want."""
    try:
        call()
    except grpc.RpcError as err:
        expect_eq(err.code(), want, what + " (status code; details: %r)" % err.details())
        return err
    raise CheckFailed("%s: succeeded, want %s" % (what, want.name))


def load(stub, ref):
    """Loads a session through the LoadSession stream: (metadata, messages)."""
    session = None
    messages = []
    for i, frame in enumerate(stub.LoadSession(pb.LoadSessionRequest(ref=ref), timeout=TIMEOUT)):
        if i == 0:
            expect(frame.HasField("session"), "LoadSession: first frame carries no session")
            session = frame.session
        else:
            expect(not frame.HasField("session"), "LoadSession: frame %d carries a session; only the first may" % i)
        messages.extend(frame.messages)
    expect(session is not None, "LoadSession: the stream had no frames")
    expect_eq(len(session.messages), 0, "LoadSession: messages inside the metadata frame's session")
    return session, messages


def compare_messages(got, want, what):
    """Compares stored messages field by field with what was sent.

    A message the client sent without an id or created_at gets them from the
    server, so those are checked for presence only; everything else must come
    back exactly, tool-call arguments byte for byte.
    """
    expect_eq(len(got), len(want), what + ": message count")
    for i, (g, w) in enumerate(zip(got, want)):
        at = "%s: message %d" % (what, i)
        if w.id:
            expect_eq(g.id, w.id, at + " id")
        else:
            expect(g.id != "", at + ": the server set no id")
        expect_eq(pb.Role.Name(g.role), pb.Role.Name(w.role), at + " role")
        expect_eq(g.content, w.content, at + " content")
        expect_eq(g.name, w.name, at + " name")
        expect_eq(g.tool_call_id, w.tool_call_id, at + " tool_call_id")
        expect_eq(dict(g.metadata), dict(w.metadata), at + " metadata")
        expect_eq(len(g.tool_calls), len(w.tool_calls), at + " tool call count")
        for j, (gc, wc) in enumerate(zip(g.tool_calls, w.tool_calls)):
            expect_eq(gc.id, wc.id, "%s tool call %d id" % (at, j))
            expect_eq(gc.name, wc.name, "%s tool call %d name" % (at, j))
            expect_eq(
                gc.arguments.encode("utf-8"),
                wc.arguments.encode("utf-8"),
                "%s tool call %d arguments (bytes)" % (at, j),
            )
        expect(g.HasField("created_at") and g.created_at.seconds > 0, at + ": created_at missing")
        if w.HasField("created_at"):
            expect_eq(g.created_at, w.created_at, at + " created_at (set by the client)")
        # Nothing else may differ: with the server-filled fields copied over,
        # the stored message encodes exactly like the sent one.
        filled = pb.Message()
        filled.CopyFrom(w)
        filled.id = g.id
        filled.created_at.CopyFrom(g.created_at)
        if g.SerializeToString(deterministic=True) != filled.SerializeToString(deterministic=True):
            raise CheckFailed("%s differs from what was sent:\ngot:\n%s\nwant:\n%s" % (at, g, filled))


def main(argv):
    if len(argv) != 2:
        sys.exit("usage: conformance.py ADDR   (e.g. 127.0.0.1:7437)")
    addr = argv[1]
    run = uuid.uuid4().hex[:12]  # unique names, so the script can run again against one daemon
    alias = "conformance-py-" + run
    labels = {"suite": "conformance", "lang": "python", "run": run}

    channel = grpc.insecure_channel(addr)
    try:
        grpc.channel_ready_future(channel).result(timeout=TIMEOUT)
    except grpc.FutureTimeoutError:
        sys.exit("python conformance: cannot connect to %s within %.0fs" % (addr, TIMEOUT))
    stub = pb_grpc.SessionStoreServiceStub(channel)
    ref = pb.SessionRef(alias=alias)

    user_time = timestamp_pb2.Timestamp(seconds=1700000000, nanos=123456789)
    user = pb.Message(id="m1-user", role=pb.ROLE_USER, content="What is the weather in Paris and in Oslo?",
                      created_at=user_time, metadata={"client": "python"})
    # Arguments are raw text: odd spacing, key order, escapes and non-ASCII
    # must survive untouched, and so must text that is not JSON at all.
    args_paris = '{ "city":"Paris",  "units" : "metric", "note": "caf\\u00e9 \u00e9t\u00e9 \U0001F600" }'
    args_oslo = '{"city": "Oslo", "days": [1, 2.50, 3e2]} trailing, not JSON'
    assistant = pb.Message(
        id="m2-assistant", role=pb.ROLE_ASSISTANT, content="Let me look both up.",
        tool_calls=[
            pb.ToolCall(id="call_paris", name="get_weather", arguments=args_paris),
            pb.ToolCall(id="call_oslo", name="get_weather", arguments=args_oslo),
        ],
        reasoning=pb.Reasoning(text="two cities, two calls", signature="sig-1"),
    )
    result_paris = pb.Message(id="m3-tool", role=pb.ROLE_TOOL, name="get_weather",
                              tool_call_id="call_paris", content='{"temp": 21}')
    result_oslo = pb.Message(role=pb.ROLE_TOOL, name="get_weather",  # no id: the server sets one
                             tool_call_id="call_oslo", content='{"temp": 9}')
    sent = [user, assistant, result_paris, result_oslo]

    state = {}
    checks = []

    def check(name):
        def register(fn):
            checks.append((name, fn))
            return fn
        return register

    @check("create a session with an alias and labels")
    def _():
        resp = stub.CreateSession(pb.CreateSessionRequest(alias=alias, title="Weather", labels=labels),
                                  timeout=TIMEOUT)
        s = resp.session
        expect_eq(str(uuid.UUID(s.id)), s.id, "session id in lowercase canonical UUID form")
        expect_eq(s.alias, alias, "alias")
        expect_eq(s.title, "Weather", "title")
        expect_eq(dict(s.labels), labels, "labels")
        expect_eq(s.revision, 1, "revision of a new session")
        expect_eq(s.message_count, 0, "message_count")
        expect(s.HasField("created_at"), "created_at missing")
        state["id"] = s.id

    @check("append a user message")
    def _():
        resp = stub.AppendMessages(pb.AppendMessagesRequest(ref=ref, messages=[user]), timeout=TIMEOUT)
        expect_eq((resp.revision, resp.message_count), (2, 1), "(revision, message_count)")

    @check("append an assistant message with two tool calls and two tool results")
    def _():
        req = pb.AppendMessagesRequest(ref=ref, messages=[assistant, result_paris, result_oslo],
                                       expected_revision=2)
        resp = stub.AppendMessages(req, timeout=TIMEOUT)
        expect_eq((resp.revision, resp.message_count), (3, 4), "(revision, message_count)")

    @check("load through the LoadSession stream: every field as sent")
    def _():
        s, msgs = load(stub, pb.SessionRef(id=state["id"]))
        expect_eq(s.id, state["id"], "id")
        expect_eq(s.alias, alias, "alias")
        expect_eq(s.title, "Weather", "title")
        expect_eq(dict(s.labels), labels, "labels")
        expect_eq(s.revision, 3, "revision")
        expect_eq(s.message_count, 4, "message_count")
        compare_messages(msgs, sent, "load")
        state["loaded"] = msgs

    @check("save the whole session through the SaveSession stream")
    def _():
        kept = [pb.Message() for _ in range(3)]
        for m, src in zip(kept, state["loaded"][:3]):
            m.CopyFrom(src)
        kept[1].content = "Paris only, then."  # alter the assistant's text
        del kept[1].tool_calls[1]               # and drop the Oslo call; its result goes too

        def frames():
            yield pb.SaveSessionRequest(header=pb.SaveSessionHeader(
                ref=ref, expected_revision=3, title="Weather in Paris",
                summary="asked for two cities, kept one", metadata={"saved-by": "python"}))
            # Messages in several frames, as a long session would send them.
            yield pb.SaveSessionRequest(messages=kept[:2])
            yield pb.SaveSessionRequest(messages=kept[2:])

        resp = stub.SaveSession(frames(), timeout=TIMEOUT)
        expect_eq(resp.session.revision, 4, "revision after the save")
        expect_eq(resp.session.message_count, 3, "message_count after the save")
        s, msgs = load(stub, ref)
        expect_eq(s.title, "Weather in Paris", "title after the save")
        expect_eq(s.summary, "asked for two cities, kept one", "summary after the save")
        expect_eq(dict(s.metadata), {"saved-by": "python"}, "metadata after the save")
        expect_eq(s.alias, alias, "alias after the save (a save never changes it)")
        expect_eq(dict(s.labels), labels, "labels after the save (a save never changes them)")
        compare_messages(msgs, kept, "load after the save")

    @check("list with a label filter")
    def _():
        found = [f.session for f in stub.ListSessions(
            pb.ListSessionsRequest(labels={"run": run, "lang": "python"}), timeout=TIMEOUT)]
        expect_eq([s.id for s in found], [state["id"]], "sessions matching the labels")
        expect_eq(len(found[0].messages), 0, "messages in a listed session (metadata only)")
        none = [f.session.id for f in stub.ListSessions(
            pb.ListSessionsRequest(labels={"run": run, "lang": "cobol"}), timeout=TIMEOUT)]
        expect_eq(none, [], "sessions matching a label pair no session has")

    @check("a bad alias is INVALID_ARGUMENT")
    def _():
        for bad in ["has space", "a/b", "..", str(uuid.uuid4()), "x" * 129]:
            expect_code(lambda: stub.CreateSession(pb.CreateSessionRequest(alias=bad), timeout=TIMEOUT),
                        grpc.StatusCode.INVALID_ARGUMENT, "CreateSession alias %r" % bad)

    @check("a stale expected_revision is ABORTED and changes nothing")
    def _():
        stale = pb.Message(id="m-stale", role=pb.ROLE_USER, content="lost race")
        expect_code(lambda: stub.AppendMessages(
            pb.AppendMessagesRequest(ref=ref, messages=[stale], expected_revision=3), timeout=TIMEOUT),
            grpc.StatusCode.ABORTED, "AppendMessages with expected_revision 3 at revision 4")

        def frames():
            yield pb.SaveSessionRequest(header=pb.SaveSessionHeader(ref=ref, expected_revision=2, title="stale"))
            yield pb.SaveSessionRequest(messages=[stale])
        expect_code(lambda: stub.SaveSession(frames(), timeout=TIMEOUT),
                    grpc.StatusCode.ABORTED, "SaveSession with expected_revision 2 at revision 4")
        s, msgs = load(stub, ref)
        expect_eq((s.revision, s.message_count, s.title), (4, 3, "Weather in Paris"),
                  "(revision, message_count, title) after the refused writes")

    @check("a retried append is a no-op")
    def _():
        resp = stub.AppendMessages(pb.AppendMessagesRequest(ref=ref, messages=[state["loaded"][0]]),
                                   timeout=TIMEOUT)
        expect_eq((resp.revision, resp.message_count), (4, 3), "(revision, message_count) after a retry")

    passed = failed = skipped = 0
    for name, fn in checks:
        if failed:
            # Each check builds on the session the ones before left; after a
            # failure their results would only repeat it.
            print("SKIP %s" % name, flush=True)
            skipped += 1
            continue
        try:
            fn()
        except Exception as err:  # report every check, whatever broke
            if isinstance(err, grpc.RpcError):
                err = "unexpected RPC error %s: %s" % (err.code().name, err.details())
            elif not isinstance(err, CheckFailed):
                err = "%s: %s" % (type(err).__name__, err)
            print("FAIL %s: %s" % (name, err), flush=True)
            failed += 1
        else:
            print("PASS %s" % name, flush=True)
            passed += 1
    channel.close()
    print("python conformance: %d passed, %d failed%s"
          % (passed, failed, ", %d skipped" % skipped if skipped else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
