// Tests of SessiondSessionStore against a running daemon: the 14 contracts
// of the Claude Agent SDK's SessionStore conformance suite, then what
// sessiond adds. integration/claude_store_test.go starts the daemon and
// runs them:
//
//   SESSIOND_ADDR=127.0.0.1:7437 SESSIOND_BIN=./sessiond node --test clients/node/test/store.test.js
//
// SESSIOND_BIN is the daemon binary the kill -9 test starts and kills on
// its own data directory. SESSIOND_TOKEN_A/_B and SESSIOND_NAMESPACE_A/_B,
// when set, are tokens of a daemon with --auth-tokens (SESSIOND_AUTH_ADDR)
// that write only their own namespace.
'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { randomUUID } = require('node:crypto');
const { execFile } = require('node:child_process');
const { promisify } = require('node:util');
const grpc = require('@grpc/grpc-js');
const { SessiondSessionStore, SessiondError, ENTRY_TYPE_KEY } = require('..');
const { daemon, SKIP_WITHOUT_BIN } = require('./daemon');

const address = process.env.SESSIOND_ADDR;
if (!address) throw new Error('set SESSIOND_ADDR to the address of a running sessiond');

let sdk;
const foldSessionSummary = async (...args) => {
  sdk ??= await import('@anthropic-ai/claude-agent-sdk');
  return sdk.foldSessionSummary(...args);
};

// fresh is a store on a namespace of its own, as the suite's make_store
// gives each contract an empty store.
function fresh(opts = {}) {
  const store = new SessiondSessionStore({ address, namespace: `claude-${randomUUID()}`, ...opts });
  test.after(() => store.close());
  return store;
}

const KEY = { projectKey: 'proj', sessionId: 'sess' };
const e = (d) => ({ type: 'x', ...d });

test('contract 1: append then load returns the same entries in the same order', async () => {
  const store = fresh();
  await store.append(KEY, [e({ uuid: 'b', n: 1 }), e({ uuid: 'a', n: 2 })]);
  assert.deepStrictEqual(await store.load(KEY), [e({ uuid: 'b', n: 1 }), e({ uuid: 'a', n: 2 })]);
});

test('contract 2: load of an unknown key returns null', async () => {
  const store = fresh();
  assert.equal(await store.load({ projectKey: 'proj', sessionId: 'nope' }), null);
  await store.append(KEY, [e({ uuid: 'x', n: 1 })]);
  assert.equal(await store.load({ ...KEY, subpath: 'nope' }), null);
});

test('contract 3: several appends keep their call order', async () => {
  const store = fresh();
  await store.append(KEY, [e({ uuid: 'z', n: 1 })]);
  await store.append(KEY, [e({ uuid: 'a', n: 2 }), e({ uuid: 'm', n: 3 })]);
  await store.append(KEY, [e({ uuid: 'b', n: 4 })]);
  assert.deepStrictEqual(await store.load(KEY), [e({ uuid: 'z', n: 1 }), e({ uuid: 'a', n: 2 }), e({ uuid: 'm', n: 3 }), e({ uuid: 'b', n: 4 })]);
});

test('contract 4: append([]) is a no-op', async () => {
  const store = fresh();
  await store.append(KEY, [e({ uuid: 'a', n: 1 })]);
  await store.append(KEY, []);
  assert.deepStrictEqual(await store.load(KEY), [e({ uuid: 'a', n: 1 })]);
});

test('contract 5: subpath keys are stored apart from the main transcript', async () => {
  const store = fresh();
  const sub = { ...KEY, subpath: 'subagents/agent-1' };
  await store.append(KEY, [e({ uuid: 'm', n: 1 })]);
  await store.append(sub, [e({ uuid: 's', n: 1 })]);
  assert.deepStrictEqual(await store.load(KEY), [e({ uuid: 'm', n: 1 })]);
  assert.deepStrictEqual(await store.load(sub), [e({ uuid: 's', n: 1 })]);
});

test('contract 6: projectKey isolation', async () => {
  const store = fresh();
  await store.append({ projectKey: 'A', sessionId: 's1' }, [e({ from: 'A' })]);
  await store.append({ projectKey: 'B', sessionId: 's1' }, [e({ from: 'B' })]);
  assert.deepStrictEqual(await store.load({ projectKey: 'A', sessionId: 's1' }), [e({ from: 'A' })]);
  assert.deepStrictEqual(await store.load({ projectKey: 'B', sessionId: 's1' }), [e({ from: 'B' })]);
  assert.equal((await store.listSessions('A')).length, 1);
  assert.equal((await store.listSessions('B')).length, 1);
});

test('contract 7: listSessions returns the session ids of a project', async () => {
  const store = fresh();
  await store.append({ projectKey: 'proj', sessionId: 'a' }, [e({ n: 1 })]);
  await store.append({ projectKey: 'proj', sessionId: 'b' }, [e({ n: 1 })]);
  await store.append({ projectKey: 'other', sessionId: 'c' }, [e({ n: 1 })]);
  const sessions = await store.listSessions('proj');
  assert.deepStrictEqual(sessions.map((s) => s.sessionId).sort(), ['a', 'b']);
  for (const s of sessions) assert.ok(Number.isFinite(s.mtime) && s.mtime > 1e12, `mtime ${s.mtime} is not epoch ms`);
  assert.deepStrictEqual(await store.listSessions('never-appended-project'), []);
});

test('contract 8: listSessions leaves out subagent transcripts', async () => {
  const store = fresh();
  await store.append({ projectKey: 'proj', sessionId: 'main' }, [e({ n: 1 })]);
  await store.append({ projectKey: 'proj', sessionId: 'main', subpath: 'subagents/agent-1' }, [e({ n: 1 })]);
  assert.deepStrictEqual((await store.listSessions('proj')).map((s) => s.sessionId), ['main']);
});

test('contract 9: delete of the main transcript, then load returns null', async () => {
  const store = fresh();
  await store.delete({ projectKey: 'proj', sessionId: 'never-written' });
  await store.append(KEY, [e({ n: 1 })]);
  await store.delete(KEY);
  assert.equal(await store.load(KEY), null);
});

test('contract 10: delete of the main transcript deletes its subkeys', async () => {
  const store = fresh();
  const sub1 = { ...KEY, subpath: 'subagents/agent-1' };
  const sub2 = { ...KEY, subpath: 'subagents/agent-2' };
  const other = { projectKey: 'proj', sessionId: 'sess2' };
  const otherProj = { projectKey: 'other-proj', sessionId: KEY.sessionId };
  for (const k of [KEY, sub1, sub2, other, otherProj]) await store.append(k, [e({ n: 1 })]);
  await store.delete(KEY);
  assert.equal(await store.load(KEY), null);
  assert.equal(await store.load(sub1), null);
  assert.equal(await store.load(sub2), null);
  assert.equal((await store.load(other))?.length, 1);
  assert.equal((await store.load(otherProj))?.length, 1);
  assert.deepStrictEqual(await store.listSubkeys(KEY), []);
  assert.ok(!(await store.listSessions(KEY.projectKey)).some((s) => s.sessionId === KEY.sessionId));
});

test('contract 11: delete with a subpath removes only that subkey', async () => {
  const store = fresh();
  const sub1 = { ...KEY, subpath: 'subagents/agent-1' };
  const sub2 = { ...KEY, subpath: 'subagents/agent-2' };
  for (const k of [KEY, sub1, sub2]) await store.append(k, [e({ n: 1 })]);
  await store.delete(sub1);
  assert.equal(await store.load(sub1), null);
  assert.equal((await store.load(sub2))?.length, 1);
  assert.equal((await store.load(KEY))?.length, 1);
  assert.deepStrictEqual(await store.listSubkeys(KEY), ['subagents/agent-2']);
});

test('contract 12: listSubkeys returns the subpaths', async () => {
  const store = fresh();
  await store.append(KEY, [e({ n: 1 })]);
  await store.append({ ...KEY, subpath: 'subagents/agent-1' }, [e({ n: 1 })]);
  await store.append({ ...KEY, subpath: 'subagents/agent-2' }, [e({ n: 1 })]);
  await store.append({ projectKey: KEY.projectKey, sessionId: 'other-sess', subpath: 'subagents/agent-x' }, [e({ n: 1 })]);
  const subkeys = await store.listSubkeys(KEY);
  assert.deepStrictEqual([...subkeys].sort(), ['subagents/agent-1', 'subagents/agent-2']);
});

test('contract 13: listSubkeys leaves out the main transcript', async () => {
  const store = fresh();
  await store.append(KEY, [e({ n: 1 })]);
  assert.deepStrictEqual(await store.listSubkeys(KEY), []);
  assert.deepStrictEqual(await store.listSubkeys({ projectKey: 'proj', sessionId: 'never-appended' }), []);
});

test('contract 14: listSessionSummaries returns the persisted fold, which folds again', async () => {
  const store = fresh();
  const key = { projectKey: 'proj', sessionId: 'summ-sess' };
  await store.append(key, [e({ timestamp: '2024-01-01T00:00:00.000Z', customTitle: 'first' }), e({ timestamp: '2024-01-01T00:00:01.000Z' })]);
  await store.append(key, [e({ timestamp: '2024-01-01T00:00:02.000Z', customTitle: 'second' })]);
  await store.append({ projectKey: 'other', sessionId: 'elsewhere' }, [e({ timestamp: '2024-01-01T00:00:00.000Z' })]);
  const summaries = await store.listSessionSummaries('proj');
  assert.deepStrictEqual(summaries.map((s) => s.sessionId), ['summ-sess']);
  const [summ] = summaries;
  assert.ok(Number.isFinite(summ.mtime) && summ.mtime > 1e12, `mtime ${summ.mtime} is not epoch ms`);
  assert.equal(typeof summ.data, 'object');
  // The data is the SDK's own fold of the entries, verbatim.
  const expected = await foldSessionSummary(undefined, key, [
    e({ timestamp: '2024-01-01T00:00:00.000Z', customTitle: 'first' }), e({ timestamp: '2024-01-01T00:00:01.000Z' }),
    e({ timestamp: '2024-01-01T00:00:02.000Z', customTitle: 'second' }),
  ]);
  assert.deepStrictEqual(summ.data, expected.data);
  const refolded = await foldSessionSummary(summ, key, [e({ timestamp: '2024-01-01T00:00:03.000Z' })]);
  assert.equal(refolded.sessionId, 'summ-sess');
  assert.ok(refolded.mtime >= summ.mtime);
  assert.deepStrictEqual(await store.listSessionSummaries('never-appended-project'), []);
  await store.delete(key);
  assert.deepStrictEqual(await store.listSessionSummaries('proj'), []);
});

// rawSession loads a transcript's session with a plain gRPC client, to see
// what other clients (sessionctl, search, the viewer) see.
async function rawSession(store, key) {
  const protoLoader = require('@grpc/proto-loader');
  const def = protoLoader.loadSync('sessiond/v1/sessiond.proto', {
    includeDirs: [path.join(__dirname, '..', 'proto')],
    keepCase: true, longs: String, enums: String, defaults: true, oneofs: true,
  });
  const { SessionStoreService } = grpc.loadPackageDefinition(def).sessiond.v1;
  const client = new SessionStoreService(address, grpc.credentials.createInsecure());
  let session;
  const messages = [];
  for await (const frame of client.LoadSession({ ref: { namespace: store.namespace, id: store.sessionIdOf(key) } })) {
    session ??= frame.session;
    messages.push(...frame.messages);
  }
  client.close();
  return { session, messages };
}

// A Claude Code transcript's entries, shaped as the CLI writes them: one
// entry per content block of an API message (each with the message's
// usage), tool results as user entries, and lines that are not messages.
const transcript = () => {
  const at = (s) => `2026-01-02T03:04:${String(s).padStart(2, '0')}.000Z`;
  const usage = { input_tokens: 100, cache_read_input_tokens: 50, cache_creation_input_tokens: 10, output_tokens: 20 };
  const assistant = (uuid, s, id, content) => ({ type: 'assistant', uuid, timestamp: at(s), message: { id, type: 'message', role: 'assistant', model: 'claude-sonnet-4-5', content, usage } });
  return [
    { type: 'custom-title', customTitle: 'weather', sessionId: 'sess' },
    { type: 'user', uuid: 'u1', timestamp: at(1), message: { role: 'user', content: 'What is the weather in Paris and Oslo?' } },
    assistant('a1', 2, 'msg_1', [{ type: 'thinking', thinking: 'two cities', signature: 'sig' }]),
    assistant('a2', 3, 'msg_1', [{ type: 'text', text: 'Let me look.' }]),
    assistant('a3', 4, 'msg_1', [{ type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } }, { type: 'tool_use', id: 'toolu_2', name: 'get_weather', input: { city: 'Oslo' } }]),
    { type: 'user', uuid: 'u2', timestamp: at(5), message: { role: 'user', content: [
      { type: 'tool_result', tool_use_id: 'toolu_1', content: 'sunny' },
      { type: 'tool_result', tool_use_id: 'toolu_2', content: [{ type: 'text', text: 'snow' }] },
    ] }, toolUseResult: { stdout: 'sunny' } },
    assistant('a4', 6, 'msg_2', [{ type: 'text', text: 'Paris is sunny, Oslo has snow.' }]),
    { type: 'system', uuid: 's1', timestamp: at(7), subtype: 'informational', content: 'compacted', level: 'info' },
    { type: 'summary', summary: 'weather in two cities', leafUuid: 'a4' },
  ];
};

test('a transcript is a readable sessiond conversation, and load gives back the exact entries', async () => {
  const store = fresh();
  await store.append(KEY, transcript().slice(0, 4));
  await store.append(KEY, transcript().slice(4));
  assert.deepStrictEqual(await store.load(KEY), transcript());
  const { session, messages } = await rawSession(store, KEY);
  const view = messages.map((m) => [m.role, m.content, m.metadata[ENTRY_TYPE_KEY]]);
  assert.deepStrictEqual(view, [
    ['ROLE_SYSTEM', '', 'custom-title'],
    ['ROLE_USER', 'What is the weather in Paris and Oslo?', 'user'],
    ['ROLE_ASSISTANT', '', 'assistant'],
    ['ROLE_ASSISTANT', 'Let me look.', 'assistant'],
    ['ROLE_ASSISTANT', '', 'assistant'],
    ['ROLE_TOOL', 'sunny', 'user'],
    ['ROLE_TOOL', 'snow', 'user'],
    ['ROLE_ASSISTANT', 'Paris is sunny, Oslo has snow.', 'assistant'],
    ['ROLE_SYSTEM', 'compacted', 'system'],
    ['ROLE_SYSTEM', '', 'summary'],
  ]);
  assert.deepStrictEqual(messages[2].reasoning, { text: 'two cities', signature: 'sig' });
  assert.deepStrictEqual(messages[4].tool_calls, [
    { id: 'toolu_1', name: 'get_weather', arguments: '{"city":"Paris"}' },
    { id: 'toolu_2', name: 'get_weather', arguments: '{"city":"Oslo"}' },
  ]);
  assert.deepStrictEqual([messages[5].tool_call_id, messages[6].tool_call_id], ['toolu_1', 'toolu_2']);
  assert.deepStrictEqual(messages.map((m) => m.model), ['', '', 'claude-sonnet-4-5', 'claude-sonnet-4-5', 'claude-sonnet-4-5', '', '', 'claude-sonnet-4-5', '', '']);
  assert.equal(messages[1].created_at.seconds, String(Date.parse('2026-01-02T03:04:01.000Z') / 1000));
  // Each API message's usage counts once, though three entries carry msg_1's.
  assert.deepStrictEqual(session.usage, { input_tokens: '320', output_tokens: '40', cached_input_tokens: '100', reasoning_tokens: '0' });
  assert.deepStrictEqual(session.open_tool_call_ids, []);
  assert.deepStrictEqual(session.models, ['claude-sonnet-4-5']);
});

test('a uuid is an idempotency key: a batch sent again, whole or mixed with new entries, stores each entry once', async () => {
  const store = fresh();
  await store.append(KEY, [e({ uuid: 'a', n: 1 }), e({ uuid: 'b', n: 2 })]);
  await store.append(KEY, [e({ uuid: 'a', n: 1 }), e({ uuid: 'b', n: 2 })]);
  await store.append(KEY, [e({ uuid: 'b', n: 2 }), e({ uuid: 'c', n: 3 }), e({ uuid: 'c', n: 3 })]);
  // Entries without a uuid are appended as they come.
  await store.append(KEY, [e({ n: 4 })]);
  await store.append(KEY, [e({ n: 4 })]);
  assert.deepStrictEqual(await store.load(KEY), [e({ uuid: 'a', n: 1 }), e({ uuid: 'b', n: 2 }), e({ uuid: 'c', n: 3 }), e({ n: 4 }), e({ n: 4 })]);
});

test('a tool result whose call is not in the transcript is stored without naming it', async () => {
  const store = fresh();
  const orphan = { type: 'user', uuid: 'u9', message: { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_elsewhere', content: 'late' }] } };
  await store.append(KEY, [orphan]);
  assert.deepStrictEqual(await store.load(KEY), [orphan]);
  const { messages } = await rawSession(store, KEY);
  assert.deepStrictEqual(messages.map((m) => [m.role, m.tool_call_id, m.content]), [['ROLE_TOOL', '', 'late']]);
});

test('racing appends from two stores lose no entry and no fold', async () => {
  const namespace = `claude-${randomUUID()}`;
  const [s1, s2] = [fresh({ namespace }), fresh({ namespace })];
  const batches = Array.from({ length: 12 }, (_, i) => [
    e({ uuid: `u${i}`, timestamp: `2024-01-01T00:00:${String(i).padStart(2, '0')}.000Z`, customTitle: `t${i}` }),
  ]);
  await Promise.all(batches.map((b, i) => (i % 2 ? s1 : s2).append(KEY, b)));
  const loaded = await s1.load(KEY);
  assert.deepStrictEqual([...loaded].sort((a, b) => a.uuid.localeCompare(b.uuid)), batches.flat().sort((a, b) => a.uuid.localeCompare(b.uuid)));
  // The summary folds every entry, in the order they were stored.
  const [summ] = await s2.listSessionSummaries(KEY.projectKey);
  assert.deepStrictEqual(summ.data, (await foldSessionSummary(undefined, KEY, loaded)).data);
});

test('appends after the first share one AppendStream; a daemon without it gets AppendMessages', async () => {
  const store = fresh();
  for (let i = 0; i < 4; i++) await store.append(KEY, [e({ uuid: `s${i}`, n: i })]);
  assert.ok(store.conn.appendCall, 'no AppendStream is open after four appends');
  assert.deepStrictEqual((await store.load(KEY)).map((x) => x.uuid), ['s0', 's1', 's2', 's3']);

  // A daemon without AppendStream: a server forwarding the calls a store
  // makes to the real daemon, and nothing else (so AppendStream is
  // UNIMPLEMENTED).
  const protoLoader = require('@grpc/proto-loader');
  const def = protoLoader.loadSync('sessiond/v1/sessiond.proto', {
    includeDirs: [path.join(__dirname, '..', 'proto')], keepCase: true, longs: String, enums: String, defaults: true, oneofs: true,
  });
  const svc = grpc.loadPackageDefinition(def).sessiond.v1.SessionStoreService;
  const upstream = new svc(address, grpc.credentials.createInsecure());
  const forward = (method) => (call, cb) => upstream[method](call.request, cb);
  const server = new grpc.Server();
  server.addService(svc.service, {
    ...Object.fromEntries(['GetSession', 'CreateSession', 'AppendMessages', 'UpdateSession'].map((m) => [m, forward(m)])),
    LoadSession: (call) => {
      const up = upstream.LoadSession(call.request);
      up.on('data', (frame) => call.write(frame));
      up.on('end', () => call.end());
      up.on('error', (err) => call.destroy(err));
    },
  });
  const port = await new Promise((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))));
  test.after(() => { server.forceShutdown(); upstream.close(); });
  const namespace = `claude-${randomUUID()}`;
  const old = fresh({ address: `127.0.0.1:${port}`, namespace });
  const oldKey = { projectKey: 'proj', sessionId: 'old' };
  for (let i = 0; i < 4; i++) await old.append(oldKey, [e({ uuid: `o${i}`, n: i })]);
  assert.equal(old.conn.noAppendStream, true);
  const direct = fresh({ namespace });
  assert.deepStrictEqual((await direct.load(oldKey)).map((x) => x.uuid), ['o0', 'o1', 'o2', 'o3']);
});

test('the key is checked, naming the field', async () => {
  const store = fresh();
  await assert.rejects(store.append({ projectKey: '', sessionId: 's' }, []), /append: key.projectKey must be a non-empty string/);
  await assert.rejects(store.load({ projectKey: 'p', sessionId: 's', subpath: '' }), /load: key.subpath must be a non-empty string/);
  await assert.rejects(store.append(KEY, [{ uuid: 'x' }]), /append: entries\[0\].type is not a string/);
  await assert.rejects(store.append(KEY, [e({ uuid: 'bad\nid' })]), /append: entries\[0\].uuid must be 1-256 bytes/);
});

test('a second process resumes a transcript with the Claude Agent SDK', async () => {
  const stub = await require('./model_stub').start();
  test.after(() => stub.close());
  const namespace = `claude-${randomUUID()}`;
  const cwd = fs.mkdtempSync(path.join(os.tmpdir(), 'claude-cwd-'));
  // Each process has a config dir of its own, as on another machine: the
  // second finds the first's transcript only in sessiond.
  const turn = async (prompt, resume) => {
    const env = {
      ...process.env, ANTHROPIC_BASE_URL: stub.url, ANTHROPIC_API_KEY: 'stub', CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
      CLAUDE_CONFIG_DIR: fs.mkdtempSync(path.join(os.tmpdir(), 'claude-config-')),
    };
    const args = [path.join(__dirname, 'claude_turn.mjs'), address, namespace, cwd, prompt, ...(resume ? [resume] : [])];
    const { stdout } = await promisify(execFile)(process.execPath, args, { env, timeout: 120000 });
    return stdout.trim();
  };
  const first = await turn('What is the capital of France?');
  const second = await turn('And of Norway?', first);
  assert.equal(second, first);
  // The model, in the second process, was sent the first turn too.
  const sent = JSON.stringify(stub.requests.filter((r) => r.path === '/v1/messages').at(-1).body.messages);
  for (const want of ['What is the capital of France?', 'Paris.', 'And of Norway?']) assert.ok(sent.includes(want), `the resumed request has no ${want}`);
  // The SDK reads the whole conversation back through the store.
  sdk ??= await import('@anthropic-ai/claude-agent-sdk');
  const messages = await sdk.getSessionMessages(first, { dir: cwd, sessionStore: fresh({ namespace }) });
  const texts = messages.map((m) => [m.type, JSON.stringify(m.message.content)]);
  assert.deepStrictEqual(texts.map(([type]) => type), ['user', 'assistant', 'user', 'assistant']);
  for (const [i, want] of ['What is the capital of France?', 'Paris.', 'And of Norway?', 'Paris.'].entries()) {
    assert.ok(texts[i][1].includes(want), `message ${i} ${texts[i][1]} has no ${want}`);
  }
});

test('a kill -9 of the daemon between batches loses no acknowledged batch', SKIP_WITHOUT_BIN, async () => {
  const d = await daemon();
  // Retries ride out the daemon's restarts (up to ~10 s of backoff).
  const store = new SessiondSessionStore({ address: d.address, namespace: 'kill9', retries: 8 });
  test.after(() => store.close());
  const acked = [];
  for (let round = 0; round < 3; round++) {
    for (let i = 0; i < 5; i++) {
      const batch = [e({ uuid: `r${round}-b${i}-0`, round }), e({ uuid: `r${round}-b${i}-1`, round })];
      await store.append(KEY, batch);
      acked.push(...batch);
    }
    // A batch in flight when the daemon dies: it may land or not, and its
    // retry after the restart stores it once either way.
    const inFlight = store.append(KEY, [e({ uuid: `r${round}-late`, round })]).then(() => true, () => false);
    await d.restart();
    if (await inFlight) acked.push(e({ uuid: `r${round}-late`, round }));
  }
  const loaded = await store.load(KEY);
  const ids = loaded.map((x) => x.uuid);
  assert.equal(new Set(ids).size, ids.length, `an entry is stored twice: ${ids}`);
  assert.deepStrictEqual(loaded.filter((x) => acked.some((a) => a.uuid === x.uuid)), acked);
});

test('a store per namespace cannot read another namespace', { skip: !process.env.SESSIOND_TOKEN_A && 'SESSIOND_TOKEN_A is not set' }, async () => {
  const authAddress = process.env.SESSIOND_AUTH_ADDR;
  const [nsA, nsB] = [process.env.SESSIOND_NAMESPACE_A, process.env.SESSIOND_NAMESPACE_B];
  const open = (namespace, token) => {
    const s = new SessiondSessionStore({ address: authAddress, namespace, token });
    test.after(() => s.close());
    return s;
  };
  const a = open(nsA, process.env.SESSIOND_TOKEN_A);
  const b = open(nsB, process.env.SESSIOND_TOKEN_B);
  const key = { projectKey: 'shared-project', sessionId: `s-${randomUUID()}` };
  await a.append(key, [e({ uuid: 'secret', text: 'for A only' })]);
  await a.append({ ...key, subpath: 'subagents/agent-1' }, [e({ n: 1 })]);
  // B's store, in its own namespace, sees nothing of A's transcript.
  assert.equal(await b.load(key), null);
  assert.deepStrictEqual(await b.listSessions(key.projectKey), []);
  assert.deepStrictEqual(await b.listSessionSummaries(key.projectKey), []);
  assert.deepStrictEqual(await b.listSubkeys(key), []);
  await b.delete(key);
  assert.deepStrictEqual(await a.load(key), [e({ uuid: 'secret', text: 'for A only' })]);
  // B's token aimed at A's namespace is refused.
  const intruder = open(nsA, process.env.SESSIOND_TOKEN_B);
  for (const call of [() => intruder.load(key), () => intruder.listSessions(key.projectKey), () => intruder.append(key, [e({ n: 2 })]), () => intruder.delete(key)]) {
    await assert.rejects(call(), (err) => err instanceof SessiondError && err.code === grpc.status.PERMISSION_DENIED);
  }
  assert.deepStrictEqual(await a.load(key), [e({ uuid: 'secret', text: 'for A only' })]);
});
