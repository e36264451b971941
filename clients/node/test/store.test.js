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
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const { randomUUID } = require('node:crypto');
const { execFile, spawn } = require('node:child_process');
const { promisify } = require('node:util');
const grpc = require('@grpc/grpc-js');
const { SessiondSessionStore, SessiondError, ENTRY_TYPE_KEY } = require('..');

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
