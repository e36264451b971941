// One turn of a Claude Agent SDK query whose transcript lives in sessiond,
// in a process of its own: the resume test runs it twice, the second time
// resuming the first's session. It prints the session id.
//
// Usage: node test/claude_turn.mjs ADDR NAMESPACE CWD PROMPT [RESUME_SESSION_ID]
// (ANTHROPIC_BASE_URL: the model stub.)
import { query } from '@anthropic-ai/claude-agent-sdk';
import { createRequire } from 'node:module';

const { SessiondSessionStore } = createRequire(import.meta.url)('..');
const [address, namespace, cwd, prompt, resume] = process.argv.slice(2);
const sessionStore = new SessiondSessionStore({ address, namespace });
let sessionId;
try {
  for await (const m of query({ prompt, options: { sessionStore, cwd, resume, maxTurns: 1 } })) {
    if (m.type === 'result') {
      if (m.subtype !== 'success') throw new Error(`the query ended with ${m.subtype}`);
      sessionId = m.session_id;
    }
  }
} finally {
  sessionStore.close();
}
console.log(sessionId);
