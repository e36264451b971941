"""Tests of sessiond_client against the real daemon (SESSIOND_BIN).

Run from the repository root:
SESSIOND_BIN=/path/to/sessiond PYTHONPATH=gen/python:clients/python /usr/bin/python3 -m unittest discover -s clients/python/tests -v
(go test ./integration -run TestPythonSDK builds the daemon and does this.)
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import unittest
from concurrent import futures
from typing import Any, Callable, List

import grpc

from sessiond.v1 import sessiond_pb2 as pb
from sessiond.v1 import sessiond_pb2_grpc as pb_grpc

import sessiond_client as sc
from sessiond_client import _spool

from .harness import ENV, DaemonTest


def user(text: str) -> pb.Message:
    return pb.Message(role=pb.ROLE_USER, content=text)


def wait_for(cond: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.05)


class HandleTest(DaemonTest):
    def client(self, addr: str = "", timeout: float = 10, **kw: Any) -> sc.Client:
        c = sc.Client(addr or self.daemon.addr, timeout=timeout, **kw)
        self.addCleanup(c.close)
        return c

    def stored(self, c: sc.Client, sid: str) -> List[pb.Message]:
        return c.load(id=sid)[1]

    def test_resume_by_alias_across_processes(self) -> None:
        spool = os.path.join(self.dir, "spool")
        first = self.python("sdk_helper.py", "turn", self.daemon.addr, "proj", spool, "one", "two").split()
        second = self.python("sdk_helper.py", "turn", self.daemon.addr, "proj", spool, "three").split()
        self.assertEqual(first[0], "id")
        self.assertEqual(first[1], second[1], "the second process resumed another session")
        self.assertEqual((first[3], second[3]), ("2", "3"))
        msgs = self.stored(self.client(), first[1])
        self.assertEqual([m.content for m in msgs], ["one", "two", "three"])
        self.assertEqual(len({m.id for m in msgs}), 3)
        self.assertEqual(os.listdir(spool) if os.path.exists(spool) else [], [], "a clean close leaves no spool")

    def test_context_manager_saves_on_exit_and_ids_are_client_set(self) -> None:
        c = self.client()
        m = user("kept")
        with c.open_or_create(alias="ctx", title="T") as h:
            h.append(m, pb.Message(role=pb.ROLE_ASSISTANT, content="ok", id="my-id"))
            ids = [x.id for x in h.messages]
            self.assertEqual(h.unsaved, 2)
        self.assertFalse(m.id, "append changed the caller's message")
        self.assertEqual(ids[1], "my-id")
        self.assertEqual([x.id for x in self.stored(c, h.id)], ids)
        with self.assertRaises(sc.Closed):
            h.append(user("late"))
        h.close()  # a second close is a no-op

    def test_append_refuses_what_the_daemon_would(self) -> None:
        h = self.client().open_or_create(alias="bad")
        with self.assertRaises(sc.Invalid):
            h.append(pb.Message(content="no role"))
        with self.assertRaises(sc.Invalid):
            h.append(user("a"), pb.Message(role=pb.ROLE_USER, id="x\n"))
        h.append(pb.Message(role=pb.ROLE_USER, id="same"))
        with self.assertRaises(sc.Invalid):
            h.append(pb.Message(role=pb.ROLE_USER, id="same"))
        # C1 control characters, as the daemon and the Go SDK refuse them.
        with self.assertRaises(sc.Invalid) as c1:
            h.append(pb.Message(role=pb.ROLE_USER, id="x\u0085y"))
        self.assertIn("messages[0].id has a control character", str(c1.exception))
        with self.assertRaises(sc.Invalid) as c1:
            h.append(user("ok"), pb.Message(role=pb.ROLE_USER, id="\u00e9\u009b"))
        self.assertIn("messages[1].id has a control character at byte 2", str(c1.exception))
        # States: only an assistant message can be open, and a handle
        # appends none (a live turn opens one).
        with self.assertRaises(sc.Invalid) as state:
            h.append(pb.Message(role=pb.ROLE_USER, state=pb.MESSAGE_STATE_STREAMING))
        self.assertIn("messages[0].state is MESSAGE_STATE_STREAMING on a ROLE_USER message", str(state.exception))
        with self.assertRaises(sc.Invalid):
            h.append(pb.Message(role=pb.ROLE_ASSISTANT, state=pb.MESSAGE_STATE_STREAMING))
        with self.assertRaises(sc.Invalid):
            h.append(pb.Message(role=pb.ROLE_ASSISTANT, state=99))
        with self.assertRaises(sc.Invalid):
            h.append(pb.Message(role=pb.ROLE_ASSISTANT, tool_calls=[pb.ToolCall(id="c\u009f", name="f")]))
        with self.assertRaises(sc.Invalid):
            h.append(pb.Message(role=pb.ROLE_ASSISTANT, tool_calls=[pb.ToolCall(id="", name="f")]))
        with self.assertRaises(sc.Invalid):
            h.append(pb.Message(role=pb.ROLE_ASSISTANT, content="x", usage=pb.Usage(output_tokens=-1)))
        with self.assertRaises(sc.Invalid):
            h.append(pb.Message(role=pb.ROLE_TOOL, tool_call_id="c", content="r",
                                metadata={"sessiond.synthetic": "true"}))
        # Tool-call pairing: a result must answer an open call, and an open
        # call's id must not be made again.
        with self.assertRaises(sc.Invalid) as stray:
            h.append(pb.Message(role=pb.ROLE_TOOL, tool_call_id="nosuch", content="r"))
        self.assertIn("messages[0].tool_call_id 'nosuch' answers no open tool call", str(stray.exception))
        call = pb.Message(role=pb.ROLE_ASSISTANT, tool_calls=[pb.ToolCall(id="c1", name="f")])
        with self.assertRaises(sc.Invalid):
            h.append(call, pb.Message(role=pb.ROLE_TOOL, tool_call_id="c1", content="r"),
                     pb.Message(role=pb.ROLE_TOOL, tool_call_id="c1", content="again"))
        h.append(call)
        with self.assertRaises(sc.Invalid):
            h.append(pb.Message(role=pb.ROLE_ASSISTANT, tool_calls=[pb.ToolCall(id="c1", name="g")]))
        h.append(pb.Message(role=pb.ROLE_TOOL, tool_call_id="c1", content="r"))
        self.assertEqual(h.unsaved, 3)
        h.close()
        # What append accepted, the daemon stored.
        self.assertEqual(len(self.stored(self.client(), h.id)), 3)

    def test_errors_are_typed(self) -> None:
        c = self.client()
        with self.assertRaises(sc.NotFound) as cm:
            c.open(alias="nosuch")
        self.assertEqual(cm.exception.code, grpc.StatusCode.NOT_FOUND)
        c.create(alias="taken")
        with self.assertRaises(sc.AliasInUse):
            c.create(alias="taken")
        with self.assertRaises(sc.Invalid) as bad:
            c.create(alias="bad alias/")
        self.assertEqual((bad.exception.field, bad.exception.reason), ("alias", "INVALID_FIELD"))
        with self.assertRaises(sc.TooLarge) as big:
            c.create(title="x" * 100_000)
        self.assertEqual((big.exception.field, big.exception.reason), ("title", "OVER_LIMIT"))
        self.assertEqual(big.exception.info.get("limit"), "max_title_bytes")
        down = sc.Client("127.0.0.1:%d" % 1, timeout=1)
        with self.assertRaises(sc.Unavailable):
            down.get(alias="x")
        down.close()
        with self.assertRaises(sc.Invalid):
            sc.Client("example.com:7437", token="secret")  # a token in clear text off this machine

    def test_autosave(self) -> None:
        c = self.client()
        errors: List[sc.SessiondError] = []
        h = c.open_or_create(alias="auto", autosave=0.2, on_error=errors.append)
        empty_rev = h.revision
        time.sleep(0.7)  # a few rounds on an empty, clean session: nothing sent
        self.assertEqual(c.get(id=h.id).revision, empty_rev, "auto-save wrote an empty session")
        h.append(user("saved by itself"))
        wait_for(lambda: c.get(id=h.id).message_count == 1, "auto-save to store the message")
        rev = c.get(id=h.id).revision
        time.sleep(0.7)  # clean again: no more writes
        self.assertEqual(c.get(id=h.id).revision, rev, "auto-save wrote a clean session")
        self.assertFalse(h.dirty)
        self.assertEqual(errors, [])
        h.close()

    def test_idle_save(self) -> None:
        c = self.client()
        h = c.open_or_create(alias="idle", idle_save=0.3)
        h.append(user("after a pause"))
        wait_for(lambda: c.get(id=h.id).message_count == 1, "the idle save")
        h.close()

    def test_retry_after_restart_without_duplicate(self) -> None:
        proxy = self.proxy()
        c = self.client(proxy.addr, timeout=2)
        h = c.open_or_create(alias="retry")
        h.append(user("first"))
        h.save()
        # The next write lands, but its answer is lost: its outcome is unknown.
        proxy.drop_answers = True
        h.append(user("second"), pb.Message(role=pb.ROLE_ASSISTANT, content="second answer"))
        with self.assertRaises(sc.Unavailable):
            h.save(timeout=1)
        direct = self.client()
        self.assertEqual(direct.get(id=h.id).message_count, 3, "the write whose answer was lost did land")
        # The daemon restarts; more is appended meanwhile.
        self.daemon.stop()
        proxy.cut()
        proxy.drop_answers = False
        h.append(user("third"))
        with self.assertRaises(sc.Unavailable):
            h.save(timeout=1)
        self.assertTrue(h.dirty)
        # close() retries with backoff until the daemon is back and answers;
        # it sends everything unsaved, the daemon stores only what it lacks,
        # and the handle sees that the revision it missed is its own write:
        # nothing twice.
        restart = threading.Timer(1.5, self.daemon.start)
        restart.start()
        self.addCleanup(restart.join)
        started = time.monotonic()
        h.close(timeout=30)
        self.assertGreater(time.monotonic() - started, 1.4, "close returned before the daemon was back")
        msgs = self.stored(self.client(), h.id)
        self.assertEqual([m.content for m in msgs], ["first", "second", "second answer", "third"])
        self.assertEqual(h.revision, 4)

    def test_conflict_and_reload(self) -> None:
        c1, c2 = self.client(), self.client()
        h1 = c1.open_or_create(alias="shared")
        h2 = c2.open(alias="shared")
        h1.append(user("from one"))
        h1.save()
        h2.append(user("from two"))
        with self.assertRaises(sc.Conflict):
            h2.save()
        self.assertTrue(h2.dirty, "a conflict dropped the unsaved message")
        h2.reload()
        self.assertEqual([m.content for m in h2.messages], ["from one", "from two"])
        h2.save()
        self.assertEqual([m.content for m in self.stored(c1, h1.id)], ["from one", "from two"])
        # Auto-save reports a conflict to the callback and pauses until reload.
        errors: List[sc.SessiondError] = []
        got = threading.Event()

        def report(err: sc.SessiondError) -> None:
            errors.append(err)
            got.set()

        h3 = c1.open(alias="shared", autosave=0.1, on_error=report)
        h2.append(user("two again"))
        h2.save()
        h3.append(user("from three"))
        self.assertTrue(got.wait(15), "auto-save never reported the conflict")
        time.sleep(0.5)
        self.assertEqual(len(errors), 1, "auto-save kept retrying a conflict: %r" % errors)
        self.assertIsInstance(errors[0], sc.Conflict)
        h3.reload()
        h3.close()
        self.assertEqual([m.content for m in self.stored(c1, h1.id)],
                         ["from one", "from two", "two again", "from three"])
        h1.close()
        h2.close()

    def test_tool_call_left_open_is_closed_on_resume(self) -> None:
        c = self.client()
        call = pb.Message(role=pb.ROLE_ASSISTANT, content="checking",
                          tool_calls=[pb.ToolCall(id="call_oslo", name="weather", arguments='{"city":"Oslo"}')])
        with c.open_or_create(alias="tools") as h:
            h.append(user("weather in Oslo?"), call)
        # The program stopped between the call and its result. A resume
        # shows a synthetic result after the call, which is never stored.
        h = c.open(alias="tools")
        msgs = h.messages
        self.assertEqual([(m.role, m.tool_call_id) for m in msgs],
                         [(pb.ROLE_USER, ""), (pb.ROLE_ASSISTANT, ""), (pb.ROLE_TOOL, "call_oslo")])
        self.assertEqual(msgs[2].metadata["sessiond.synthetic"], "true")
        self.assertEqual(h.open_tool_calls, ["call_oslo"])
        self.assertFalse(h.dirty, "the synthetic result counts as unsaved")
        h.append(user("never mind"))
        self.assertEqual([m.content for m in h.messages][-1], "never mind")
        self.assertEqual(h.messages[2].tool_call_id, "call_oslo", "the synthetic result moved")
        h.save()
        stored = self.stored(c, h.id)
        self.assertEqual([m.content for m in stored], ["weather in Oslo?", "checking", "never mind"])
        self.assertFalse(any("sessiond.synthetic" in m.metadata for m in stored))
        # reload brings the synthetic result back at its place; the real
        # result replaces it, and is stored.
        h.reload()
        self.assertEqual([m.role for m in h.messages],
                         [pb.ROLE_USER, pb.ROLE_ASSISTANT, pb.ROLE_TOOL, pb.ROLE_USER])
        h.append(pb.Message(role=pb.ROLE_TOOL, tool_call_id="call_oslo", content="-3 C"))
        self.assertEqual([(m.role, m.content) for m in h.messages][1:],
                         [(pb.ROLE_ASSISTANT, "checking"), (pb.ROLE_USER, "never mind"), (pb.ROLE_TOOL, "-3 C")])
        self.assertEqual(h.open_tool_calls, [])
        h.close()
        self.assertEqual([m.content for m in self.stored(c, h.id)], ["weather in Oslo?", "checking", "never mind", "-3 C"])
        # Client.load shows the synthetic result only when asked.
        with c.open_or_create(alias="tools2") as h2:
            h2.append(call)
        self.assertEqual(len(c.load(alias="tools2")[1]), 1)
        closed = c.load(alias="tools2", close_open_tool_calls=True)[1]
        self.assertEqual([m.role for m in closed], [pb.ROLE_ASSISTANT, pb.ROLE_TOOL])

    def test_spool_replay_after_quitting_while_down(self) -> None:
        c = self.client()
        sid = c.create(alias="spooled").id
        spool = os.path.join(self.dir, "spool")
        child = subprocess.Popen([sys.executable, "sdk_helper.py", "quit-while-down", self.daemon.addr, sid, spool],
                                 env=ENV, cwd=os.path.dirname(__file__), stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert child.stdout is not None and child.stdin is not None
        self.assertEqual(child.stdout.readline().strip(), "ready")
        self.daemon.stop()
        out, err = child.communicate("go\n", timeout=60)
        self.assertEqual(child.returncode, 0, err)
        path = out.split()[1]
        self.assertEqual(os.stat(path).st_mode & 0o777, 0o600)
        self.assertEqual(os.stat(spool).st_mode & 0o777, 0o700)
        st = _spool.read(path)
        self.assertEqual([m.content for m in st.session.messages], ["spooled question", "spooled answer"])
        self.daemon.start()
        c2 = self.client()
        with c2.open(id=sid, spool_dir=spool) as h:
            self.assertEqual(h.unsaved, 0, "open returned before sending the spool")
        self.assertEqual([m.content for m in self.stored(c2, sid)], ["spooled question", "spooled answer"])
        self.assertEqual(os.listdir(spool), [])
        # Replaying again (a copy of the same file) sends nothing twice.
        with open(os.path.join(spool, os.path.basename(path)), "wb") as f:
            f.write(_spool.encode(st))
        c2.open(id=sid, spool_dir=spool).close()
        self.assertEqual(len(self.stored(c2, sid)), 2)

    def test_spool_that_replaces_is_kept_aside(self) -> None:
        # A spool file whose messages would replace the stored ones is never
        # appended: open keeps it aside as .conflict and says so.
        c = self.client()
        h = c.open_or_create(alias="spooled-replace")
        h.append(user("old"))
        h.close()
        spool = os.path.join(self.dir, "spool")
        os.makedirs(spool)
        path = os.path.join(spool, _spool.prefix("", h.id) + sc.new_id() + ".spool")
        st = _spool.SpoolState(pb.Session(id=h.id, revision=2, messages=[
            pb.Message(id=sc.new_id(), role=pb.ROLE_USER, content="new")]), _spool.REPLACE)
        _spool.write_atomic(path, _spool.encode(st))
        with self.assertRaises(sc.SpoolError) as cm:
            c.open(id=h.id, spool_dir=spool)
        self.assertIn("conflict", str(cm.exception))
        self.assertTrue(os.path.exists(path + ".conflict"))
        self.assertEqual([m.content for m in self.stored(c, h.id)], ["old"])

    def test_lost_answer_then_another_writer(self) -> None:
        # An append whose answer was lost landed, then another writer
        # appended: the retry must not take the session as its own.
        proxy = self.proxy()
        c = self.client(proxy.addr, timeout=2)
        h = c.open_or_create(alias="lost-then-other")
        proxy.drop_answers = True
        h.append(user("q1"))
        with self.assertRaises(sc.Unavailable):
            h.save(timeout=1)
        proxy.drop_answers = False
        proxy.cut()
        direct = self.client()
        direct.append(pb.AppendMessagesRequest(ref=direct.ref(id=h.id), messages=[
            pb.Message(id=sc.new_id(), role=pb.ROLE_USER, content="other")]))
        h.append(user("q2"))
        with self.assertRaises(sc.Conflict):
            h.save()
        h.reload()
        h.save()
        self.assertEqual([m.content for m in self.stored(direct, h.id)], ["q1", "other", "q2"])
        h.close()

    def test_update_retry_after_lost_answer(self) -> None:
        # A summary and metadata update lands but its answer is lost: its
        # retry changes nothing, a no-op for the daemon rather than a
        # conflict, and the handle is at the session's revision after it.
        proxy = self.proxy()
        c = self.client(proxy.addr, timeout=2)
        h = c.open_or_create(alias="lost-update")
        h.set_summary("s1")
        h.set_metadata({"k": "v"})
        proxy.drop_answers = True
        with self.assertRaises(sc.Unavailable):
            h.save(timeout=1)
        proxy.drop_answers = False
        proxy.cut()
        direct = self.client()
        stored = direct.get(id=h.id)
        self.assertEqual((stored.summary, dict(stored.metadata)), ("s1", {"k": "v"}), "the update did not land")
        self.assertTrue(h.dirty)
        h.save()
        self.assertFalse(h.dirty)
        self.assertEqual(h.revision, direct.get(id=h.id).revision)
        h.append(user("after"))
        h.save()
        # Another writer's update is a conflict still.
        direct.update(pb.UpdateSessionRequest(ref=direct.ref(id=h.id), session=pb.Session(title="other"),
                                              update_mask={"paths": ["title"]}))
        h.set_summary("s2")
        with self.assertRaises(sc.Conflict):
            h.save()
        h.reload()
        h.close()
        self.assertEqual((direct.get(id=h.id).summary, direct.get(id=h.id).title), ("s2", "other"))

    def test_later_appends_share_a_stream(self) -> None:
        # A handle's first append is a unary call; later ones, of every
        # handle of the client and from several threads, go over one
        # AppendStream; a streamed append's error is typed as the unary one's.
        c = self.client()
        handles = [c.new() for _ in range(4)]
        errors: List[BaseException] = []

        def write(i: int, h: sc.Handle) -> None:
            try:
                for k in range(5):
                    h.append(user("%d-%d" % (i, k)))
                    h.save()
            except BaseException as err:
                errors.append(err)

        threads = [threading.Thread(target=write, args=(i, h)) for i, h in enumerate(handles)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        stream = c._appends
        self.assertIsNotNone(stream, "no AppendStream was opened")
        self.assertFalse(stream.unsupported)
        for i, h in enumerate(handles):
            self.assertEqual([m.content for m in self.stored(c, h.id)], ["%d-%d" % (i, k) for k in range(5)])
            self.assertEqual(h.revision, 6)
        # Another writer: the handle's next streamed append is a Conflict.
        h = handles[0]
        c.append(pb.AppendMessagesRequest(ref=c.ref(id=h.id), messages=[
            pb.Message(id=sc.new_id(), role=pb.ROLE_USER, content="other")]))
        h.append(user("late"))
        with self.assertRaises(sc.Conflict):
            h.save()
        # A message id stored with other content is MessageConflict, as
        # from AppendMessages; an invalid message is Invalid, with the field
        # named from the details.
        mid = self.stored(c, h.id)[0].id
        with self.assertRaises(sc.MessageConflict):
            c.append_streamed(pb.AppendMessagesRequest(ref=c.ref(id=h.id), messages=[
                pb.Message(id=mid, role=pb.ROLE_USER, content="not 0-0")]))
        with self.assertRaises(sc.Invalid) as ctx:
            c.append_streamed(pb.AppendMessagesRequest(ref=c.ref(id=h.id), messages=[
                pb.Message(id=sc.new_id(), content="no role")]))
        self.assertEqual(ctx.exception.field, "messages[0].role")

    def test_append_stream_falls_back_to_unary(self) -> None:
        # A daemon without AppendStream (UNIMPLEMENTED): a server that
        # forwards the other calls a handle makes to the real daemon.
        upstream = pb_grpc.SessionStoreServiceStub(grpc.insecure_channel(self.daemon.addr))

        class Old(pb_grpc.SessionStoreServiceServicer):
            def CreateSession(self, req: Any, ctx: Any) -> Any:
                return upstream.CreateSession(req)

            def AppendMessages(self, req: Any, ctx: Any) -> Any:
                return upstream.AppendMessages(req)

        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_SessionStoreServiceServicer_to_server(Old(), server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        self.addCleanup(server.stop, None)
        c = sc.Client("127.0.0.1:%d" % port, timeout=10)
        self.addCleanup(c.close)
        h = c.new()
        for k in range(4):
            h.append(user(str(k)))
            h.save()
        self.assertTrue(c._appends is not None and c._appends.unsupported)
        self.assertEqual([m.content for m in self.stored(self.client(), h.id)], ["0", "1", "2", "3"])

    def test_damaged_spool_is_kept_aside(self) -> None:
        c = self.client()
        sid = c.create(alias="damaged").id
        spool = os.path.join(self.dir, "spool")
        os.makedirs(spool)
        bad = os.path.join(spool, _spool.prefix("", sid) + sc.new_id() + ".spool")
        good = _spool.encode(_spool.SpoolState(pb.Session(id=sid, messages=[
            pb.Message(id="m1", role=pb.ROLE_USER, content="x")]), 0))
        with open(bad, "wb") as f:
            f.write(good[:-1] + bytes([good[-1] ^ 1]))
        with self.assertRaises(sc.SpoolError) as cm:
            c.open(id=sid, spool_dir=spool)
        self.assertIn("checksum", str(cm.exception))
        self.assertTrue(os.path.exists(bad + ".damaged"))
        self.assertEqual(len(self.stored(c, sid)), 0)
        with self.assertRaises(_spool.Damaged):
            _spool.decode(good[:-3])


class SpoolFormatTest(unittest.TestCase):
    def test_crc32c(self) -> None:
        self.assertEqual(_spool.crc32c(b"123456789"), 0xE3069283)

    def test_round_trip(self) -> None:
        st = _spool.SpoolState(pb.Session(id="i", namespace="n", revision=3, summary="s",
                                          messages=[pb.Message(id="a", role=pb.ROLE_TOOL)]), 6)
        back = _spool.decode(_spool.encode(st))
        self.assertEqual(back.session, st.session)
        self.assertEqual(back.flags, 6)


if __name__ == "__main__":
    unittest.main()
