// A Claude Agent SDK query whose transcript is kept in sessiond: a second
// run, on this machine or another, resumes it from there by its session id.
// From the repository root, once built (see above), with ANTHROPIC_API_KEY set:
//   node clients/node/example_claude.mjs 127.0.0.1:7437            # prints the session id
//   node clients/node/example_claude.mjs 127.0.0.1:7437 SESSION_ID # resumes it
import { query } from '@anthropic-ai/claude-agent-sdk';
import { SessiondSessionStore } from 'sessiond-client';

const [address = '127.0.0.1:7437', resume] = process.argv.slice(2);
const sessionStore = new SessiondSessionStore({ address, namespace: 'claude' });
const prompt = resume ? 'And the capital of Norway?' : 'What is the capital of France?';
try {
  for await (const message of query({ prompt, options: { sessionStore, resume, maxTurns: 1 } })) {
    if (message.type === 'result') console.log(message.subtype, message.session_id, message.result);
  }
} finally {
  sessionStore.close();
}
