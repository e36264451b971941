// A model's answer kept in sessiond while it streams: each piece is stored
// durably as it arrives, so a crash loses nothing written, and any client
// can follow the answer as it grows (sessionctl watch, the viewer).
// From the repository root, once built, with ANTHROPIC_API_KEY set:
//   node clients/node/example_live.mjs 127.0.0.1:7437
import Anthropic from '@anthropic-ai/sdk';
import { SessiondSession } from 'sessiond-client';

const address = process.argv[2] || '127.0.0.1:7437';
const session = new SessiondSession({ address, alias: 'live-example' });
const question = 'What is the capital of France?';
try {
  await session.addItems([{ type: 'message', role: 'user', content: question }]);
  const turn = await session.openTurn();
  // Read at once: the stream passes on no event that came before the loop.
  const stream = new Anthropic().messages.stream({
    model: 'claude-haiku-4-5', max_tokens: 1024, messages: [{ role: 'user', content: question }],
  });
  try {
    for await (const event of stream) {
      if (event.type === 'content_block_delta' && event.delta.type === 'text_delta') await turn.write(event.delta.text);
    }
  } catch (err) {
    await turn.finish({ interrupted: true }); // keeps what came
    throw err;
  }
  const { model, usage } = await stream.finalMessage();
  const answer = await turn.finish({ model, usage: { input_tokens: usage.input_tokens, output_tokens: usage.output_tokens } });
  console.log(answer.content);
  console.log('session', await session.getSessionId(), 'holds', (await session.getItems()).length, 'items');
} finally {
  session.close();
}
