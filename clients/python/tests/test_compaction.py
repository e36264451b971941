"""Compaction through the Python SDK against the real daemon (SESSIOND_BIN):
Client.compact, load's context view, Handle.compact and
Handle.context_messages."""

from __future__ import annotations

from typing import Any, List

from sessiond.v1 import sessiond_pb2 as pb

import sessiond_client as sc

from .harness import DaemonTest


def msg(id: str, role: int, content: str = "", **kw: Any) -> pb.Message:
    return pb.Message(id=id, role=role, content=content, **kw)


def trip() -> List[pb.Message]:
    # A user turn, a tool call and its result, and the next user turn.
    return [
        msg("u1", pb.ROLE_USER, "plan a trip to Oslo"),
        msg("a1", pb.ROLE_ASSISTANT, tool_calls=[pb.ToolCall(id="c1", name="search", arguments='{"q":"Oslo"}')]),
        msg("t1", pb.ROLE_TOOL, "3 hotels found", tool_call_id="c1"),
        msg("u2", pb.ROLE_USER, "book the first"),
    ]


def summary(id: str, text: str) -> pb.Message:
    return msg(id, pb.ROLE_SYSTEM, text)


class CompactionTest(DaemonTest):
    def client(self) -> sc.Client:
        c = sc.Client(self.daemon.addr, timeout=10)
        self.addCleanup(c.close)
        return c

    def ids(self, messages: List[pb.Message]) -> List[str]:
        return [m.id for m in messages]

    def test_client_compact_and_load_views(self) -> None:
        c = self.client()
        with c.new(alias="trip") as h:
            h.append(*trip())
        sess = c.get(alias="trip")
        # A range that ends between the call and its result is refused,
        # naming the field; nothing changes.
        with self.assertRaises(sc.Invalid) as refused:
            c.compact(alias="trip", through_message_id="a1", summary=summary("s0", "half"),
                      expected_revision=sess.revision)
        self.assertIn("through_message_id", str(refused.exception))
        with self.assertRaises(sc.Invalid):
            c.compact(alias="trip", through_message_id="", summary=summary("s0", "none"))
        self.assertEqual(c.get(alias="trip").revision, sess.revision)

        got = c.compact(alias="trip", through_message_id="t1", summary=summary("s1", "Oslo: 3 hotels found."),
                        expected_revision=sess.revision)
        self.assertEqual(got.revision, sess.revision + 1)
        self.assertEqual((got.message_count, got.context_message_count), (4, 2))
        self.assertEqual((got.compaction.through_message_id, got.compaction.through_message_count,
                          got.compaction.summary_message_id), ("t1", 3, "s1"))

        _, context = c.load(alias="trip", view=pb.LOAD_VIEW_CONTEXT)
        self.assertEqual(self.ids(context), ["s1", "u2"])
        self.assertEqual(context[0].content, "Oslo: 3 hotels found.")
        for view in (pb.LOAD_VIEW_FULL, pb.LOAD_VIEW_UNSPECIFIED):
            self.assertEqual(self.ids(c.load(alias="trip", view=view)[1]), ["u1", "a1", "t1", "u2"])
        with self.assertRaises(sc.Invalid):
            c.load(alias="trip", view=99)

        # Sending the latest compaction again is a no-op, even at the stale
        # revision; a different summary at that revision is a conflict.
        again = c.compact(alias="trip", through_message_id="t1", summary=summary("s1", "Oslo: 3 hotels found."),
                          expected_revision=sess.revision)
        self.assertEqual(again.revision, got.revision)
        with self.assertRaises(sc.Conflict):
            c.compact(alias="trip", through_message_id="u2", summary=summary("s2", "later"),
                      expected_revision=sess.revision)

        # A later compaction over more replaces the earlier in the context view.
        c.compact(alias="trip", through_message_id="u2", summary=summary("s2", "Booked in Oslo."),
                  expected_revision=got.revision)
        self.assertEqual(self.ids(c.load(alias="trip", view=pb.LOAD_VIEW_CONTEXT)[1]), ["s2"])
        self.assertEqual(len(c.load(alias="trip")[1]), 4)

    def test_handle_compacts_at_its_revision(self) -> None:
        c1, c2 = self.client(), self.client()
        h1 = c1.new(alias="shared")
        self.addCleanup(h1.close)
        h1.append(*trip())
        # compact() saves what is pending first, then compacts at the
        # revision that save reached.
        h1.compact("t1", summary("s1", "Oslo: 3 hotels found."))
        self.assertFalse(h1.dirty)
        self.assertEqual(h1.revision, c1.get(id=h1.id).revision)
        self.assertEqual(self.ids(h1.messages), ["u1", "a1", "t1", "u2"], "compaction changed the handle's messages")

        # context_messages saves an unsaved message before loading, and
        # closes an open tool call for the model.
        h1.append(msg("a2", pb.ROLE_ASSISTANT, tool_calls=[pb.ToolCall(id="c2", name="book", arguments="{}")]))
        context = h1.context_messages()
        self.assertEqual(self.ids(context)[:3], ["s1", "u2", "a2"])
        self.assertEqual(len(context), 4)
        self.assertEqual((context[3].role, context[3].tool_call_id), (pb.ROLE_TOOL, "c2"))
        self.assertEqual(context[3].metadata["sessiond.synthetic"], "true")
        self.assertFalse(h1.dirty)

        # Another writer appends: a compaction from h1's stale view is
        # refused, so it cannot hide that message; after reload it works
        # and the other writer's message follows the range.
        h2 = c2.open(alias="shared")
        self.addCleanup(h2.close)
        h2.append(msg("t2", pb.ROLE_TOOL, "booked", tool_call_id="c2"), msg("u3", pb.ROLE_USER, "thanks"))
        h2.save()
        with self.assertRaises(sc.Conflict):
            h1.compact("u2", summary("s2", "Booking in Oslo."))
        self.assertEqual(self.ids(h1.context_messages())[0], "s1")
        h1.reload()
        h1.compact("t2", summary("s2", "Booked in Oslo."))
        self.assertEqual(self.ids(h1.context_messages()), ["s2", "u3"])
        self.assertEqual(self.ids(c1.load(id=h1.id)[1]), ["u1", "a1", "t1", "u2", "a2", "t2", "u3"])
        h1.close()
        with self.assertRaises(sc.Closed):
            h1.compact("u3", summary("s3", "closed"))
