// The mapping between the OpenAI Agents SDK's input items and sessiond
// messages: one item is one message. The typed fields (role, content,
// tool_calls, tool_call_id, name, reasoning) always say what the item is, so
// that sessionctl, the REPL and search read an agent's session like any
// other; when they cannot hold all of the item, the whole item also travels
// as JSON in a `json` content part, and that part is what comes back. Every
// item is checked by decoding its typed fields and comparing, so the choice
// is never a guess: what getItems returns deep-equals what addItems stored.
import { isDeepStrictEqual } from 'node:util';
import type { AgentInputItem } from '@openai/agents-core';

/** Metadata key naming the item's type ("message", "function_call", ...). */
export const ITEM_TYPE_KEY = 'agents.item_type';
/**
 * Metadata key saying where the item is: "typed" (the typed fields hold all
 * of it) or "json" (parts[0].json holds the whole item).
 */
export const ITEM_ENCODING_KEY = 'agents.item_encoding';

/** The sessiond.v1.Message fields this package reads and writes. */
export interface WireMessage {
  id?: string;
  role: 'ROLE_SYSTEM' | 'ROLE_USER' | 'ROLE_ASSISTANT' | 'ROLE_TOOL' | string;
  content?: string;
  parts?: Array<{ text?: string; json?: string; blob?: unknown; kind?: string }>;
  tool_calls?: ToolCall[];
  tool_call_id?: string;
  name?: string;
  created_at?: { seconds: string | number; nanos: number } | null;
  metadata?: Record<string, string>;
  reasoning?: { text?: string; signature?: string } | null;
  model?: string;
  usage?: Usage | null;
  /** MESSAGE_STATE_STREAMING for a live turn's open message (see live.ts). */
  state?: string;
}

/** A tool call, as sessiond.v1.ToolCall; arguments is JSON text, kept byte for byte. */
export interface ToolCall {
  id: string;
  name: string;
  arguments: string;
}

/** Token counts, as sessiond.v1.Usage (64-bit: numbers, or decimal strings as loaded). */
export interface Usage {
  input_tokens?: number | string;
  output_tokens?: number | string;
  cached_input_tokens?: number | string;
  reasoning_tokens?: number | string;
}

type Obj = Record<string, unknown>;

// Item types that ask for a tool to run, and those that carry a tool's
// result: a call is an assistant message with a tool call, a result a
// ROLE_TOOL message answering it (when it names the call).
const CALL_TYPES = new Set([
  'function_call', 'computer_call', 'shell_call', 'apply_patch_call',
  'hosted_tool_call', 'tool_search_call', 'program',
]);
const RESULT_TYPES = new Set([
  'function_call_result', 'computer_call_result', 'shell_call_output',
  'apply_patch_call_output', 'tool_search_output', 'program_output',
]);

const ROLES: Record<string, WireMessage['role']> = {
  user: 'ROLE_USER', system: 'ROLE_SYSTEM', assistant: 'ROLE_ASSISTANT',
};

/**
 * encodeItem turns an agent input item into the sessiond message with the
 * given id. It throws a TypeError (naming where) for a value JSON cannot
 * carry other than undefined and Uint8Array, which are tagged and kept.
 */
export function encodeItem(item: AgentInputItem, id: string, where: string): WireMessage {
  if (item === null || typeof item !== 'object' || Array.isArray(item)) {
    throw new TypeError(`${where} is not an object`);
  }
  const it = item as unknown as Obj;
  const type = typeof it.type === 'string' ? it.type : 'message';
  const msg: WireMessage = { id, role: 'ROLE_ASSISTANT', metadata: { [ITEM_TYPE_KEY]: type } };
  if (type === 'message' && typeof it.role === 'string' && ROLES[it.role]) {
    msg.role = ROLES[it.role];
    msg.content = textOf(it.content);
  } else if (CALL_TYPES.has(type)) {
    const callId = str(it.callId) || str(it.id);
    if (callId) {
      msg.tool_calls = [{ id: callId, name: str(it.name) || type, arguments: argumentsOf(it) }];
    }
  } else if (RESULT_TYPES.has(type)) {
    if (str(it.callId)) {
      msg.role = 'ROLE_TOOL';
      msg.tool_call_id = str(it.callId);
    }
    if (str(it.name)) msg.name = str(it.name);
    msg.content = textOf(it.output);
  } else if (type === 'reasoning') {
    msg.reasoning = { text: textOf(it.content) };
  }
  const typed = decodeTyped(msg);
  if (typed.length === 1 && isDeepStrictEqual(typed[0], item)) {
    msg.metadata![ITEM_ENCODING_KEY] = 'typed';
  } else {
    msg.metadata![ITEM_ENCODING_KEY] = 'json';
    msg.parts = [{ json: JSON.stringify(toTagged(item, where)) }];
  }
  return msg;
}

/**
 * decodeMessage turns a stored message back into items: the item it was
 * made from, or, for a message another client wrote, what its typed fields
 * say (one item per tool call when it holds several).
 */
export function decodeMessage(msg: WireMessage, where: string): AgentInputItem[] {
  if (msg.metadata?.[ITEM_ENCODING_KEY] === SUMMARY_ENCODING) return decodeSummary(msg, where);
  if (msg.metadata?.[ITEM_ENCODING_KEY] === 'json') {
    const part = msg.parts?.[0];
    if (typeof part?.json !== 'string' || part.json === '') {
      throw new Error(`${where} says its item is JSON but has no json part`);
    }
    return [fromTagged(JSON.parse(part.json)) as AgentInputItem];
  }
  return decodeTyped(msg);
}

// decodeTyped reads the typed fields alone.
function decodeTyped(msg: WireMessage): AgentInputItem[] {
  const content = msg.content ?? '';
  const calls = msg.tool_calls ?? [];
  switch (msg.role) {
    case 'ROLE_USER':
      return [{ type: 'message', role: 'user', content } as AgentInputItem];
    case 'ROLE_SYSTEM':
      return [{ type: 'message', role: 'system', content } as AgentInputItem];
    case 'ROLE_TOOL': {
      const item: Obj = { type: 'function_call_result', name: msg.name ?? '', callId: msg.tool_call_id ?? '', status: 'completed', output: { type: 'text', text: content } };
      return [item as unknown as AgentInputItem];
    }
  }
  const items: Obj[] = [];
  if (msg.reasoning && msg.reasoning.text) {
    items.push({ type: 'reasoning', content: [{ type: 'input_text', text: msg.reasoning.text }] });
  }
  if (content !== '' || (calls.length === 0 && items.length === 0)) {
    items.push({ type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: content }] });
  }
  for (const c of calls) {
    items.push({ type: 'function_call', callId: c.id, name: c.name, arguments: c.arguments, status: 'completed' });
  }
  return items as unknown as AgentInputItem[];
}

function str(v: unknown): string {
  return typeof v === 'string' ? v : '';
}

// textOf is the readable text of an item's content or output: a string, or
// the text of its text parts, one per line.
function textOf(v: unknown): string {
  if (typeof v === 'string') return v;
  const parts = Array.isArray(v) ? v : v && typeof v === 'object' ? [v] : [];
  const texts: string[] = [];
  for (const p of parts) {
    if (p && typeof p === 'object') {
      const o = p as Obj;
      for (const k of ['text', 'refusal', 'output', 'stdout']) {
        if (typeof o[k] === 'string') {
          texts.push(o[k] as string);
          break;
        }
      }
    }
  }
  return texts.join('\n');
}

// argumentsOf is a call's arguments as JSON text: a function call's own
// (byte for byte), else what the call asks for (action, operation, ...).
function argumentsOf(it: Obj): string {
  if (typeof it.arguments === 'string') return it.arguments;
  for (const k of ['arguments', 'action', 'operation', 'input']) {
    if (it[k] !== undefined) {
      try {
        return JSON.stringify(toTagged(it[k], 'arguments'));
      } catch {
        return '';
      }
    }
  }
  return '';
}

// The JSON of an item tags what JSON cannot say: {"__sessiond__":"undefined"},
// {"__sessiond__":"bytes","base64":...} for a Uint8Array, and an object that
// has a "__sessiond__" key of its own is wrapped as
// {"__sessiond__":"object","value":{...}}.
const TAG = '__sessiond__';

function toTagged(v: unknown, path: string): unknown {
  if (v === undefined) return { [TAG]: 'undefined' };
  if (v === null || typeof v === 'string' || typeof v === 'boolean') return v;
  if (typeof v === 'number') {
    if (!Number.isFinite(v)) throw new TypeError(`${path} is ${v}, which JSON cannot hold`);
    return v;
  }
  if (Array.isArray(v)) return v.map((e, i) => toTagged(e, `${path}[${i}]`));
  if (v instanceof Uint8Array) {
    if (Object.getPrototypeOf(v) !== Uint8Array.prototype) {
      throw new TypeError(`${path} is a ${v.constructor.name}; store a plain Uint8Array`);
    }
    return { [TAG]: 'bytes', base64: Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString('base64') };
  }
  if (typeof v === 'object') {
    const proto = Object.getPrototypeOf(v);
    if (proto !== Object.prototype && proto !== null) {
      throw new TypeError(`${path} is a ${(v as object).constructor?.name ?? 'class instance'}, not plain data`);
    }
    const out: Obj = {};
    for (const [k, e] of Object.entries(v as Obj)) setOwn(out, k, toTagged(e, `${path}.${k}`));
    return Object.prototype.hasOwnProperty.call(v, TAG) ? { [TAG]: 'object', value: out } : out;
  }
  throw new TypeError(`${path} is a ${typeof v}, which sessiond cannot store`);
}

function fromTagged(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(fromTagged);
  if (v === null || typeof v !== 'object') return v;
  const o = v as Obj;
  if (Object.prototype.hasOwnProperty.call(o, TAG)) {
    switch (o[TAG]) {
      case 'undefined':
        return undefined;
      case 'bytes':
        return new Uint8Array(Buffer.from(str(o.base64), 'base64'));
      case 'object':
        return mapValues(o.value as Obj);
    }
    throw new Error(`stored item has an unknown tag ${JSON.stringify(o[TAG])}`);
  }
  return mapValues(o);
}

function mapValues(o: Obj): Obj {
  const out: Obj = {};
  for (const [k, e] of Object.entries(o)) setOwn(out, k, fromTagged(e));
  return out;
}

// setOwn sets an own property, even one named __proto__.
function setOwn(o: Obj, k: string, v: unknown): void {
  Object.defineProperty(o, k, { value: v, enumerable: true, writable: true, configurable: true });
}

// A compaction's summary (SessiondSession with view 'context') holds the
// items that replace the compacted range, any number of them: each as JSON
// in its own part, and their text in content for readers of other clients.
const SUMMARY_ENCODING = 'json_items';

/** encodeSummary makes the summary message, with the given id, that carries items. */
export function encodeSummary(items: AgentInputItem[], id: string, where: string): WireMessage {
  const parts = items.map((item, i) => {
    if (item === null || typeof item !== 'object' || Array.isArray(item)) throw new TypeError(`${where}[${i}] is not an object`);
    return { json: JSON.stringify(toTagged(item, `${where}[${i}]`)) };
  });
  const content = items.map((item) => {
    const it = item as unknown as Obj;
    return textOf(it.content) || textOf(it.output) || `[${str(it.type) || 'message'}]`;
  }).join('\n\n');
  return { id, role: 'ROLE_SYSTEM', content, parts, metadata: { [ITEM_TYPE_KEY]: 'summary', [ITEM_ENCODING_KEY]: SUMMARY_ENCODING } };
}

function decodeSummary(msg: WireMessage, where: string): AgentInputItem[] {
  return (msg.parts ?? []).map((part, i) => {
    if (typeof part.json !== 'string' || part.json === '') throw new Error(`${where} is a summary whose part ${i} holds no item`);
    return fromTagged(JSON.parse(part.json)) as AgentInputItem;
  });
}
