// Tests of live turns (SessiondSession.openTurn, resumeTurn and Turn)
// against a running daemon. integration/node_live_test.go starts the daemon
// and runs them:
//
//   SESSIOND_ADDR=127.0.0.1:7437 SESSIOND_BIN=./sessiond node --test clients/node/test/live.test.js
//
// SESSIOND_BIN is the daemon binary the restart and idle-timeout tests
// start on data directories of their own.
'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const net = require('node:net');
const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const { SessiondSession, SessiondError } = require('..');
const { daemon, SKIP_WITHOUT_BIN } = require('./daemon');

const address = process.env.SESSIOND_ADDR;
if (!address) throw new Error('set SESSIOND_ADDR to the address of a running sessiond');

function open(opts = {}) {
  const s = new SessiondSession({ address, ...opts });
  test.after(() => s.close());
  return s;
}

// A plain gRPC client, to see what other clients see and to send what a
// retry would send.
const { SessionStoreService } = grpc.loadPackageDefinition(protoLoader.loadSync('sessiond/v1/sessiond.proto', {
  includeDirs: [path.join(__dirname, '..', '..', '..', 'proto')],
  keepCase: true, longs: String, enums: String, defaults: true, oneofs: true,
})).sessiond.v1;
const raw = new SessionStoreService(address, grpc.credentials.createInsecure());
test.after(() => raw.close());

const call = (method, req) => new Promise((resolve, reject) => raw[method](req, (err, resp) => (err ? reject(err) : resolve(resp))));

async function load(id) {
  let session;
  const messages = [];
  for await (const frame of raw.LoadSession({ ref: { id } })) {
    session ??= frame.session;
    messages.push(...frame.messages);
  }
  return { session, messages };
}

const last = async (id) => (await load(id)).messages.at(-1);

// watch subscribes to the session's changes from now on and resolves, once
// the daemon has the subscription (it sends the headers then), to a
// promise of the events up to the first EVENT_TYPE_FINISHED.
function watch(id) {
  const stream = raw.WatchSession({ ref: { id }, from_revision: 0 });
  return new Promise((subscribed, failed) => {
    const events = new Promise((resolve, reject) => {
      const got = [];
      stream.on('data', (ev) => {
        got.push(ev);
        if (ev.type === 'EVENT_TYPE_FINISHED') {
          stream.cancel();
          resolve(got);
        }
      });
      stream.on('error', (err) => {
        if (err.code === grpc.status.CANCELLED) return;
        reject(err);
        failed(err);
      });
    });
    stream.on('metadata', () => subscribed({ events }));
  });
}

// rejectsWith asserts that promise rejects with a SessiondError of code.
async function rejectsWith(promise, code, what) {
  await assert.rejects(promise, (err) => {
    assert.ok(err instanceof SessiondError, `${what}: ${err}`);
    assert.equal(err.code, code, `${what}: ${err.message}`);
    return true;
  });
}

const bytes = (s) => Buffer.byteLength(s, 'utf8');

test('writes are stored in order, each durable when it resolves, and a watcher sees them as they come', async () => {
  const session = open();
  const id = await session.getSessionId();
  await session.addItems([{ type: 'message', role: 'user', content: 'Tell me a story' }]);
  const { events } = await watch(id);
  const turn = await session.openTurn({ model: 'stub-model' });

  await turn.write('Once');
  assert.equal((await last(id)).content, 'Once', 'a resolved write is not in the session');
  // Calls made at once are applied one by one, in the order they were made.
  const pieces = [' upon', ' a', ' tíme', ' 😀', ','];
  await Promise.all([turn.writeReasoning('plot'), ...pieces.map((p) => turn.write(p)), turn.writeReasoning(' twist')]);
  const text = 'Once' + pieces.join('');
  const stored = await last(id);
  assert.equal(stored.content, text);
  assert.equal(stored.reasoning.text, 'plot twist');
  assert.equal(stored.state, 'MESSAGE_STATE_STREAMING');
  assert.equal(turn.length, bytes(text));
  assert.equal(turn.revision, (await load(id)).session.revision);
  // getItems of another process reads the answer so far.
  assert.deepStrictEqual((await open({ sessionId: id }).getItems()).at(-1),
    { type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text }] });

  const usage = { input_tokens: 12, output_tokens: 7, cached_input_tokens: 0, reasoning_tokens: 2 };
  const toolCalls = [{ id: 'call_1', name: 'lookup', arguments: '{"q": "dragons"}' }];
  const done = await turn.finish({ model: 'stub-model-2', usage, toolCalls });
  assert.equal(done.state, 'MESSAGE_STATE_COMPLETE');
  assert.equal(done.content, text);
  assert.equal(done.model, 'stub-model-2');
  assert.deepStrictEqual(done.usage, { input_tokens: '12', output_tokens: '7', cached_input_tokens: '0', reasoning_tokens: '2' });
  assert.deepStrictEqual(done.tool_calls, toolCalls);
  assert.deepStrictEqual(await last(id), done);
  assert.equal(turn.revision, (await load(id)).session.revision);

  // The watcher saw the open message, every delta once at the offset it
  // held, and the finished message whole.
  const evs = await events;
  assert.equal(evs[0].type, 'EVENT_TYPE_APPENDED');
  assert.equal(evs[0].messages[0].id, turn.id);
  assert.equal(evs[0].messages[0].state, 'MESSAGE_STATE_STREAMING');
  let content = '';
  let reasoning = '';
  for (const ev of evs.slice(1, -1)) {
    assert.equal(ev.type, 'EVENT_TYPE_DELTA');
    assert.equal(ev.delta.message_id, turn.id);
    if (ev.delta.content) {
      assert.equal(Number(ev.delta.offset), bytes(content));
      content += ev.delta.content;
    }
    if (ev.delta.reasoning) {
      assert.equal(Number(ev.delta.reasoning_offset), bytes(reasoning));
      reasoning += ev.delta.reasoning;
    }
  }
  assert.equal(content, text);
  assert.equal(reasoning, 'plot twist');
  assert.equal(evs.length, 2 + 1 + pieces.length + 2, 'one event per write');
  assert.equal(evs.at(-1).type, 'EVENT_TYPE_FINISHED');
  assert.deepStrictEqual(evs.at(-1).messages[0], done);
});

test('openTurn copies the message: assistant role, an id and the open state by default; its content starts the answer', async () => {
  const session = open();
  const id = await session.getSessionId();
  const message = { content: 'Ça ', metadata: { k: 'v' } };
  const turn = await session.openTurn(message);
  assert.deepStrictEqual(message, { content: 'Ça ', metadata: { k: 'v' } }, 'openTurn changed the caller\'s message');
  assert.match(turn.id, /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
  assert.equal(turn.length, bytes('Ça '));
  await turn.write('va');
  const stored = await last(id);
  assert.equal(stored.id, turn.id);
  assert.equal(stored.role, 'ROLE_ASSISTANT');
  assert.equal(stored.content, 'Ça va');
  assert.deepStrictEqual(stored.metadata, { k: 'v' });
  await turn.finish();

  const named = await session.openTurn({ id: 'answer-2', reasoning: { text: 'hm' } });
  assert.equal(named.id, 'answer-2');
  await named.writeReasoning('m');
  assert.equal((await last(id)).reasoning.text, 'hmm');
  await named.finish();
});

test('with view \'context\', a turn is an item the session wrote: clearSession covers it, and the next items follow it', async () => {
  const session = open({ view: 'context' });
  const answer = (text) => ({ type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text }] });
  await session.addItems([{ type: 'message', role: 'user', content: 'q1' }]);
  const first = await session.openTurn();
  await first.write('a1');
  await first.finish();
  await session.clearSession(); // a compaction through the turn's message
  assert.deepStrictEqual(await session.getItems(), []);

  await session.clearSession();
  const second = await session.openTurn(); // after a clear: not the clear's summary
  await second.write('a2');
  await second.finish();
  await session.addItems([{ type: 'message', role: 'user', content: 'q3' }]);
  assert.deepStrictEqual(await session.getItems(), [answer('a2'), { type: 'message', role: 'user', content: 'q3' }]);
});

// proxy forwards TCP connections to target. After dropNextAnswer(), the
// connection that next carries the headers of an answer (an HTTP/2 HEADERS
// frame on a stream) is cut before they pass: the daemon has done the call,
// the client never hears of it.
async function proxy(target) {
  const [host, port] = [target.slice(0, target.lastIndexOf(':')), Number(target.slice(target.lastIndexOf(':') + 1))];
  const state = { armed: false, dropped: 0 };
  const server = net.createServer((client) => {
    const upstream = net.connect(port, host);
    const cut = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on('error', cut);
    upstream.on('error', cut);
    client.on('close', cut);
    upstream.on('close', cut);
    client.pipe(upstream);
    // The daemon's side is a sequence of frames from its first byte:
    // 3 bytes length, type, flags, 4 bytes stream id, then the payload.
    let pending = Buffer.alloc(0);
    upstream.on('data', (chunk) => {
      pending = Buffer.concat([pending, chunk]);
      while (pending.length >= 9) {
        const end = 9 + pending.readUIntBE(0, 3);
        if (pending.length < end) break;
        if (state.armed && pending[3] === 0x1 && (pending.readUInt32BE(5) & 0x7fffffff) !== 0) {
          state.armed = false;
          state.dropped++;
          cut();
          return;
        }
        client.write(pending.subarray(0, end));
        pending = pending.subarray(end);
      }
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  test.after(() => server.close());
  return { address: `127.0.0.1:${server.address().port}`, dropNextAnswer: () => (state.armed = true), state };
}

test('a write whose answer was lost is retried at the same offset and stored once', async () => {
  const p = await proxy(address);
  const session = open({ address: p.address });
  const id = await session.getSessionId();
  const turn = await session.openTurn();
  await turn.write('Hello');
  const rev = (await load(id)).session.revision;

  p.dropNextAnswer();
  await turn.write(', wörld'); // lands, loses its answer, is sent again
  assert.equal(p.state.dropped, 1, 'the proxy dropped no answer');
  assert.equal((await last(id)).content, 'Hello, wörld');
  assert.equal(turn.length, bytes('Hello, wörld'));
  assert.equal(turn.revision, String(Number(rev) + 1), 'the retry changed the session again');

  // What a retry sends, sent once more: nothing changes.
  const again = await call('AppendDelta', { ref: { id }, message_id: turn.id, offset: bytes('Hello'), content: ', wörld' });
  assert.deepStrictEqual([again.revision, again.length], [turn.revision, String(turn.length)]);
  await turn.write('!');
  assert.equal((await last(id)).content, 'Hello, wörld!');

  p.dropNextAnswer();
  const done = await turn.finish({ model: 'm' }); // a finish retried after it landed
  assert.equal(p.state.dropped, 2);
  assert.equal(done.state, 'MESSAGE_STATE_COMPLETE');
  assert.equal(done.content, 'Hello, wörld!');
});

test('finish closes the turn; a closed message refuses writes, the session takes appends again', async () => {
  const session = open();
  const id = await session.getSessionId();
  const turn = await session.openTurn();
  await turn.write('partial');
  await rejectsWith(session.addItems([{ type: 'message', role: 'user', content: 'too early' }]), grpc.status.FAILED_PRECONDITION, 'an append while a turn is open');
  await rejectsWith(session.openTurn(), grpc.status.FAILED_PRECONDITION, 'a second open turn');

  const done = await turn.finish({ interrupted: true });
  assert.equal(done.state, 'MESSAGE_STATE_INTERRUPTED');
  assert.equal(done.content, 'partial');
  assert.deepStrictEqual(await turn.finish({ interrupted: true }), done, 'a retried interrupt');
  await rejectsWith(turn.write('more'), grpc.status.FAILED_PRECONDITION, 'a write to a closed message');
  await rejectsWith(turn.finish(), grpc.status.FAILED_PRECONDITION, 'completing an interrupted message');
  assert.equal((await last(id)).content, 'partial');
  await session.addItems([{ type: 'message', role: 'user', content: 'next' }]);

  const second = await session.openTurn();
  await second.write('ok');
  const completed = await second.finish({ model: 'a' });
  assert.deepStrictEqual(await second.finish({ model: 'a' }), completed, 'a retried finish');
  await rejectsWith(second.finish({ model: 'b' }), grpc.status.FAILED_PRECONDITION, 'a finish with other fields');
});

test('bad input: the daemon\'s codes, and TypeErrors for what is not text', async () => {
  const session = open();
  await rejectsWith(session.openTurn({ role: 'ROLE_USER' }), grpc.status.INVALID_ARGUMENT, 'a user message opened');
  await rejectsWith(session.resumeTurn('no-such-message'), grpc.status.FAILED_PRECONDITION, 'resuming a message not there');
  const turn = await session.openTurn();
  await assert.rejects(turn.write(42), TypeError);
  await assert.rejects(turn.writeReasoning(undefined), TypeError);
  await assert.rejects(session.openTurn('text'), TypeError);
  await rejectsWith(session.resumeTurn('other'), grpc.status.FAILED_PRECONDITION, 'resuming another id');
  await turn.write('fine');
  await turn.finish();
  await rejectsWith(session.resumeTurn(turn.id), grpc.status.FAILED_PRECONDITION, 'resuming a finished message');
});

test('after a kill -9 of the daemon, a new process resumes the turn at the stored offset', SKIP_WITHOUT_BIN, async () => {
  const d = await daemon();
  // Retries ride out the daemon's start (up to ~10 s of backoff).
  const before = new SessiondSession({ address: d.address, retries: 8 });
  const id = await before.getSessionId();
  const turn = await before.openTurn();
  await turn.write('Héllo');
  await turn.write(' 😀');
  const { length, revision } = turn;
  before.close();
  await d.restart();

  const after = new SessiondSession({ address: d.address, sessionId: id, retries: 8 });
  test.after(() => after.close());
  const resumed = await after.resumeTurn(turn.id);
  assert.equal(resumed.id, turn.id);
  assert.equal(resumed.length, length);
  assert.equal(resumed.length, bytes('Héllo 😀'));
  assert.equal(resumed.revision, revision);
  await resumed.write(', again');
  const done = await resumed.finish();
  assert.equal(done.content, 'Héllo 😀, again');
  assert.equal(done.state, 'MESSAGE_STATE_COMPLETE');
});

test('a turn left quiet is closed by the daemon as interrupted, keeping its text', SKIP_WITHOUT_BIN, async () => {
  const d = await daemon('--stream-idle-timeout', '1s');
  const session = new SessiondSession({ address: d.address, retries: 8 });
  test.after(() => session.close());
  const turn = await session.openTurn();
  await turn.write('half an ans');
  // resumeTurn answers FAILED_PRECONDITION once the message is closed.
  let closed = false;
  for (const deadline = Date.now() + 20000; !closed && Date.now() < deadline;) {
    await new Promise((r) => setTimeout(r, 200));
    closed = await session.resumeTurn(turn.id).then(() => false, (err) => {
      if (err.code !== grpc.status.FAILED_PRECONDITION) throw err;
      return true;
    });
  }
  assert.ok(closed, 'the daemon did not close the quiet turn');
  await rejectsWith(turn.write('wer'), grpc.status.FAILED_PRECONDITION, 'a write after the idle timeout');
  const stored = await turn.finish({ interrupted: true }); // answers the message as the daemon closed it
  assert.equal(stored.state, 'MESSAGE_STATE_INTERRUPTED');
  assert.equal(stored.content, 'half an ans');
});
