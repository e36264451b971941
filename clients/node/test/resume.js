// The second process of the resume tests: it opens the session by the id
// or alias given, runs the weather agent once more, and prints as JSON what the
// fake model received first, that is, the history the session gave back.
//
// Usage: node test/resume.js ADDR SESSION_ID|ALIAS  (SESSIOND_TOKEN,
// SESSIOND_NAMESPACE and SESSIOND_CA as for session.test.js)
'use strict';

const { run } = require('@openai/agents');
const { SessiondSession } = require('..');
const { FakeModel, weatherAgent, credentials } = require('./agent');

async function main() {
  const [address, key] = process.argv.slice(2);
  const byId = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(key);
  const session = new SessiondSession({
    address, ...(byId ? { sessionId: key } : { alias: key }), token: process.env.SESSIOND_TOKEN || undefined, namespace: process.env.SESSIOND_NAMESPACE || undefined,
    credentials: credentials(),
  });
  const model = new FakeModel('second');
  const result = await run(weatherAgent(model), 'And tomorrow?', { session });
  const sessionId = await session.getSessionId();
  session.close();
  process.stdout.write(JSON.stringify({ sessionId, firstInput: model.requests[0], finalOutput: result.finalOutput }) + '\n');
}

main().catch((err) => {
  console.error(err);
  process.exitCode = 1;
});
