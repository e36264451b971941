// An OpenAI Agents SDK agent whose conversation lives in sessiond: each run
// resumes the session by its alias, so the agent remembers earlier runs.
// From the repository root, once built (see above), with OPENAI_API_KEY set:
//   node clients/node/example_agents.mjs 127.0.0.1:7437
import { Agent, run } from '@openai/agents';
import { SessiondSession } from 'sessiond-client';

const address = process.argv[2] || '127.0.0.1:7437';
const agent = new Agent({ name: 'Assistant', instructions: 'Answer in one short sentence.', model: 'gpt-4.1-mini' });
const session = new SessiondSession({ address, alias: 'agents-example' });
try {
  const result = await run(agent, 'What is the capital of France?', { session });
  console.log(result.finalOutput);
  console.log('session', await session.getSessionId(), 'holds', (await session.getItems()).length, 'items');
} finally {
  session.close();
}
