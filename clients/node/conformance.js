#!/usr/bin/env node
// Conformance check of sessiond from Node.js, with @grpc/grpc-js and the
// proto loaded at run time by @grpc/proto-loader.
//
// Usage: node clients/node/conformance.js ADDR
//
// It drives a running daemon at ADDR (plaintext gRPC) through a session's
// life: create, append, load, whole save, list by label, and the error codes
// of a bad alias and of a stale expected_revision. Every check prints PASS or
// FAIL with what differed (the checks after a failure, which build on it, are
// skipped); the last line counts them, and the exit status is non-zero when any
// check failed.
'use strict';

const path = require('node:path');
const crypto = require('node:crypto');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

// Every call has a deadline, so a hung daemon fails the run instead of hanging it.
const TIMEOUT_MS = 10000;

// keepCase: field names as in the proto (tool_call_id), like every other client.
// longs: String keeps uint64 revisions exact. defaults: every field is present
// in what the client receives, so a comparison sees every field.
const packageDefinition = protoLoader.loadSync('sessiond/v1/sessiond.proto', {
  includeDirs: [path.join(__dirname, '..', '..', 'proto')],
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
});
const sessiond = grpc.loadPackageDefinition(packageDefinition).sessiond.v1;

class CheckFailed extends Error {}

function expect(cond, what) {
  if (!cond) throw new CheckFailed(what);
}

// canonical renders a value as JSON with object keys sorted, so that maps
// compare equal whatever order their entries came in.
function canonical(v) {
  if (Buffer.isBuffer(v)) return JSON.stringify(v.toString('base64'));
  if (Array.isArray(v)) return '[' + v.map(canonical).join(',') + ']';
  if (v !== null && typeof v === 'object') {
    return '{' + Object.keys(v).sort().map((k) => JSON.stringify(k) + ':' + canonical(v[k])).join(',') + '}';
  }
  return JSON.stringify(v);
}

function expectEq(got, want, what) {
  if (canonical(got) !== canonical(want)) {
    throw new CheckFailed(`${what}: got ${canonical(got)}, want ${canonical(want)}`);
  }
}

function deadline() {
  return { deadline: Date.now() + TIMEOUT_MS };
}

// unary calls a unary RPC and returns a promise of its response.
function unary(client, method, request) {
  return new Promise((resolve, reject) => {
    client[method](request, deadline(), (err, resp) => (err ? reject(err) : resolve(resp)));
  });
}

// expectCode runs fn (returning a promise) and checks it fails with the gRPC
// status code want.
async function expectCode(fn, want, what) {
  try {
    await fn();
  } catch (err) {
    if (err instanceof CheckFailed) throw err;
    expect(err.code === want,
      `${what}: status ${grpc.status[err.code] ?? err.code} (${err.details ?? err.message}), want ${grpc.status[want]}`);
    return;
  }
  throw new CheckFailed(`${what}: succeeded, want ${grpc.status[want]}`);
}

// save sends a SaveSession client stream: the header frame, then one frame per
// batch of messages.
function save(client, header, batches) {
  return new Promise((resolve, reject) => {
    const call = client.SaveSession(deadline(), (err, resp) => (err ? reject(err) : resolve(resp)));
    call.write({ header });
    for (const messages of batches) call.write({ messages });
    call.end();
  });
}

// load reads a session through the LoadSession stream: { session, messages }.
async function load(client, ref) {
  let session = null;
  const messages = [];
  let i = 0;
  for await (const frame of client.LoadSession({ ref }, deadline())) {
    if (i === 0) {
      expect(frame.session !== null, 'LoadSession: first frame carries no session');
      session = frame.session;
    } else {
      expect(frame.session === null, `LoadSession: frame ${i} carries a session; only the first may`);
    }
    messages.push(...frame.messages);
    i++;
  }
  expect(session !== null, 'LoadSession: the stream had no frames');
  expectEq(session.messages.length, 0, "LoadSession: messages inside the metadata frame's session");
  return { session, messages };
}

// normalize fills in a sent message the way the decoder presents a received
// one (defaults: true), so the two compare field by field.
function normalize(m) {
  return {
    id: '', role: 'ROLE_UNSPECIFIED', content: '', parts: [], tool_calls: [], tool_call_id: '',
    name: '', created_at: null, metadata: {}, reasoning: null, model: '', usage: null, state: 'MESSAGE_STATE_UNSPECIFIED',
    ...m,
    tool_calls: (m.tool_calls ?? []).map((c) => ({ id: '', name: '', arguments: '', ...c })),
    reasoning: m.reasoning ? { text: '', signature: '', ...m.reasoning } : null,
    usage: m.usage
      ? { input_tokens: '0', output_tokens: '0', cached_input_tokens: '0', reasoning_tokens: '0', ...m.usage }
      : null,
  };
}

// compareMessages compares stored messages with what was sent. A message sent
// without an id or created_at gets them from the server, so those are checked
// for presence; everything else must come back exactly, tool-call arguments
// byte for byte.
function compareMessages(got, sent, what) {
  expectEq(got.length, sent.length, `${what}: message count`);
  got.forEach((g, i) => {
    const w = normalize(sent[i]);
    const at = `${what}: message ${i}`;
    if (w.id) expectEq(g.id, w.id, `${at} id`);
    else expect(g.id !== '', `${at}: the server set no id`);
    expectEq(g.role, w.role, `${at} role`);
    expectEq(g.content, w.content, `${at} content`);
    expectEq(g.name, w.name, `${at} name`);
    expectEq(g.tool_call_id, w.tool_call_id, `${at} tool_call_id`);
    expectEq(g.metadata, w.metadata, `${at} metadata`);
    expectEq(g.tool_calls.length, w.tool_calls.length, `${at} tool call count`);
    g.tool_calls.forEach((gc, j) => {
      const wc = w.tool_calls[j];
      expectEq(gc.id, wc.id, `${at} tool call ${j} id`);
      expectEq(gc.name, wc.name, `${at} tool call ${j} name`);
      expect(Buffer.from(gc.arguments, 'utf8').equals(Buffer.from(wc.arguments, 'utf8')),
        `${at} tool call ${j} arguments differ byte for byte: got ${JSON.stringify(gc.arguments)}, want ${JSON.stringify(wc.arguments)}`);
    });
    expect(g.created_at !== null && Number(g.created_at.seconds) > 0, `${at}: created_at missing`);
    if (w.created_at) {
      expectEq(g.created_at, { seconds: String(w.created_at.seconds), nanos: w.created_at.nanos },
        `${at} created_at (set by the client)`);
    }
    // Nothing else may differ: with the server-filled fields copied over, the
    // stored message is the sent one.
    expectEq(g, { ...w, id: g.id, created_at: g.created_at }, `${at} (all fields)`);
  });
}

async function main(argv) {
  if (argv.length !== 3) {
    console.error('usage: node conformance.js ADDR   (e.g. 127.0.0.1:7437)');
    return 2;
  }
  const addr = argv[2];
  const run = crypto.randomBytes(6).toString('hex'); // unique names, so the script can run again against one daemon
  const alias = `conformance-node-${run}`;
  const labels = { suite: 'conformance', lang: 'node', run };

  const client = new sessiond.SessionStoreService(addr, grpc.credentials.createInsecure());
  try {
    await new Promise((resolve, reject) =>
      client.waitForReady(Date.now() + TIMEOUT_MS, (err) => (err ? reject(err) : resolve())));
  } catch (err) {
    console.error(`node conformance: cannot connect to ${addr} within ${TIMEOUT_MS / 1000}s: ${err.message}`);
    return 1;
  }
  const ref = { alias };

  const user = {
    id: 'm1-user', role: 'ROLE_USER', content: 'What is the weather in Paris and in Oslo?',
    created_at: { seconds: '1700000000', nanos: 123456789 }, metadata: { client: 'node' },
  };
  // Arguments are raw text: odd spacing, key order, escapes and non-ASCII must
  // survive untouched, and so must text that is not JSON at all.
  const argsParis = '{ "city":"Paris",  "units" : "metric", "note": "caf\\u00e9 \u00e9t\u00e9 \u{1F600}" }';
  const argsOslo = '{"city": "Oslo", "days": [1, 2.50, 3e2]} trailing, not JSON';
  const assistant = {
    id: 'm2-assistant', role: 'ROLE_ASSISTANT', content: 'Let me look both up.',
    tool_calls: [
      { id: 'call_paris', name: 'get_weather', arguments: argsParis },
      { id: 'call_oslo', name: 'get_weather', arguments: argsOslo },
    ],
    reasoning: { text: 'two cities, two calls', signature: 'sig-1' },
  };
  const resultParis = {
    id: 'm3-tool', role: 'ROLE_TOOL', name: 'get_weather', tool_call_id: 'call_paris', content: '{"temp": 21}',
  };
  const resultOslo = { // no id: the server sets one
    role: 'ROLE_TOOL', name: 'get_weather', tool_call_id: 'call_oslo', content: '{"temp": 9}',
  };
  const sent = [user, assistant, resultParis, resultOslo];
  const state = {};

  const checks = [
    ['create a session with an alias and labels', async () => {
      const { session: s } = await unary(client, 'CreateSession', { alias, title: 'Weather', labels });
      expect(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/.test(s.id),
        `session id ${JSON.stringify(s.id)} is not a lowercase canonical UUID`);
      expectEq(s.alias, alias, 'alias');
      expectEq(s.title, 'Weather', 'title');
      expectEq(s.labels, labels, 'labels');
      expectEq(s.revision, '1', 'revision of a new session');
      expectEq(s.message_count, '0', 'message_count');
      expect(s.created_at !== null, 'created_at missing');
      state.id = s.id;
    }],
    ['append a user message', async () => {
      const r = await unary(client, 'AppendMessages', { ref, messages: [user] });
      expectEq([r.revision, r.message_count], ['2', '1'], '[revision, message_count]');
    }],
    ['append an assistant message with two tool calls and two tool results', async () => {
      const r = await unary(client, 'AppendMessages',
        { ref, messages: [assistant, resultParis, resultOslo], expected_revision: 2 });
      expectEq([r.revision, r.message_count], ['3', '4'], '[revision, message_count]');
    }],
    ['load through the LoadSession stream: every field as sent', async () => {
      const { session: s, messages } = await load(client, { id: state.id });
      expectEq(s.id, state.id, 'id');
      expectEq(s.alias, alias, 'alias');
      expectEq(s.title, 'Weather', 'title');
      expectEq(s.labels, labels, 'labels');
      expectEq(s.revision, '3', 'revision');
      expectEq(s.message_count, '4', 'message_count');
      compareMessages(messages, sent, 'load');
      state.loaded = messages;
    }],
    ['save the whole session through the SaveSession stream', async () => {
      const kept = structuredClone(state.loaded.slice(0, 3));
      kept[1].content = 'Paris only, then.'; // alter the assistant's text
      kept[1].tool_calls.splice(1, 1); // and drop the Oslo call; its result goes too
      const { session: after } = await save(client, {
        ref, expected_revision: 3, title: 'Weather in Paris',
        summary: 'asked for two cities, kept one', metadata: { 'saved-by': 'node' },
      }, [kept.slice(0, 2), kept.slice(2)]); // several frames, as a long session would send
      expectEq(after.revision, '4', 'revision after the save');
      expectEq(after.message_count, '3', 'message_count after the save');
      const { session: s, messages } = await load(client, ref);
      expectEq(s.title, 'Weather in Paris', 'title after the save');
      expectEq(s.summary, 'asked for two cities, kept one', 'summary after the save');
      expectEq(s.metadata, { 'saved-by': 'node' }, 'metadata after the save');
      expectEq(s.alias, alias, 'alias after the save (a save never changes it)');
      expectEq(s.labels, labels, 'labels after the save (a save never changes them)');
      compareMessages(messages, kept, 'load after the save');
    }],
    ['list with a label filter', async () => {
      const list = async (filter) => {
        const out = [];
        for await (const frame of client.ListSessions({ labels: filter }, deadline())) out.push(frame.session);
        return out;
      };
      const found = await list({ run, lang: 'node' });
      expectEq(found.map((s) => s.id), [state.id], 'sessions matching the labels');
      expectEq(found[0].messages.length, 0, 'messages in a listed session (metadata only)');
      expectEq((await list({ run, lang: 'cobol' })).map((s) => s.id), [],
        'sessions matching a label pair no session has');
    }],
    ['a bad alias is INVALID_ARGUMENT', async () => {
      for (const bad of ['has space', 'a/b', '..', crypto.randomUUID(), 'x'.repeat(129)]) {
        await expectCode(() => unary(client, 'CreateSession', { alias: bad }),
          grpc.status.INVALID_ARGUMENT, `CreateSession alias ${JSON.stringify(bad)}`);
      }
    }],
    ['a stale expected_revision is ABORTED and changes nothing', async () => {
      const stale = { id: 'm-stale', role: 'ROLE_USER', content: 'lost race' };
      await expectCode(() => unary(client, 'AppendMessages', { ref, messages: [stale], expected_revision: 3 }),
        grpc.status.ABORTED, 'AppendMessages with expected_revision 3 at revision 4');
      await expectCode(() => save(client, { ref, expected_revision: 2, title: 'stale' }, [[stale]]),
        grpc.status.ABORTED, 'SaveSession with expected_revision 2 at revision 4');
      const { session: s } = await load(client, ref);
      expectEq([s.revision, s.message_count, s.title], ['4', '3', 'Weather in Paris'],
        '[revision, message_count, title] after the refused writes');
    }],
    ['a retried append is a no-op', async () => {
      const r = await unary(client, 'AppendMessages', { ref, messages: [state.loaded[0]] });
      expectEq([r.revision, r.message_count], ['4', '3'], '[revision, message_count] after a retry');
    }],
  ];

  let passed = 0;
  let failed = 0;
  let skipped = 0;
  for (const [name, fn] of checks) {
    if (failed) {
      // Each check builds on the session the ones before left; after a
      // failure their results would only repeat it.
      console.log(`SKIP ${name}`);
      skipped++;
      continue;
    }
    try {
      await fn();
      console.log(`PASS ${name}`);
      passed++;
    } catch (err) {
      const why = err instanceof CheckFailed ? err.message
        : err.code !== undefined ? `unexpected RPC error ${grpc.status[err.code]}: ${err.details}`
          : String(err && err.stack ? err.stack : err);
      console.log(`FAIL ${name}: ${why}`);
      failed++;
    }
  }
  client.close();
  console.log(`node conformance: ${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ''}`);
  return failed ? 1 : 0;
}

main(process.argv).then((code) => { process.exitCode = code; }, (err) => {
  console.error('node conformance:', err);
  process.exitCode = 1;
});
