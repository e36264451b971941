// SessiondSessionStore: the SessionStore of the Claude Agent SDK
// (@anthropic-ai/claude-agent-sdk, Options.sessionStore) kept in sessiond.
//
//   const { SessiondSessionStore } = require('sessiond-client');
//   const sessionStore = new SessiondSessionStore({ address: '127.0.0.1:7437', namespace: 'team-a' });
//   for await (const m of query({ prompt, options: { sessionStore } })) ...
//
// Each transcript (a SessionKey: projectKey, sessionId and, for a subagent,
// subpath) is one sessiond session in the store's namespace, whose id is
// derived from the namespace and key, so every process finds it without a
// lookup. Labels name the key, so that ListSessions finds a project's
// transcripts. Each entry is one message (a user entry with several tool
// results one message per result) that sessionctl, search and the viewer
// read like any other, and the entry itself travels verbatim as JSON in the
// message's first content part, which is what load returns.
import { createHash, randomUUID } from 'node:crypto';
import * as grpc from '@grpc/grpc-js';
import type { SessionStore } from '@anthropic-ai/claude-agent-sdk';
import { Connection, SessiondError, type ConnectionOptions, type StoredSession } from './rpc';

/** A transcript's key, as the Claude Agent SDK names it. */
export interface SessionKey {
  projectKey: string;
  sessionId: string;
  /** Set for a subagent's transcript, e.g. "subagents/agent-1". */
  subpath?: string;
}

/** One transcript line: a JSON-safe object with a string `type`. */
export interface SessionStoreEntry {
  type: string;
  uuid?: string;
  timestamp?: string;
  [k: string]: unknown;
}

/** The SDK's incrementally folded summary of a session. */
export interface SessionSummaryEntry {
  sessionId: string;
  mtime: number;
  data: Record<string, unknown>;
}

type Fold = (prev: SessionSummaryEntry | undefined, key: SessionKey, entries: SessionStoreEntry[], options?: { mtime?: number }) => SessionSummaryEntry;

/** Options of a SessiondSessionStore. */
export interface SessiondSessionStoreOptions extends ConnectionOptions {
  /** The sessiond namespace every transcript of this store lives in ("" by default). */
  namespace?: string;
  /**
   * The SDK's foldSessionSummary; by default it is imported from
   * @anthropic-ai/claude-agent-sdk the first time an append needs it.
   */
  foldSessionSummary?: Fold;
}

/** Message metadata key naming the entry's type ("user", "assistant", ...). */
export const ENTRY_TYPE_KEY = 'claude.entry_type';
/**
 * Message metadata key of the messages after the first of an entry that
 * needs several (one per tool result): "1", "2", ... They carry no JSON.
 */
export const ENTRY_PART_KEY = 'claude.entry_part';

// Session labels naming the transcript's key, and session metadata keys
// holding the folded summary and how many messages it has folded.
const LABEL_PROJECT = 'claude.project_key';
const LABEL_SESSION = 'claude.session_id';
const LABEL_SUBPATH = 'claude.subpath';
const LABEL_TRANSCRIPT = 'claude.transcript';
const META_SUMMARY = 'claude.summary';
const META_FOLDED = 'claude.summary_folded';

// How many times append and its fold reload and try again after a
// concurrent writer changed the session between their read and write.
const MAX_CONFLICT_RETRIES = 20;

interface WireMessage {
  id: string;
  role: string;
  content?: string;
  parts?: Array<{ json?: string }>;
  tool_calls?: Array<{ id: string; name: string; arguments: string }>;
  tool_call_id?: string;
  name?: string;
  created_at?: { seconds: string; nanos: number };
  metadata: Record<string, string>;
  reasoning?: { text: string; signature: string };
  model?: string;
  usage?: { input_tokens: string; output_tokens: string; cached_input_tokens: string };
}

type Obj = Record<string, unknown>;

/**
 * SessiondSessionStore implements every method of the Claude Agent SDK's
 * SessionStore against a sessiond daemon: append, load, listSessions,
 * listSessionSummaries, delete and listSubkeys. It is safe for concurrent
 * use, also from several processes and replicas on the same transcripts.
 */
export class SessiondSessionStore implements SessionStore {
  /** The sessiond namespace of every transcript of this store. */
  readonly namespace: string;
  private readonly conn: Connection;
  private fold: Fold | undefined;
  // The id of the last assistant API message whose usage a transcript
  // counted: Claude Code writes one entry per content block, each with the
  // whole message's usage, which sessiond must count once.
  private readonly lastUsage = new Map<string, string>();

  constructor(options: SessiondSessionStoreOptions) {
    this.conn = new Connection('SessiondSessionStore', options);
    this.namespace = options.namespace ?? '';
    this.fold = options.foldSessionSummary;
  }

  /** Closes the connection to the daemon. */
  close(): void {
    this.conn.close();
  }

  /**
   * Appends a batch of entries, in order, atomically. An entry's uuid is its
   * message id, so a batch sent again adds none of the entries already
   * stored; entries without a uuid are appended as they come. Then the
   * session's summary is folded (see listSessionSummaries).
   */
  async append(key: SessionKey, entries: SessionStoreEntry[]): Promise<void> {
    checkKey('append', key);
    if (!Array.isArray(entries)) throw new TypeError('append: entries is not an array');
    entries.forEach((e, i) => checkEntry(e, `entries[${i}]`));
    if (entries.length === 0) return;
    const ref = this.ref(key);
    // Entries without a uuid get their ids now, once, so that the retries
    // below never store one of them twice.
    const ids = entries.map((e) => (typeof e.uuid === 'string' && e.uuid !== '' ? e.uuid : randomUUID()));
    let pending = dedupe(entries.map((entry, i) => ({ entry, id: ids[i] })));
    const usage = this.usages(key, pending);
    for (let attempt = 0; pending.length > 0; attempt++) {
      const session = await this.ensure(key);
      const open = new Set(session.open_tool_call_ids);
      const messages = pending.flatMap((p) => encodeEntry(p.entry, p.id, open, usage.get(p.id)));
      try {
        await this.conn.append({ ref, messages });
        break;
      } catch (err) {
        if (!(err instanceof SessiondError) || attempt >= MAX_CONFLICT_RETRIES) throw err;
        if (err.code === grpc.status.ALREADY_EXISTS) {
          // Some of the batch is stored already (a retry of a batch that
          // landed, or the same entries from another process): send the rest.
          const stored = new Set((await this.messages(ref)).map((m) => m.id));
          const rest = pending.filter((p) => !stored.has(p.id));
          if (rest.length === pending.length) throw err;
          pending = rest;
        } else if (err.code !== grpc.status.NOT_FOUND && !(err.code === grpc.status.INVALID_ARGUMENT && /tool_call/.test(err.message))) {
          // NOT_FOUND: deleted meanwhile, ensure creates it again; a tool
          // call pairing refused: another writer answered or made a call
          // meanwhile, encode again with the session's open calls.
          throw err;
        }
      }
    }
    if (key.subpath === undefined) await this.foldSummary(key);
  }

  /**
   * The entries of a transcript, in append order, deep-equal to what was
   * appended; null for a key never written (or deleted).
   */
  async load(key: SessionKey): Promise<SessionStoreEntry[] | null> {
    checkKey('load', key);
    let messages: WireMessage[];
    try {
      messages = await this.messages(this.ref(key));
    } catch (err) {
      if (err instanceof SessiondError && err.code === grpc.status.NOT_FOUND) return null;
      throw err;
    }
    const entries = decodeEntries(messages);
    return entries.length === 0 ? null : entries;
  }

  /** The main transcripts of a project, with their mtime (epoch ms of the last change). */
  async listSessions(projectKey: string): Promise<Array<{ sessionId: string; mtime: number }>> {
    checkString('listSessions', 'projectKey', projectKey);
    const sessions = await this.list({ [LABEL_PROJECT]: projectKey, [LABEL_TRANSCRIPT]: 'main' });
    return sessions.map((s) => ({ sessionId: s.labels[LABEL_SESSION], mtime: mtimeOf(s) }));
  }

  /**
   * The SDK's summaries of a project's main transcripts: foldSessionSummary's
   * data verbatim, folded inside append under the session's revision, and
   * the time of that write as mtime (the clock listSessions uses).
   */
  async listSessionSummaries(projectKey: string): Promise<SessionSummaryEntry[]> {
    checkString('listSessionSummaries', 'projectKey', projectKey);
    const sessions = await this.list({ [LABEL_PROJECT]: projectKey, [LABEL_TRANSCRIPT]: 'main' });
    return sessions
      .filter((s) => s.metadata[META_SUMMARY] !== undefined)
      .map((s) => ({ sessionId: s.labels[LABEL_SESSION], mtime: mtimeOf(s), data: JSON.parse(s.metadata[META_SUMMARY]) }));
  }

  /**
   * Deletes a transcript; a main transcript's subagent transcripts with it.
   * A key never written is no error.
   */
  async delete(key: SessionKey): Promise<void> {
    checkKey('delete', key);
    if (key.subpath === undefined) {
      for (const subpath of await this.listSubkeys(key)) await this.deleteOne({ ...key, subpath });
    }
    await this.deleteOne(key);
  }

  /** The subpaths of a session's subagent transcripts. */
  async listSubkeys(key: { projectKey: string; sessionId: string }): Promise<string[]> {
    checkKey('listSubkeys', { projectKey: key?.projectKey, sessionId: key?.sessionId });
    const sessions = await this.list({ [LABEL_PROJECT]: key.projectKey, [LABEL_SESSION]: key.sessionId, [LABEL_TRANSCRIPT]: 'subagent' });
    return sessions.map((s) => s.labels[LABEL_SUBPATH]);
  }

  /** The id of the sessiond session that holds a transcript. */
  sessionIdOf(key: SessionKey): string {
    checkKey('sessionIdOf', key);
    return sessionIdOf(this.namespace, key);
  }

  private ref(key: SessionKey) {
    return { namespace: this.namespace, id: sessionIdOf(this.namespace, key) };
  }

  private async deleteOne(key: SessionKey): Promise<void> {
    this.lastUsage.delete(sessionIdOf(this.namespace, key));
    try {
      await this.conn.retrying('DeleteSession', { ref: this.ref(key) });
    } catch (err) {
      if (!(err instanceof SessiondError) || err.code !== grpc.status.NOT_FOUND) throw err;
    }
  }

  private async messages(ref: object): Promise<WireMessage[]> {
    return (await this.conn.load<WireMessage>({ ref })).messages;
  }

  private async list(labels: Record<string, string>): Promise<StoredSession[]> {
    const frames = await this.conn.stream('ListSessions', { namespace: this.namespace, labels });
    return frames.map((f) => f.session as StoredSession);
  }

  // ensure returns the transcript's session, creating it when missing. The
  // create is the same request from every process, so a retried or
  // concurrent create finds the session made, and ALREADY_EXISTS means
  // another process made it first.
  private async ensure(key: SessionKey): Promise<StoredSession> {
    const ref = this.ref(key);
    try {
      return (await this.conn.retrying('GetSession', { ref })).session;
    } catch (err) {
      if (!(err instanceof SessiondError) || err.code !== grpc.status.NOT_FOUND) throw err;
    }
    const labels: Record<string, string> = {
      [LABEL_PROJECT]: key.projectKey, [LABEL_SESSION]: key.sessionId,
      [LABEL_TRANSCRIPT]: key.subpath === undefined ? 'main' : 'subagent',
    };
    if (key.subpath !== undefined) labels[LABEL_SUBPATH] = key.subpath;
    const title = `Claude ${key.sessionId}${key.subpath === undefined ? '' : ` ${key.subpath}`}`;
    try {
      return (await this.conn.retrying('CreateSession', { namespace: this.namespace, id: ref.id, title, labels })).session;
    } catch (err) {
      if (!(err instanceof SessiondError) || err.code !== grpc.status.ALREADY_EXISTS) throw err;
      return (await this.conn.retrying('GetSession', { ref })).session;
    }
  }

  // usages says which entries carry their API message's usage: the first
  // entry of each message, so that sessiond counts every model call once.
  private usages(key: SessionKey, pending: Array<{ entry: SessionStoreEntry; id: string }>): Map<string, Usage> {
    const id = sessionIdOf(this.namespace, key);
    const out = new Map<string, Usage>();
    for (const { entry, id: entryId } of pending) {
      const u = usageOf(entry);
      if (!u || (u.messageId !== '' && u.messageId === this.lastUsage.get(id))) continue;
      out.set(entryId, u.usage);
      this.lastUsage.set(id, u.messageId);
    }
    return out;
  }

  // foldSummary folds the messages the summary has not folded yet into it,
  // and writes it naming the revision it read: a racing append either folds
  // first (and this one reads again) or folds this batch's entries too.
  private async foldSummary(key: SessionKey): Promise<void> {
    const fold = await this.foldFunction();
    const ref = this.ref(key);
    for (let attempt = 0; ; attempt++) {
      const head = (await this.conn.retrying('GetSession', { ref })).session as StoredSession;
      const folded = Number(head.metadata[META_FOLDED] ?? '0');
      const count = Number(head.message_count);
      if (folded >= count) return;
      const { session, messages } = await this.conn.load<WireMessage>({ ref, offset: String(folded) });
      if (session.revision !== head.revision) continue;
      const prevData = session.metadata[META_SUMMARY];
      const prev = prevData === undefined ? undefined : { sessionId: key.sessionId, mtime: mtimeOf(session), data: JSON.parse(prevData) };
      const next = fold(prev, key, decodeEntries(messages), { mtime: Date.now() });
      const metadata = { ...session.metadata, [META_SUMMARY]: JSON.stringify(next.data), [META_FOLDED]: String(count) };
      try {
        await this.conn.unary('UpdateSession', {
          ref, session: { metadata }, update_mask: { paths: ['metadata'] }, expected_revision: session.revision,
        });
        return;
      } catch (err) {
        if (!(err instanceof SessiondError) || err.code !== grpc.status.ABORTED || attempt >= MAX_CONFLICT_RETRIES) throw err;
      }
    }
  }

  private async foldFunction(): Promise<Fold> {
    if (!this.fold) {
      let sdk: { foldSessionSummary: unknown };
      try {
        sdk = await import('@anthropic-ai/claude-agent-sdk');
      } catch (err) {
        throw new Error('SessiondSessionStore: append folds summaries with the Claude Agent SDK\'s foldSessionSummary: install @anthropic-ai/claude-agent-sdk, or pass the foldSessionSummary option', { cause: err });
      }
      this.fold = sdk.foldSessionSummary as Fold;
    }
    return this.fold;
  }
}

type Usage = { input_tokens: string; output_tokens: string; cached_input_tokens: string };

// sessionIdOf derives a transcript's session id from its namespace and key
// (session ids are unique across namespaces): the first 16 bytes of a
// SHA-256 of them, as a version 8 (custom) UUID.
function sessionIdOf(namespace: string, key: SessionKey): string {
  const h = createHash('sha256').update(JSON.stringify(['sessiond.claude-transcript', namespace, key.projectKey, key.sessionId, key.subpath ?? null])).digest();
  h[6] = (h[6] & 0x0f) | 0x80;
  h[8] = (h[8] & 0x3f) | 0x80;
  const x = h.subarray(0, 16).toString('hex');
  return `${x.slice(0, 8)}-${x.slice(8, 12)}-${x.slice(12, 16)}-${x.slice(16, 20)}-${x.slice(20)}`;
}

function checkString(method: string, field: string, v: unknown): void {
  if (typeof v !== 'string' || v === '') throw new TypeError(`${method}: ${field} must be a non-empty string`);
}

function checkKey(method: string, key: Partial<SessionKey>): void {
  if (key === null || typeof key !== 'object') throw new TypeError(`${method}: key is not an object`);
  checkString(method, 'key.projectKey', key.projectKey);
  checkString(method, 'key.sessionId', key.sessionId);
  if (key.subpath !== undefined) checkString(method, 'key.subpath', key.subpath);
}

// validId says whether s is a valid sessiond message, tool-call or model
// id: 1-256 bytes of UTF-8 without control characters.
function validId(s: unknown): s is string {
  return typeof s === 'string' && s !== '' && Buffer.byteLength(s) <= 256 && !/[\u0000-\u001f\u007f-\u009f]/.test(s);
}

function checkEntry(e: unknown, where: string): void {
  if (e === null || typeof e !== 'object' || Array.isArray(e)) throw new TypeError(`append: ${where} is not an object`);
  const entry = e as Obj;
  if (typeof entry.type !== 'string') throw new TypeError(`append: ${where}.type is not a string`);
  if (entry.uuid !== undefined && !validId(entry.uuid)) {
    throw new TypeError(`append: ${where}.uuid must be 1-256 bytes without control characters`);
  }
}

// dedupe keeps the first of the entries that share an id: the uuid is an
// idempotency key within a batch too.
function dedupe<T extends { id: string }>(list: T[]): T[] {
  const seen = new Set<string>();
  return list.filter((p) => !seen.has(p.id) && (seen.add(p.id), true));
}

function mtimeOf(s: StoredSession): number {
  const t = s.updated_at;
  return t ? Number(t.seconds) * 1000 + Math.floor(t.nanos / 1e6) : 0;
}

// decodeEntries returns the entries that messages hold, in order: the JSON
// of each entry's first message. Messages other clients wrote (no entry
// type) are not entries of the transcript.
function decodeEntries(messages: WireMessage[]): SessionStoreEntry[] {
  const entries: SessionStoreEntry[] = [];
  for (const m of messages) {
    if (m.metadata?.[ENTRY_TYPE_KEY] === undefined || m.metadata[ENTRY_PART_KEY] !== undefined) continue;
    const json = m.parts?.[0]?.json;
    if (typeof json !== 'string' || json === '') throw new Error(`message ${m.id} has an entry type but no json part`);
    entries.push(JSON.parse(json));
  }
  return entries;
}

function obj(v: unknown): Obj | undefined {
  return v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Obj) : undefined;
}

// textOf is the text of a string or of the text blocks of a content list,
// one per line.
function textOf(v: unknown): string {
  if (typeof v === 'string') return v;
  if (!Array.isArray(v)) return '';
  return v.flatMap((b) => (obj(b)?.type === 'text' && typeof obj(b)!.text === 'string' ? [obj(b)!.text as string] : [])).join('\n');
}

// usageOf is what an assistant entry's API message used, in sessiond's
// terms (input counts the cache reads and writes too), and that message's id.
function usageOf(entry: SessionStoreEntry): { messageId: string; usage: Usage } | undefined {
  const message = obj(entry.message);
  const u = entry.type === 'assistant' ? obj(message?.usage) : undefined;
  if (!u) return undefined;
  const n = (k: string) => (Number.isSafeInteger(u[k]) && (u[k] as number) > 0 ? (u[k] as number) : 0);
  const cached = n('cache_read_input_tokens');
  return {
    messageId: typeof message!.id === 'string' ? message!.id : '',
    usage: {
      input_tokens: String(n('input_tokens') + cached + n('cache_creation_input_tokens')),
      output_tokens: String(n('output_tokens')),
      cached_input_tokens: String(cached),
    },
  };
}

function createdAt(entry: SessionStoreEntry): { seconds: string; nanos: number } | undefined {
  const ms = typeof entry.timestamp === 'string' ? Date.parse(entry.timestamp) : NaN;
  if (!Number.isFinite(ms)) return undefined;
  const seconds = Math.floor(ms / 1000);
  return { seconds: String(seconds), nanos: (ms - seconds * 1000) * 1e6 };
}

/**
 * encodeEntry turns an entry into its messages: the first carries the whole
 * entry as JSON; a user entry's tool results after the first are messages
 * of their own. open holds the session's unanswered tool calls, and is
 * updated: a result names its call only when the call is open, and a call
 * already open is not made twice, so the daemon's pairing rules always hold.
 */
function encodeEntry(entry: SessionStoreEntry, id: string, open: Set<string>, usage: Usage | undefined): WireMessage[] {
  const message = obj(entry.message);
  const content = message?.content;
  const base = (): WireMessage => {
    const m: WireMessage = { id, role: 'ROLE_SYSTEM', metadata: { [ENTRY_TYPE_KEY]: entry.type } };
    const at = createdAt(entry);
    if (at) m.created_at = at;
    return m;
  };
  const out: WireMessage[] = [];
  if (entry.type === 'user' && message) {
    const blocks = Array.isArray(content) ? content : [];
    const results = blocks.map(obj).filter((b): b is Obj => b?.type === 'tool_result');
    const text = textOf(content);
    if (text !== '' || results.length === 0) out.push({ ...base(), role: 'ROLE_USER', content: text });
    for (const r of results) {
      const m: WireMessage = { ...base(), role: 'ROLE_TOOL', content: textOf(r.content) };
      if (typeof r.tool_use_id === 'string' && open.has(r.tool_use_id)) {
        m.tool_call_id = r.tool_use_id;
        open.delete(r.tool_use_id);
      }
      out.push(m);
    }
  } else if (entry.type === 'assistant' && message) {
    const m: WireMessage = { ...base(), role: 'ROLE_ASSISTANT', content: textOf(content) };
    const calls: NonNullable<WireMessage['tool_calls']> = [];
    for (const b of (Array.isArray(content) ? content : []).map(obj)) {
      if (b?.type === 'thinking' && typeof b.thinking === 'string') {
        m.reasoning = { text: b.thinking, signature: typeof b.signature === 'string' ? b.signature : '' };
      } else if ((b?.type === 'tool_use' || b?.type === 'server_tool_use') && validId(b.id) && !open.has(b.id)) {
        calls.push({ id: b.id, name: typeof b.name === 'string' ? b.name : '', arguments: JSON.stringify(b.input ?? {}) });
        open.add(b.id);
      }
    }
    if (calls.length > 0) m.tool_calls = calls;
    if (validId(message.model)) m.model = message.model;
    if (usage) m.usage = usage;
    out.push(m);
  } else {
    out.push({ ...base(), content: entry.type === 'system' ? textOf(entry.content) : '' });
  }
  out[0].parts = [{ json: JSON.stringify(entry) }];
  for (let i = 1; i < out.length; i++) {
    out[i].id = `${id}#${i}`;
    out[i].metadata[ENTRY_PART_KEY] = String(i);
  }
  return out;
}
