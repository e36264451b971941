"""Live turns against the real daemon (SESSIOND_BIN): a handle streams a
model's answer as deltas that a watcher follows, a delta whose answer was
lost is written again without doubling, and a turn left open is closed as
interrupted by the daemon's --stream-idle-timeout."""

from __future__ import annotations

import threading
import time
from typing import Any, List

from sessiond.v1 import sessiond_pb2 as pb

import sessiond_client as sc

from .harness import DaemonTest
from .test_sdk import user, wait_for


class LiveTurnTest(DaemonTest):
    # The shortest idle timeout the daemon takes; it sweeps every second.
    daemon_args = ["--stream-idle-timeout", "1s"]

    def client(self, addr: str = "", **kw: Any) -> sc.Client:
        c = sc.Client(addr or self.daemon.addr, timeout=10, **kw)
        self.addCleanup(c.close)
        return c

    def test_handle_streams_a_turn_that_a_watcher_follows(self) -> None:
        proxy = self.proxy()
        c = self.client(proxy.addr)
        h = c.new(alias="live")
        self.addCleanup(h.close)
        h.append(user("question"))
        h.save()

        events: List[pb.WatchSessionResponse] = []
        feed = self.client().watch(id=h.id, timeout=30)

        def watch() -> None:
            for ev in feed:
                events.append(ev)
                if ev.type == pb.EVENT_TYPE_FINISHED:
                    return

        watcher = threading.Thread(target=watch)
        watcher.start()
        self.addCleanup(watcher.join, 30)

        turn = h.stream_turn(pb.Message(model="m0"))
        self.assertEqual(turn.length, 0)
        with self.assertRaises(sc.Conflict):
            h.append(user("while it streams"))
        turn.write("Hé")
        turn.write_reasoning("thinking")
        # The next delta lands but its answer is lost: the caller writes it
        # again, and the daemon finds its bytes already at its offset.
        proxy.drop_answers = True
        with self.assertRaises(sc.Unavailable):
            turn.write("llo", timeout=1)
        proxy.drop_answers = False
        proxy.cut()
        self.assertEqual(turn.length, 3, "a write whose answer was lost moved the offset")
        direct = self.client()
        wait_for(lambda: direct.load(id=h.id)[1][-1].content == "Héllo", "the lost delta to land")
        deadline = time.monotonic() + 15
        while True:
            try:
                turn.write("llo")
                break
            except sc.Unavailable:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        self.assertEqual(turn.length, 6)
        turn.set_usage(pb.Usage(output_tokens=2))
        done = turn.finish(model="m1")
        self.assertTrue(turn.done)
        self.assertEqual((done.content, done.reasoning.text, done.model, done.usage.output_tokens, done.state),
                         ("Héllo", "thinking", "m1", 2, pb.MESSAGE_STATE_COMPLETE))
        self.assertEqual(turn.finish(model="m1"), done, "a retried finish is not a no-op")

        # The handle holds the finished message, at the daemon's revision,
        # and appends again.
        self.assertEqual([m.content for m in h.messages], ["question", "Héllo"])
        self.assertEqual(h.messages[1].state, pb.MESSAGE_STATE_COMPLETE)
        self.assertEqual(h.revision, c.get(id=h.id).revision)
        h.append(user("thanks"))
        h.save()
        self.assertEqual([m.content for m in c.load(id=h.id)[1]], ["question", "Héllo", "thanks"])

        watcher.join(30)
        self.assertFalse(watcher.is_alive(), "the watcher never saw the turn finish")
        kinds = [ev.type for ev in events]
        self.assertEqual(kinds[0], pb.EVENT_TYPE_APPENDED)
        self.assertEqual(events[0].messages[0].state, pb.MESSAGE_STATE_STREAMING)
        deltas = [ev.delta for ev in events if ev.type == pb.EVENT_TYPE_DELTA]
        self.assertEqual([(d.offset, d.content) for d in deltas if d.content], [(0, "Hé"), (3, "llo")],
                         "the watcher saw other content deltas (the retried one twice?)")
        self.assertEqual([d.reasoning for d in deltas if d.reasoning], ["thinking"])
        self.assertEqual(events[-1].messages[0].content, "Héllo")

    def test_abandoned_turn_is_interrupted(self) -> None:
        c = self.client()
        h = c.new(alias="abandoned")
        turn = h.stream_turn()
        turn.write("partial")
        # Another process carries the open turn on where the daemon has it.
        resumed = self.client().resume_turn(id=h.id, message_id=turn.id)
        self.assertEqual(resumed.length, len("partial"))
        resumed.write(" answer")
        # Then nobody writes: after the idle timeout the daemon closes the
        # message as interrupted, keeping its text.
        wait_for(lambda: c.load(id=h.id)[1][-1].state == pb.MESSAGE_STATE_INTERRUPTED,
                 "the daemon to interrupt the idle turn", timeout=20)
        reopened = self.client().open(id=h.id)
        self.addCleanup(reopened.close)
        last = reopened.messages[-1]
        self.assertEqual((last.content, last.state), ("partial answer", pb.MESSAGE_STATE_INTERRUPTED))
        with self.assertRaises(sc.MessageState):
            self.client().resume_turn(id=h.id, message_id=turn.id)
        # The writer that abandoned it learns so when it finishes; its
        # handle appends again after a reload.
        with self.assertRaises(sc.MessageState):
            turn.finish()
        self.assertTrue(turn.done)
        h.reload()
        self.assertEqual(h.messages[-1].state, pb.MESSAGE_STATE_INTERRUPTED)
        h.append(user("go on"))
        h.close()
        self.assertEqual([m.content for m in c.load(id=h.id)[1]], ["partial answer", "go on"])

    def test_writer_interrupts_its_turn(self) -> None:
        c = self.client()
        h = c.new(alias="cut")
        turn = h.stream_turn()
        turn.write("half an answ")
        # Closed at once, well before the idle timeout, keeping its text.
        m = turn.finish(interrupted=True)
        self.assertEqual((m.content, m.state), ("half an answ", pb.MESSAGE_STATE_INTERRUPTED))
        self.assertTrue(turn.done)
        self.assertEqual(c.load(id=h.id)[1][-1].state, pb.MESSAGE_STATE_INTERRUPTED)
        h.append(user("go on"))
        h.close()
        self.assertEqual([m.content for m in c.load(id=h.id)[1]], ["half an answ", "go on"])

    def test_client_turn_checks(self) -> None:
        c = self.client()
        sid = c.create(alias="turns").id
        turn = c.open_turn(id=sid, message=pb.Message(content="Hi"))
        self.assertEqual(turn.length, 2)
        # One open message at a time, as the session's last.
        with self.assertRaises(sc.Conflict):
            c.open_turn(id=sid)
        with self.assertRaises(sc.Conflict):
            c.append(pb.AppendMessagesRequest(ref=c.ref(id=sid), messages=[user("x")]))
        with self.assertRaises(sc.MessageState):
            c.resume_turn(id=sid, message_id="other")
        turn.finish()
        with self.assertRaises(sc.MessageState):
            turn.write("late")
        h = c.open(id=sid)
        with self.assertRaises(sc.Invalid):
            h.stream_turn(pb.Message(role=pb.ROLE_USER))
        h.close()
        # A watch that cannot start fails as it is read, typed.
        with self.assertRaises(sc.NotFound):
            next(c.watch(alias="nosuch"))
        with self.assertRaises(sc.WatchReset):
            next(c.watch(id=sid, from_revision=10_000))
