// A stand-in for the model APIs, for the tests and examples to run without
// an API key: the Anthropic Messages API (POST /v1/messages, streamed or
// not) and the OpenAI Responses API (POST /v1/responses). Every answer is
// the same short text; every request is kept, for the tests to check what
// the model was sent.
//
// As a program it prints its base URL and serves until killed:
//   node test/model_stub.js   ->   http://127.0.0.1:PORT
'use strict';

const http = require('node:http');

const ANSWER = 'Paris.';

function anthropicMessage(model, streaming) {
  return {
    id: `msg_stub_${Date.now()}_${Math.random().toString(36).slice(2)}`, type: 'message', role: 'assistant', model,
    content: streaming ? [] : [{ type: 'text', text: ANSWER }],
    stop_reason: streaming ? null : 'end_turn', stop_sequence: null,
    usage: { input_tokens: 12, output_tokens: streaming ? 0 : 3 },
  };
}

function openaiResponse(model) {
  return {
    id: `resp_stub_${Date.now()}`, object: 'response', created_at: Math.floor(Date.now() / 1000), status: 'completed', model,
    output: [{ type: 'message', id: `msg_stub_${Date.now()}`, status: 'completed', role: 'assistant', content: [{ type: 'output_text', text: ANSWER, annotations: [] }] }],
    usage: { input_tokens: 12, output_tokens: 3, total_tokens: 15, input_tokens_details: { cached_tokens: 0 }, output_tokens_details: { reasoning_tokens: 0 } },
  };
}

function json(res, status, body) {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

/** Starts the stub on a free loopback port: { url, requests, close() }. */
function start() {
  const requests = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      const url = req.url.split('?')[0];
      let r = {};
      try {
        r = body ? JSON.parse(body) : {};
      } catch {
        return json(res, 400, { error: { type: 'invalid_request_error', message: 'body is not JSON' } });
      }
      requests.push({ path: url, body: r });
      if (req.method === 'POST' && url === '/v1/messages/count_tokens') return json(res, 200, { input_tokens: 12 });
      if (req.method === 'POST' && url === '/v1/responses') return json(res, 200, openaiResponse(r.model));
      if (req.method !== 'POST' || url !== '/v1/messages') return json(res, 404, { error: { type: 'not_found_error', message: url } });
      if (!r.stream) return json(res, 200, anthropicMessage(r.model, false));
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      for (const data of [
        { type: 'message_start', message: anthropicMessage(r.model, true) },
        { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } },
        { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: ANSWER } },
        { type: 'content_block_stop', index: 0 },
        { type: 'message_delta', delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 3 } },
        { type: 'message_stop' },
      ]) res.write(`event: ${data.type}\ndata: ${JSON.stringify(data)}\n\n`);
      res.end();
    });
  });
  return new Promise((resolve) => {
    server.listen(0, '127.0.0.1', () => {
      resolve({ url: `http://127.0.0.1:${server.address().port}`, requests, close: () => new Promise((r) => server.close(r)) });
    });
  });
}

module.exports = { start, ANSWER };

if (require.main === module) {
  start().then((stub) => console.log(stub.url));
}
