// Tests of SessiondSession's context view (view: 'context') against a
// running daemon, with the Agents SDK's real OpenAIResponsesCompactionSession
// over it and a fake OpenAI client (no network). integration/node_compaction_test.go
// starts the daemon and runs them:
//
//   SESSIOND_ADDR=127.0.0.1:7437 node --test clients/node/test/compaction.test.js
'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const { OpenAIResponsesCompactionSession } = require('@openai/agents');
const { SessiondSession } = require('..');

const address = process.env.SESSIOND_ADDR;
if (!address) throw new Error('set SESSIOND_ADDR to the address of a running sessiond');

function open(opts = {}) {
  const s = new SessiondSession({ address, ...opts });
  test.after(() => s.close());
  return s;
}

const user = (text) => ({ type: 'message', role: 'user', content: text });
const answer = (text) => ({ type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text }] });
const call = (id) => ({ type: 'function_call', callId: id, name: 'get_weather', arguments: '{"city":"Oslo"}', status: 'completed' });
const result = (id) => ({ type: 'function_call_result', name: 'get_weather', callId: id, status: 'completed', output: { type: 'text', text: 'sunny' } });

// A conversation with enough non-user items to pass the SDK's threshold.
function history() {
  const items = [];
  for (let i = 0; i < 4; i++) items.push(user(`question ${i}`), call(`call_${i}`), result(`call_${i}`), answer(`answer ${i}`));
  return items;
}

test('OpenAIResponsesCompactionSession stores a compaction: the originals stay, items written meanwhile stay in the context', async () => {
  const session = open({ view: 'context' });
  const id = await session.getSessionId();
  const other = open({ sessionId: id });
  const full = open({ sessionId: id });
  const late = user('written while the summary was computed');
  const requests = [];
  const client = {
    responses: {
      async compact(req) {
        requests.push(structuredClone(req));
        // Another writer appends while the model summarises: its item must
        // neither be lost nor hidden behind a summary that never saw it.
        await other.addItems([late]);
        return {
          output: [
            { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'question 0' }] },
            { type: 'compaction', encrypted_content: 'opaque-1' },
          ],
          usage: { input_tokens: 10, output_tokens: 2, total_tokens: 12 },
        };
      },
    },
  };
  const compacting = new OpenAIResponsesCompactionSession({ client, underlyingSession: session, model: 'gpt-4.1', compactionMode: 'input' });
  const items = history();
  await compacting.addItems(items);
  assert.notEqual(await compacting.runCompaction({ force: true }), null);
  assert.equal(requests.length, 1);
  assert.equal(requests[0].input.length, items.length, 'the model was not given the whole history');

  const summary = [
    { id: undefined, type: 'message', role: 'user', content: [{ type: 'input_text', text: 'question 0' }] },
    { type: 'compaction', encrypted_content: 'opaque-1' },
  ];
  assert.deepStrictEqual(await session.getItems(), [...summary, late]);
  assert.deepStrictEqual(await compacting.getItems(), [...summary, late]);
  assert.deepStrictEqual(await session.getItems(2), [summary[1], late], 'a limit counts within the context view');
  assert.deepStrictEqual(await full.getItems(), [...items, late], 'the compaction rewrote history');

  // The next turn follows the summary; a pop takes it back, and stops at
  // the summary instead of unfolding it.
  await compacting.addItems([user('next')]);
  assert.deepStrictEqual(await session.getItems(), [...summary, late, user('next')]);
  assert.deepStrictEqual(await session.popItem(), user('next'));
  assert.deepStrictEqual(await session.popItem(), late);
  assert.equal(await session.popItem(), undefined);
  assert.deepStrictEqual(await session.getItems(), summary);
  assert.deepStrictEqual(await full.getItems(), items);
});

test('view context: clearSession empties the context view and keeps every item; items added right after become its summary', async () => {
  const alias = `ctx-clear-${process.pid}-${Date.now()}`;
  const session = open({ view: 'context', alias });
  const full = open({ sessionId: await session.getSessionId() });
  const items = history().slice(0, 4);
  await session.addItems(items);
  await session.clearSession();
  assert.deepStrictEqual(await session.getItems(), []);
  assert.equal(await session.popItem(), undefined);
  assert.deepStrictEqual(await full.getItems(), items);

  // After a read, added items are a new turn, appended as messages.
  await session.addItems([user('after the clear')]);
  assert.deepStrictEqual(await session.getItems(), [user('after the clear')]);
  assert.deepStrictEqual(await full.getItems(), [...items, user('after the clear')]);

  // Right after a clear, added items replace the history: the summary.
  await session.clearSession();
  await session.addItems([user('the summary'), { type: 'compaction', encrypted_content: 'opaque-2' }]);
  assert.deepStrictEqual(await session.getItems(), [user('the summary'), { type: 'compaction', encrypted_content: 'opaque-2' }]);
  assert.deepStrictEqual(await full.getItems(), [...items, user('after the clear')]);
  const resumed = open({ view: 'context', alias });
  assert.deepStrictEqual(await resumed.getItems(), [user('the summary'), { type: 'compaction', encrypted_content: 'opaque-2' }]);

  // Popping the last item this session appended moves where a clear ends.
  await session.getItems();
  await session.addItems([user('popped')]);
  assert.deepStrictEqual(await session.popItem(), user('popped'));
  await session.clearSession();
  assert.deepStrictEqual(await session.getItems(), []);
  assert.deepStrictEqual(await full.getItems(), [...items, user('after the clear')]);
});

test('without view context, clearSession still removes the items', async () => {
  assert.throws(() => new SessiondSession({ address, view: 'ctx' }), /view "ctx" is neither/);
  const session = open();
  await session.addItems([user('gone')]);
  await session.clearSession();
  const full = open({ sessionId: await session.getSessionId() });
  assert.deepStrictEqual(await full.getItems(), []);
});
