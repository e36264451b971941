// Package sessiond-client: SessiondSession, a Session of the OpenAI Agents
// SDK (@openai/agents-core) kept in a sessiond daemon, so that an agent's
// conversation survives its process and another process can resume it by
// session id (or alias); and SessiondSessionStore (store.ts), a SessionStore
// of the Claude Agent SDK.
//
//   const { SessiondSession } = require('sessiond-client');
//   const session = new SessiondSession({ address: '127.0.0.1:7437', alias: 'my-agent' });
//   await run(agent, 'Hello', { session });
//
// The mapping between agent input items and sessiond messages is in items.ts
// and in the README; live turns (a model's answer stored as it streams,
// openTurn and resumeTurn) are in live.ts.
import { randomUUID } from 'node:crypto';
import * as grpc from '@grpc/grpc-js';
import type { AgentInputItem, Session } from '@openai/agents-core';
import { decodeMessage, encodeItem, encodeSummary, type WireMessage } from './items';
import { openTurn, resumeTurn, type Turn } from './live';
import { Connection, SessiondError, type StoredSession } from './rpc';

export { ITEM_ENCODING_KEY, ITEM_TYPE_KEY, type ToolCall, type Usage, type WireMessage } from './items';
export { Turn, type FinishOptions } from './live';
export { SessiondError } from './rpc';
export {
  SessiondSessionStore, ENTRY_TYPE_KEY, ENTRY_PART_KEY,
  type SessiondSessionStoreOptions, type SessionKey, type SessionStoreEntry, type SessionSummaryEntry,
} from './store';

/** Options of a SessiondSession. */
export interface SessiondSessionOptions {
  /** The daemon: "host:port" or "unix:/path/to.sock". */
  address: string;
  /**
   * The session's id (a UUID). When no session has it yet, the first call
   * creates one with this id (and alias, when given).
   */
  sessionId?: string;
  /**
   * The session's alias: without sessionId, the session with this alias is
   * used, and created when there is none.
   */
  alias?: string;
  /** The namespace ("" by default). */
  namespace?: string;
  /**
   * A bearer token, sent as `authorization: Bearer <token>` on every call.
   * Without `credentials` (TLS) it is sent only to a unix socket, localhost
   * or a loopback IP, never in clear text beyond this machine.
   */
  token?: string;
  /** Channel credentials for TLS; plaintext by default. */
  credentials?: grpc.ChannelCredentials;
  /** The title of a session this creates. */
  title?: string;
  /**
   * getItems follows each function call that no result answers (a run
   * that stopped mid-tool) with a synthetic `function_call_result` saying
   * it was interrupted, so that a model API accepts the history (false by
   * default: getItems returns exactly what addItems stored). The synthetic
   * results are the daemon's (close_open_tool_calls): never stored, and
   * popItem never returns one.
   */
  closeOpenToolCalls?: boolean;
  /** Deadline of each call in milliseconds (10000 by default). */
  timeoutMs?: number;
  /**
   * How many times a call is retried when the daemon is unreachable or the
   * call timed out (5 by default), with a backoff from 100 ms to 2 s. Safe:
   * messages carry ids set here, so a retried append never duplicates.
   */
  retries?: number;
  /**
   * Which messages getItems returns: 'full' (the default) every stored
   * one; 'context' what to send a model, the latest compaction's summary
   * and the items after its range. With 'context', clearSession keeps the
   * originals: it stores a compaction (CompactSession) whose summary holds
   * no items, and items added right after it become that summary instead,
   * so the Agents SDK's OpenAIResponsesCompactionSession compacts without
   * rewriting history.
   */
  view?: 'full' | 'context';
}

const UUID = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;

// How many times popItem reloads and tries again when another writer
// changed the session between its load and its rewind.
const MAX_CONFLICT_RETRIES = 10;

type Ref = { namespace: string; id?: string; alias?: string };

/**
 * SessiondSession keeps an agent's conversation in a sessiond session: one
 * agent input item is one message. It implements the `Session` interface of
 * @openai/agents-core and is safe for concurrent use, also from several
 * processes on the same session: appends from concurrent runs all land, in
 * the order the daemon received them.
 */
export class SessiondSession implements Session {
  private readonly conn: Connection;
  private readonly namespace: string;
  private readonly opts: SessiondSessionOptions;
  private resolving: Promise<string> | undefined;
  // With view 'context': the last message this session appended (or,
  // before it appended any, read), where clearSession's range ends; and
  // the range a clearSession just emptied, whose summary the next
  // addItems fills.
  private lastKnown: string | undefined;
  private cleared: string | undefined;

  constructor(options: SessiondSessionOptions) {
    this.conn = new Connection('SessiondSession', options);
    if (options.sessionId !== undefined && !UUID.test(options.sessionId)) {
      this.conn.close();
      throw new TypeError(`SessiondSession: sessionId ${JSON.stringify(options.sessionId)} is not a UUID`);
    }
    if (options.alias !== undefined && (typeof options.alias !== 'string' || options.alias === '')) {
      this.conn.close();
      throw new TypeError('SessiondSession: alias must be a non-empty string when given');
    }
    if (options.view !== undefined && options.view !== 'full' && options.view !== 'context') {
      this.conn.close();
      throw new TypeError(`SessiondSession: view ${JSON.stringify(options.view)} is neither 'full' nor 'context'`);
    }
    this.opts = options;
    this.namespace = options.namespace ?? '';
  }

  /** The session's id; the first call finds or creates the session. */
  async getSessionId(): Promise<string> {
    if (!this.resolving) {
      this.resolving = this.resolve().catch((err) => {
        this.resolving = undefined; // the next call tries again
        throw err;
      });
    }
    return this.resolving;
  }

  /**
   * The conversation's items, oldest first; with limit, the last limit of
   * them (a tail load: only those messages travel).
   */
  async getItems(limit?: number): Promise<AgentInputItem[]> {
    if (limit !== undefined) {
      if (!Number.isInteger(limit)) throw new TypeError(`getItems: limit ${limit} is not an integer`);
      if (limit <= 0) return [];
    }
    const ref = await this.ref();
    const close_open_tool_calls = this.opts.closeOpenToolCalls === true;
    const view = this.contextView() ? 'LOAD_VIEW_CONTEXT' : 'LOAD_VIEW_FULL';
    const { session, messages } = await this.load(limit === undefined ? { ref, close_open_tool_calls, view } : { ref, limit, tail: true, close_open_tool_calls, view });
    if (this.contextView()) this.noteRead(session, messages, limit === undefined);
    const items = messages.flatMap((m, i) => decodeMessage(m, `message ${m.id ?? i}`));
    return limit !== undefined && items.length > limit ? items.slice(items.length - limit) : items;
  }

  /**
   * Appends items, atomically (all or none), as one AppendMessages. Each
   * message gets its id here, so the retries after a lost answer never
   * store an item twice.
   */
  async addItems(items: AgentInputItem[]): Promise<void> {
    if (!Array.isArray(items)) throw new TypeError('addItems: items is not an array');
    if (items.length === 0) return;
    const now = Date.now();
    const created_at = { seconds: String(Math.floor(now / 1000)), nanos: (now % 1000) * 1e6 };
    const messages = items.map((item, i) => ({ ...encodeItem(item, randomUUID(), `items[${i}]`), created_at }));
    const ref = await this.ref();
    if (this.contextView() && this.cleared !== undefined) {
      await this.compact(ref, this.cleared, encodeSummary(items, randomUUID(), 'items'));
      this.cleared = undefined;
      return;
    }
    await this.conn.append({ ref, messages });
    if (this.contextView()) this.lastKnown = messages[messages.length - 1].id;
  }

  /**
   * Removes the last item and returns it (undefined when the session is
   * empty): a rewind by one message that names the revision it read, so it
   * never removes an item another writer added meanwhile; on such a
   * conflict it reads again and retries.
   */
  async popItem(): Promise<AgentInputItem | undefined> {
    const ref = await this.ref();
    this.cleared = undefined;
    const view = this.contextView() ? 'LOAD_VIEW_CONTEXT' : 'LOAD_VIEW_FULL';
    for (let attempt = 0; ; attempt++) {
      const { session, messages } = await this.load({ ref, limit: 1, tail: true, view });
      const count = Number(session.message_count);
      if (count === 0 || messages.length === 0) return undefined;
      const last = messages[messages.length - 1];
      // A summary is not popped: rewinding into its range would drop the
      // compaction and bring back every message it stands for.
      if (last.id === session.compaction?.summary_message_id) return undefined;
      const items = decodeMessage(last, `message ${last.id}`);
      try {
        await this.unary('RewindSession', { ref, message_count: String(count - 1), expected_revision: session.revision });
        if (last.id === this.lastKnown) this.lastKnown = undefined;
        return items[items.length - 1];
      } catch (err) {
        if (!(err instanceof SessiondError) || err.code !== grpc.status.ABORTED || attempt >= MAX_CONFLICT_RETRIES) throw err;
      }
    }
  }

  /**
   * Removes every item: a rewind to 0 messages. The session itself stays,
   * with its id, alias, title and labels, so the same id resumes it.
   */
  async clearSession(): Promise<void> {
    const ref = await this.ref();
    if (this.contextView()) {
      await this.clearContext(ref);
      return;
    }
    await this.unary('RewindSession', { ref, message_count: '0' });
  }

  /**
   * Opens a live turn (see Turn): appends a copy of message as the
   * session's open message, with MESSAGE_STATE_STREAMING, ROLE_ASSISTANT
   * when it names no role, and a UUID id when it has none. The message's
   * fields are sessiond.v1.Message's, as loaded here (`model`, `metadata`,
   * `created_at`, ...); `content` and `reasoning.text` may start the
   * answer. Until the turn is finished, addItems fails with
   * FAILED_PRECONDITION; getItems reads the answer so far.
   */
  async openTurn(message: Partial<WireMessage> = {}): Promise<Turn> {
    const turn = await openTurn(this.conn, await this.ref(), message);
    this.cleared = undefined; // items added next follow the turn: not a summary before it
    if (this.contextView()) this.lastKnown = turn.id;
    return turn;
  }

  /**
   * The Turn of the session's open message messageId, as far as the daemon
   * has it, for a program that restarted to carry on writing. A message that
   * is not open (finished, or closed by the daemon's idle timeout) is
   * FAILED_PRECONDITION.
   */
  async resumeTurn(messageId: string): Promise<Turn> {
    return resumeTurn(this.conn, await this.ref(), messageId);
  }

  /** Closes the connection to the daemon; a Turn of this session stops working too. */
  close(): void {
    this.conn.close();
  }

  private async ref(): Promise<Ref> {
    return { namespace: this.namespace, id: await this.getSessionId() };
  }

  // resolve finds the session by id or alias, or creates it.
  private async resolve(): Promise<string> {
    const { sessionId, alias, title } = this.opts;
    const ref: Ref = sessionId ? { namespace: this.namespace, id: sessionId.toLowerCase() } : { namespace: this.namespace, alias };
    if (sessionId || alias) {
      try {
        const resp = await this.retrying('GetSession', { ref });
        return resp.session.id;
      } catch (err) {
        if (!(err instanceof SessiondError) || err.code !== grpc.status.NOT_FOUND) throw err;
      }
    }
    // A client-chosen id makes a retried create return the session it made.
    const id = sessionId ? sessionId.toLowerCase() : randomUUID();
    try {
      const resp = await this.retrying('CreateSession', { namespace: this.namespace, id, alias: alias ?? '', title: title ?? '' });
      return resp.session.id;
    } catch (err) {
      // Another process created it first: use theirs. (With both an id
      // and an alias, the alias may belong to another session instead:
      // then the id is still unknown, and the create's error says why.)
      if (!(err instanceof SessiondError) || err.code !== grpc.status.ALREADY_EXISTS || !(sessionId || alias)) throw err;
      try {
        const resp = await this.retrying('GetSession', { ref });
        return resp.session.id;
      } catch (again) {
        if (again instanceof SessiondError && again.code === grpc.status.NOT_FOUND) throw err;
        throw again;
      }
    }
  }

  private contextView(): boolean {
    return this.opts.view === 'context';
  }

  // noteRead remembers, before this session appends, the last message a
  // whole read of the context view returned (the summary stands for its
  // compaction's range). A read ends a clearSession's pending summary.
  private noteRead(session: StoredSession, messages: WireMessage[], whole: boolean): void {
    this.cleared = undefined;
    if (!whole || this.lastKnown !== undefined || messages.length === 0) return;
    const last = messages[messages.length - 1];
    this.lastKnown = last.id === session.compaction?.summary_message_id ? session.compaction?.through_message_id : last.id;
  }

  // clearContext empties the context view with a compaction whose summary
  // holds no items, over the messages up to the last this session knows
  // (see lastKnown): messages other writers added after it stay in the
  // context view, never hidden by a summary that did not see them.
  private async clearContext(ref: Ref): Promise<void> {
    let through = this.lastKnown;
    if (through === undefined) {
      const { messages } = await this.load({ ref, limit: 1, tail: true, view: 'LOAD_VIEW_FULL' });
      const last = messages[messages.length - 1];
      if (last?.id === undefined) return;
      through = last.id;
    }
    await this.compact(ref, through, encodeSummary([], randomUUID(), 'items'));
    this.cleared = through;
  }

  // compact stores a compaction; its range is named, so it needs no
  // expected revision, and a retry with the same summary id is a no-op.
  private async compact(ref: Ref, through: string, summary: WireMessage): Promise<void> {
    await this.retrying('CompactSession', { ref, through_message_id: through, summary });
  }

  private unary(method: string, req: object): Promise<any> {
    return this.conn.unary(method, req);
  }

  private retrying(method: string, req: object): Promise<any> {
    return this.conn.retrying(method, req);
  }

  private load(req: object): Promise<{ session: StoredSession; messages: WireMessage[] }> {
    return this.conn.load<WireMessage>(req);
  }
}
