// Live turns: a model's answer stored in a session while it streams
// (AppendDelta, FinishMessage), as the Go SDK's client.Turn does it.
import { randomUUID } from 'node:crypto';
import * as grpc from '@grpc/grpc-js';
import type { ToolCall, Usage, WireMessage } from './items';
import { Connection, SessiondError } from './rpc';

type Ref = { namespace: string; id?: string; alias?: string };

/** The final fields of a turn (FinishOptions of the Go SDK); those given replace the message's. */
export interface FinishOptions {
  /** The tool calls the answer ends with; open until ROLE_TOOL results answer them. */
  toolCalls?: ToolCall[];
  /** The final usage. */
  usage?: Usage;
  /** The model that wrote the answer. */
  model?: string;
  /**
   * Close the message as MESSAGE_STATE_INTERRUPTED instead of COMPLETE:
   * the answer was cut short (a user's Ctrl-C, a model stream that failed).
   */
  interrupted?: boolean;
}

/**
 * A live turn: an open assistant message (MESSAGE_STATE_STREAMING) that a
 * model's answer is written into as it streams, each piece stored durably
 * when its promise resolves, so that a crash of the program, or of the
 * daemon, loses nothing acknowledged and any client can follow the turn by
 * watching the session. `finish` closes it; if the program dies first, the
 * daemon closes it as MESSAGE_STATE_INTERRUPTED after its
 * --stream-idle-timeout, keeping the text. A session holds one open message
 * at a time, as its last: appends to it fail (FAILED_PRECONDITION) until it
 * is finished.
 *
 * Made by SessiondSession's openTurn and resumeTurn. Calls may overlap:
 * they are applied one at a time, in the order they were made. A write is
 * retried while the daemon is unreachable or the call timed out: each delta
 * carries the byte offset it starts at, and the offset moves only when the
 * daemon answers, so a delta that landed before its answer was lost is not
 * added twice. The same holds when a write rejects and the caller writes
 * the same text again.
 */
export class Turn {
  /** The open message's id. */
  readonly id: string;
  private readonly conn: Connection;
  private readonly ref: Ref;
  private contentLength: number;
  private reasoningLength: number;
  private rev: string;
  // The last call made, its failure caught: each call runs after it.
  private last: Promise<unknown> = Promise.resolve();

  /** @internal Use SessiondSession.openTurn or resumeTurn. */
  constructor(conn: Connection, ref: Ref, id: string, contentLength: number, reasoningLength: number, revision: string) {
    this.conn = conn;
    this.ref = ref;
    this.id = id;
    this.contentLength = contentLength;
    this.reasoningLength = reasoningLength;
    this.rev = revision;
  }

  /** How many bytes (UTF-8) of content are stored: the next write's offset. */
  get length(): number {
    return this.contentLength;
  }

  /** The session's revision after the turn's last write (a decimal string). */
  get revision(): string {
    return this.rev;
  }

  /** Adds text to the message's content, durably. */
  async write(text: string): Promise<void> {
    if (typeof text !== 'string') throw new TypeError('Turn.write: text is not a string');
    return this.delta({ content: text });
  }

  /** Adds text to the message's reasoning, durably. */
  async writeReasoning(text: string): Promise<void> {
    if (typeof text !== 'string') throw new TypeError('Turn.writeReasoning: text is not a string');
    return this.delta({ reasoning: text });
  }

  /** Stores the usage so far, replacing the message's. */
  async setUsage(usage: Usage): Promise<void> {
    if (usage === null || typeof usage !== 'object') throw new TypeError('Turn.setUsage: usage is not an object');
    return this.delta({ usage });
  }

  /**
   * Closes the message as MESSAGE_STATE_COMPLETE (or INTERRUPTED) and
   * returns it as stored. A retry after it landed, with the same options,
   * succeeds; so does an interrupt of a message the daemon closed already.
   * Finishing a message that is no longer open otherwise is
   * FAILED_PRECONDITION.
   */
  async finish(options: FinishOptions = {}): Promise<WireMessage> {
    const { toolCalls = [], usage, model = '', interrupted = false } = options;
    const req = {
      ref: this.ref, message_id: this.id, tool_calls: toolCalls, usage, model,
      state: interrupted ? 'MESSAGE_STATE_INTERRUPTED' : 'MESSAGE_STATE_COMPLETE',
    };
    return this.serial(async () => {
      const resp = await this.conn.retrying('FinishMessage', req);
      this.rev = resp.revision;
      return resp.message as WireMessage;
    });
  }

  private delta(fields: { content?: string; reasoning?: string; usage?: Usage }): Promise<void> {
    return this.serial(async () => {
      // The offsets are read when the call runs, after the calls before it.
      const req = { ref: this.ref, message_id: this.id, offset: this.contentLength, reasoning_offset: this.reasoningLength, ...fields };
      const resp = await this.conn.retrying('AppendDelta', req);
      this.contentLength = Number(resp.length);
      this.reasoningLength = Number(resp.reasoning_length);
      this.rev = resp.revision;
    });
  }

  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.last.then(fn);
    this.last = run.catch(() => undefined);
    return run;
  }
}

const utf8Length = (s: string | undefined) => Buffer.byteLength(s ?? '', 'utf8');

/**
 * openTurn appends a copy of message to the session as its open message:
 * MESSAGE_STATE_STREAMING, ROLE_ASSISTANT when it names no role, and a
 * UUID id when it has none (the id makes a retried open a no-op).
 */
export async function openTurn(conn: Connection, ref: Ref, message: Partial<WireMessage>): Promise<Turn> {
  if (message === null || typeof message !== 'object' || Array.isArray(message)) {
    throw new TypeError('openTurn: message is not an object');
  }
  const m = {
    ...message,
    role: !message.role || message.role === 'ROLE_UNSPECIFIED' ? 'ROLE_ASSISTANT' : message.role,
    id: message.id || randomUUID(),
    state: 'MESSAGE_STATE_STREAMING',
  };
  const resp = await conn.append({ ref, messages: [m] });
  return new Turn(conn, ref, m.id, utf8Length(m.content), utf8Length(m.reasoning?.text), resp.revision);
}

/**
 * resumeTurn returns the Turn of the session's open message messageId, as
 * far as the daemon has it: a program that restarted carries on there. A
 * message that is not the session's open one (finished, interrupted by the
 * daemon, never there) is FAILED_PRECONDITION.
 */
export async function resumeTurn(conn: Connection, ref: Ref, messageId: string): Promise<Turn> {
  if (typeof messageId !== 'string') throw new TypeError('resumeTurn: messageId is not a string');
  const { session, messages } = await conn.load<WireMessage>({ ref, limit: 1, tail: true });
  const m = messages[0];
  if (m?.id !== messageId || m.state !== 'MESSAGE_STATE_STREAMING') {
    throw new SessiondError('LoadSession', grpc.status.FAILED_PRECONDITION,
      `message ${JSON.stringify(messageId)} is not the session's open message (MESSAGE_STATE_STREAMING)`);
  }
  return new Turn(conn, ref, messageId, utf8Length(m.content), utf8Length(m.reasoning?.text), session.revision);
}
