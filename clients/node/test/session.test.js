// Tests of SessiondSession against a running daemon, with the real
// @openai/agents runner and a fake model. integration/lang_test.go starts
// the daemon and runs them:
//
//   SESSIOND_ADDR=127.0.0.1:7437 node --test clients/node/test/session.test.js
//
// SESSIOND_TOKEN and SESSIOND_NAMESPACE, when set, are the token every
// session here sends and the namespace it uses (a daemon with --auth-tokens);
// SESSIOND_CA, when set, is the CA file of a daemon that serves TLS.
'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { execFile } = require('node:child_process');
const { promisify } = require('node:util');
const grpc = require('@grpc/grpc-js');
const { run } = require('@openai/agents');
const { SessiondSession, SessiondError, ITEM_ENCODING_KEY } = require('..');
const { FakeModel, weatherAgent, credentials } = require('./agent');

const address = process.env.SESSIOND_ADDR;
const token = process.env.SESSIOND_TOKEN || undefined;
const namespace = process.env.SESSIOND_NAMESPACE || undefined;
if (!address) throw new Error('set SESSIOND_ADDR to the address of a running sessiond');

function open(opts = {}) {
  const s = new SessiondSession({ address, token, namespace, credentials: credentials(), ...opts });
  test.after(() => s.close());
  return s;
}

// Items of every kind an agent's history can hold, with what JSON alone
// would lose (undefined, bytes, a key named like the tag the JSON uses).
const everyKind = () => [
  { type: 'message', role: 'user', content: 'plain user text' },
  { type: 'message', role: 'system', content: 'be brief' },
  { role: 'user', content: [{ type: 'input_text', text: 'look:' }, { type: 'input_image', image: 'https://example.com/a.png', detail: 'auto' }] },
  { type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: 'plain answer' }] },
  { type: 'message', role: 'assistant', id: 'msg_1', status: 'completed', content: [{ type: 'output_text', text: 'with id', providerData: { annotations: [] } }] },
  { type: 'reasoning', content: [{ type: 'input_text', text: 'thinking' }] },
  { type: 'reasoning', id: 'rs_1', content: [], providerData: { encrypted_content: 'b64==' } },
  { type: 'function_call', callId: 'call_a', name: 'get_weather', arguments: '{ "city":"Paris",  "note": "caf\u00e9 😀" }', status: 'completed' },
  { type: 'function_call', callId: 'call_b', name: 'get_weather', arguments: '{"city":"Oslo"}', status: 'completed' },
  { type: 'function_call_result', name: 'get_weather', callId: 'call_a', status: 'completed', output: { type: 'text', text: 'sunny' } },
  { type: 'function_call_result', name: 'get_weather', callId: 'call_b', status: 'completed', output: 'a plain string', providerData: undefined },
  { type: 'computer_call', callId: 'call_c', status: 'completed', action: { type: 'click', x: 1, y: 2, button: 'left' } },
  { type: 'computer_call_result', callId: 'call_c', output: { type: 'computer_screenshot', data: new Uint8Array([0, 1, 254, 255]) } },
  { type: 'shell_call', callId: 'call_d', status: 'completed', action: { commands: ['ls'] } },
  { type: 'shell_call_output', callId: 'call_d', output: [{ stdout: 'a\n', stderr: '', outcome: { type: 'exit', exitCode: 0 } }] },
  { type: 'hosted_tool_call', id: 'ws_1', name: 'web_search_call', status: 'completed', arguments: '{"q":"x"}' },
  { type: 'compaction', encrypted_content: 'opaque' },
  { type: 'unknown', providerData: { __sessiond__: 'not a tag', list: [undefined, null, 1.5] } },
];

// rawMessages loads a session's messages with a plain gRPC client, to see
// what other clients (sessionctl, the REPL, search) see.
async function rawMessages(sessionId) {
  const protoLoader = require('@grpc/proto-loader');
  const def = protoLoader.loadSync('sessiond/v1/sessiond.proto', {
    includeDirs: [path.join(__dirname, '..', '..', '..', 'proto')],
    keepCase: true, longs: String, enums: String, defaults: true, oneofs: true,
  });
  const { SessionStoreService } = grpc.loadPackageDefinition(def).sessiond.v1;
  const client = new SessionStoreService(address, credentials() ?? grpc.credentials.createInsecure());
  const md = new grpc.Metadata();
  if (token) md.set('authorization', `Bearer ${token}`);
  const messages = [];
  for await (const frame of client.LoadSession({ ref: { namespace: namespace ?? '', id: sessionId } }, md)) messages.push(...frame.messages);
  client.close();
  return messages;
}

test('items of every kind come back from getItems deep-equal to what addItems stored', async () => {
  const session = open();
  const items = everyKind();
  await session.addItems(items.slice(0, 5));
  await session.addItems(items.slice(5));
  assert.deepStrictEqual(await session.getItems(), everyKind());
  assert.deepStrictEqual(await session.getItems(3), everyKind().slice(-3));
  assert.deepStrictEqual(await session.getItems(100), everyKind());
  assert.deepStrictEqual(await session.getItems(0), []);

  // The typed fields say what each item is.
  const raw = await rawMessages(await session.getSessionId());
  assert.equal(raw.length, items.length);
  assert.deepStrictEqual(raw.map((m) => m.role), [
    'ROLE_USER', 'ROLE_SYSTEM', 'ROLE_USER', 'ROLE_ASSISTANT', 'ROLE_ASSISTANT', 'ROLE_ASSISTANT', 'ROLE_ASSISTANT',
    'ROLE_ASSISTANT', 'ROLE_ASSISTANT', 'ROLE_TOOL', 'ROLE_TOOL', 'ROLE_ASSISTANT', 'ROLE_TOOL', 'ROLE_ASSISTANT', 'ROLE_TOOL',
    'ROLE_ASSISTANT', 'ROLE_ASSISTANT', 'ROLE_ASSISTANT',
  ]);
  assert.equal(raw[0].content, 'plain user text');
  assert.equal(raw[0].metadata[ITEM_ENCODING_KEY], 'typed'); // nothing but typed fields needed
  assert.equal(raw[0].parts.length, 0);
  assert.equal(raw[2].content, 'look:');
  assert.equal(raw[2].metadata[ITEM_ENCODING_KEY], 'json');
  assert.deepStrictEqual(raw[7].tool_calls.map((c) => [c.id, c.name, c.arguments]),
    [['call_a', 'get_weather', '{ "city":"Paris",  "note": "caf\u00e9 😀" }']]);
  assert.equal(raw[9].tool_call_id, 'call_a');
  assert.equal(raw[9].content, 'sunny');
  assert.equal(raw[5].reasoning.text, 'thinking');
  assert.equal(raw[14].tool_call_id, 'call_d');
  assert.equal(raw[14].content, 'a\n');
});

test('items that are not plain data are refused, naming where', async () => {
  const session = open();
  await assert.rejects(session.addItems([{ type: 'message', role: 'user', content: 'x', providerData: { when: new Date() } }]),
    /items\[0\]\.providerData\.when is a Date/);
  await assert.rejects(session.addItems([{ type: 'unknown', providerData: { n: NaN } }]), /items\[0\]\.providerData\.n is NaN/);
  assert.deepStrictEqual(await session.getItems(), []);
});

test('popItem removes and returns the last item; clearSession empties the session, which stays', async () => {
  const session = open({ alias: `pop-${process.pid}-${Date.now()}` });
  const items = everyKind().slice(7, 11); // two calls, then their results
  await session.addItems(items);
  assert.deepStrictEqual(await session.popItem(), items[3]);
  assert.deepStrictEqual(await session.popItem(), items[2]);
  assert.deepStrictEqual(await session.getItems(), items.slice(0, 2));
  await session.clearSession();
  assert.deepStrictEqual(await session.getItems(), []);
  assert.equal(await session.popItem(), undefined);
  await session.addItems(items.slice(0, 1));
  const again = open({ sessionId: await session.getSessionId() });
  assert.deepStrictEqual(await again.getItems(), items.slice(0, 1));
});

test('closeOpenToolCalls: getItems closes a call left open with a synthetic result, never stored', async () => {
  const alias = `open-call-${process.pid}-${Date.now()}`;
  const call = { type: 'function_call', callId: 'call_oslo', name: 'get_weather', status: 'completed', arguments: '{"city":"Oslo"}' };
  const plain = open({ alias });
  await plain.addItems([{ type: 'message', role: 'user', content: 'weather in Oslo?' }, call]);
  assert.deepStrictEqual((await plain.getItems()).map((i) => i.type ?? 'message'), ['message', 'function_call']);
  const closing = open({ alias, closeOpenToolCalls: true });
  const items = await closing.getItems();
  assert.equal(items.length, 3);
  assert.deepStrictEqual(items[1], call);
  assert.equal(items[2].type, 'function_call_result');
  assert.equal(items[2].callId, 'call_oslo');
  assert.equal(items[2].name, 'get_weather');
  assert.match(items[2].output.text, /interrupted/);
  assert.deepStrictEqual(await closing.getItems(2), items.slice(1));
  // The synthetic result is not stored: popItem removes the call itself.
  assert.deepStrictEqual(await closing.popItem(), call);
  assert.deepStrictEqual((await closing.getItems()).map((i) => i.type ?? 'message'), ['message']);
  // A real result closes the call: nothing synthetic any more.
  await closing.addItems([call, { type: 'function_call_result', callId: 'call_oslo', name: 'get_weather', status: 'completed', output: { type: 'text', text: '-3 C' } }]);
  const after = await closing.getItems();
  assert.equal(after.length, 3);
  assert.equal(after[2].output.text, '-3 C');
});

test('popItem does not remove what another writer added after it read', async () => {
  const session = open();
  const other = open({ sessionId: await session.getSessionId() });
  await session.addItems([{ type: 'message', role: 'user', content: 'first' }, { type: 'message', role: 'user', content: 'second' }]);
  // Between popItem's load and its rewind, another writer appends: the
  // rewind names the revision it read, fails with ABORTED, and popItem
  // reads again and removes the newer item.
  const client = session.conn.client;
  const rewind = client.RewindSession.bind(client);
  let interfered = false;
  client.RewindSession = (req, md, opts, cb) => {
    if (interfered) return rewind(req, md, opts, cb);
    interfered = true;
    other.addItems([{ type: 'message', role: 'user', content: 'third' }]).then(() => rewind(req, md, opts, cb), cb);
  };
  assert.deepStrictEqual(await session.popItem(), { type: 'message', role: 'user', content: 'third' });
  assert.deepStrictEqual((await session.getItems()).map((i) => i.content), ['first', 'second']);
});

test('a retried addItems after a lost answer stores its items once', async () => {
  const session = open({ retries: 3 });
  const client = session.conn.client;
  const append = client.AppendMessages.bind(client);
  let calls = 0;
  client.AppendMessages = (req, md, opts, cb) => {
    calls++;
    if (calls > 1) return append(req, md, opts, cb);
    // The append lands, but its answer is "lost": the client sees UNAVAILABLE.
    append(req, md, opts, (err) => cb(err ?? Object.assign(new Error('lost'), { code: grpc.status.UNAVAILABLE, details: 'answer lost' })));
  };
  const items = [{ type: 'message', role: 'user', content: 'once' }, everyKind()[7]];
  await session.addItems(items);
  assert.equal(calls, 2);
  assert.deepStrictEqual(await session.getItems(), items);
});

test('errors carry the gRPC code', async () => {
  const session = open({ sessionId: '00000000-0000-4000-8000-000000000000', alias: 'Bad/Alias' });
  await assert.rejects(session.getItems(), (err) => err instanceof SessiondError && err.code === grpc.status.INVALID_ARGUMENT);
  assert.throws(() => new SessiondSession({ address, sessionId: 'not-a-uuid' }), /sessionId "not-a-uuid" is not a UUID/);
  assert.throws(() => new SessiondSession({ address: '192.0.2.1:7437', token: 't' }), /refusing to send a token without TLS to 192\.0\.2\.1:7437/);
});

test('the token travels as "authorization: Bearer <token>"', { skip: !token && 'SESSIOND_TOKEN is not set' }, async () => {
  const id = await open().getSessionId(); // with the token
  for (const other of [undefined, 'not-the-token']) {
    const s = new SessiondSession({ address, namespace, sessionId: id, token: other, credentials: credentials() });
    await assert.rejects(s.getItems(), (err) => err instanceof SessiondError && err.code === grpc.status.UNAUTHENTICATED);
    s.close();
  }
});

// runWeather runs the weather agent once on session and returns the model.
async function runWeather(session, tag, input) {
  const model = new FakeModel(tag);
  const result = await run(weatherAgent(model), input, { session });
  assert.equal(result.finalOutput, `The weather: sunny in Paris (${tag})`);
  return model;
}

// The history one weather run leaves: the question, the tool call, its
// result and the answer.
function weatherTurn(tag, question) {
  return [
    { role: 'user', content: question },
    { type: 'function_call', callId: `call_${tag}`, name: 'get_weather', arguments: `{"city": "Paris", "tag": "${tag}"}` },
    { type: 'function_call_result', callId: `call_${tag}`, name: 'get_weather', output: { type: 'text', text: `sunny in Paris (${tag})` } },
    { role: 'assistant', content: [{ type: 'output_text', text: `The weather: sunny in Paris (${tag})` }] },
  ];
}

// assertHistory checks that items hold want in order, comparing only the
// fields want names.
function assertHistory(items, want) {
  const pick = (item, w) => Object.fromEntries(Object.keys(w).map((k) => [k, k === 'content' && Array.isArray(w[k]) ? item[k].map((c) => ({ type: c.type, text: c.text })) : item[k]]));
  assert.deepStrictEqual(items.map((it, i) => pick(it, want[i] ?? {})), want, `history:\n${JSON.stringify(items, null, 1)}`);
}

// resumeTest runs the weather agent on session, then runs it again in a
// second process that opens the session by key (its id or its alias), and
// checks that the second model was given the whole history.
async function resumeTest(session, key) {
  const added = []; // what the runner gave addItems, to compare deeply
  const addItems = session.addItems.bind(session);
  session.addItems = (items) => { added.push(...structuredClone(items)); return addItems(items); };
  const first = await runWeather(session, 'first', 'What is the weather in Paris?');
  assert.equal(first.requests.length, 2); // the tool call, then the answer
  assert.deepStrictEqual(await session.getItems(), added);
  assertHistory(added, weatherTurn('first', 'What is the weather in Paris?'));

  const { stdout } = await promisify(execFile)(process.execPath, [path.join(__dirname, 'resume.js'), address, key],
    { timeout: 60000 }); // SESSIOND_TOKEN and SESSIOND_NAMESPACE pass on
  const { sessionId, firstInput, finalOutput } = JSON.parse(stdout);
  assert.equal(sessionId, await session.getSessionId());
  console.log(`second process, opened by ${key}: its model's first input holds ${firstInput.length} items:`);
  for (const it of firstInput) console.log(`  ${it.type ?? 'message'} ${it.role ?? ''}${it.callId ? ' ' + it.callId : ''} ${JSON.stringify(it.content ?? it.arguments ?? it.output)}`);
  assert.equal(finalOutput, 'The weather: sunny in Paris (second)');
  assertHistory(firstInput, [...weatherTurn('first', 'What is the weather in Paris?'), { role: 'user', content: 'And tomorrow?' }]);
  assertHistory(await session.getItems(), [...weatherTurn('first', 'What is the weather in Paris?'), ...weatherTurn('second', 'And tomorrow?')]);
}

test('resume by session id: a second process gets the whole history, tool call and result included', async () => {
  const session = open();
  await resumeTest(session, await session.getSessionId());
});

test('resume by alias: a second process gets the whole history, tool call and result included', async () => {
  const alias = `weather-${process.pid}-${Date.now()}`;
  await resumeTest(open({ alias }), alias);
});

test('concurrent runs on one session lose no item', async () => {
  const id = await open().getSessionId();
  const runs = 4;
  await Promise.all(Array.from({ length: runs }, (_, i) => runWeather(open({ sessionId: id }), `r${i}`, `Weather ${i}?`)));
  const items = await open({ sessionId: id }).getItems();
  assert.equal(items.length, runs * 4);
  for (let i = 0; i < runs; i++) {
    // Each run's own items are all there, in their order.
    assertHistory(items.filter((it) => JSON.stringify(it).includes(`r${i}`) || it.content === `Weather ${i}?`), weatherTurn(`r${i}`, `Weather ${i}?`));
  }
});
