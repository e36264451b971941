// A weather agent whose Model is a fake (no network): asked anything, it
// first calls the get_weather tool, then answers with the tool's result.
// Every request the model receives is recorded, so a test can check what
// history the agent was given. credentials() is TLS with the CA file named
// by SESSIOND_CA, or undefined (plaintext) when it is not set.
'use strict';

const { Agent, Usage, tool, setTracingDisabled } = require('@openai/agents');
const fs = require('node:fs');
const grpc = require('@grpc/grpc-js');
const { z } = require('zod');

setTracingDisabled(true);

class FakeModel {
  constructor(tag) {
    this.tag = tag; // tells apart the calls of concurrent runs
    this.requests = [];
  }

  async getResponse(request) {
    this.requests.push(structuredClone(request.input));
    const input = typeof request.input === 'string' ? [{ role: 'user', content: request.input }] : request.input;
    const last = input[input.length - 1];
    let output;
    if (last.type === 'function_call_result') {
      output = [{
        type: 'message', role: 'assistant', id: `msg_${this.tag}`, status: 'completed',
        content: [{ type: 'output_text', text: `The weather: ${last.output.text ?? last.output}` }],
      }];
    } else {
      output = [{
        type: 'function_call', id: `fc_${this.tag}`, callId: `call_${this.tag}`, name: 'get_weather',
        arguments: `{"city": "Paris", "tag": "${this.tag}"}`, status: 'completed',
      }];
    }
    return { usage: new Usage(), output, responseId: `resp_${this.tag}_${this.requests.length}` };
  }

  // The tests run without streaming.
  async *getStreamedResponse() {
    throw new Error('FakeModel does not stream');
  }
}

const getWeather = tool({
  name: 'get_weather',
  description: 'The weather in a city',
  parameters: z.object({ city: z.string(), tag: z.string() }),
  execute: async ({ city, tag }) => `sunny in ${city} (${tag})`,
});

function weatherAgent(model) {
  return new Agent({ name: 'weather', instructions: 'Answer about the weather.', model, tools: [getWeather] });
}

function credentials() {
  const ca = process.env.SESSIOND_CA;
  return ca ? grpc.credentials.createSsl(fs.readFileSync(ca)) : undefined;
}

module.exports = { FakeModel, weatherAgent, credentials };
