// The connection to a daemon that SessiondSession and SessiondSessionStore
// share: the service loaded from the proto shipped with this package, the
// bearer token, deadlines, and retries of the calls that are safe to repeat.
import * as path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';

/** An error from the daemon, with its gRPC status code. */
export class SessiondError extends Error {
  /** The gRPC status code (grpc.status). */
  readonly code: number;
  /** The RPC that failed. */
  readonly rpc: string;
  constructor(rpc: string, code: number, details: string) {
    super(`sessiond ${rpc}: ${grpc.status[code] ?? code}: ${details}`);
    this.name = 'SessiondError';
    this.code = code;
    this.rpc = rpc;
  }
}

/** Options of a connection to the daemon. */
export interface ConnectionOptions {
  /** The daemon: "host:port" or "unix:/path/to.sock". */
  address: string;
  /**
   * A bearer token, sent as `authorization: Bearer <token>` on every call.
   * Without `credentials` (TLS) it is sent only to a unix socket, localhost
   * or a loopback IP, never in clear text beyond this machine.
   */
  token?: string;
  /** Channel credentials for TLS; plaintext by default. */
  credentials?: grpc.ChannelCredentials;
  /** Deadline of each call in milliseconds (10000 by default). */
  timeoutMs?: number;
  /**
   * How many times a call is retried when the daemon is unreachable or the
   * call timed out (5 by default), with a backoff from 100 ms to 2 s.
   */
  retries?: number;
}

/** The session fields (metadata only) this package reads. */
export interface StoredSession {
  id: string;
  revision: string;
  message_count: string;
  updated_at?: { seconds: string; nanos: number } | null;
  metadata: Record<string, string>;
  labels: Record<string, string>;
  open_tool_call_ids: string[];
  /** How many messages the context view (LOAD_VIEW_CONTEXT) holds. */
  context_message_count?: string;
  /** The latest compaction's range, when the session has one. */
  compaction?: { through_message_id: string; through_message_count: string; summary_message_id: string; revision: string } | null;
}

// Rejects the appends waiting on a stream the daemon does not have.
const NO_APPEND_STREAM = new Error('the daemon has no AppendStream');

// The proto is loaded once, from the copy `npm run build` puts beside dist/.
let serviceCtor: grpc.ServiceClientConstructor | undefined;
function service(): grpc.ServiceClientConstructor {
  if (!serviceCtor) {
    const def = protoLoader.loadSync('sessiond/v1/sessiond.proto', {
      includeDirs: [path.join(__dirname, '..', 'proto')],
      keepCase: true, longs: String, enums: String, defaults: true, oneofs: true,
    });
    const pkg = grpc.loadPackageDefinition(def) as any;
    serviceCtor = pkg.sessiond.v1.SessionStoreService as grpc.ServiceClientConstructor;
  }
  return serviceCtor;
}

// isLocal says whether address is a unix socket, localhost or a loopback
// IP, where a token may travel without TLS.
function isLocal(address: string): boolean {
  if (address.startsWith('unix:')) return true;
  let host = address.replace(/^dns:(\/\/[^/]*\/)?/, '');
  const bracket = /^\[([^\]]+)\]/.exec(host);
  host = bracket ? bracket[1] : host.replace(/:\d+$/, '');
  if (host === 'localhost' || host === '::1') return true;
  return /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

/** A client of one daemon. `who` names the caller in the errors it throws. */
export class Connection {
  private readonly client: grpc.Client & Record<string, any>;
  private readonly token: string | undefined;
  private readonly timeoutMs: number;
  private readonly retries: number;

  constructor(who: string, options: ConnectionOptions) {
    if (!options || typeof options.address !== 'string' || options.address === '') {
      throw new TypeError(`${who}: address is required ("host:port" or "unix:/path")`);
    }
    if (options.token !== undefined && (typeof options.token !== 'string' || options.token === '')) {
      throw new TypeError(`${who}: token must be a non-empty string when given`);
    }
    if (options.token !== undefined && !options.credentials && !isLocal(options.address)) {
      throw new TypeError(`${who}: refusing to send a token without TLS to ${options.address}, which is not loopback; pass credentials (grpc.credentials.createSsl)`);
    }
    this.token = options.token;
    this.timeoutMs = options.timeoutMs ?? 10000;
    this.retries = options.retries ?? 5;
    const Ctor = service();
    this.client = new Ctor(options.address, options.credentials ?? grpc.credentials.createInsecure()) as any;
  }

  close(): void {
    this.appendCall?.cancel();
    this.client.close();
  }

  // The AppendStream this connection's appends after its first share (see
  // append); the appends waiting for their answers, in request order; and
  // whether the daemon lacks AppendStream.
  private appendCall: grpc.ClientDuplexStream<object, any> | undefined;
  private appendWaiting: { resolve: (resp: any) => void; reject: (err: Error) => void }[] = [];
  private appendsSent = 0;
  private noAppendStream = false;

  /**
   * AppendMessages, retried while the daemon is unreachable. The first
   * append of a connection is a unary call (a program that writes once
   * opens no stream); later ones go over one AppendStream, pipelined, with
   * the same answers and errors. A daemon that answers UNIMPLEMENTED gets
   * unary calls from then on.
   */
  append(req: object): Promise<any> {
    if (this.appendsSent++ === 0 || this.noAppendStream) return this.retrying('AppendMessages', req);
    return this.withRetry(async () => {
      try {
        return await this.appendStreamed(req);
      } catch (err) {
        if (err === NO_APPEND_STREAM) return this.unary('AppendMessages', req);
        throw err;
      }
    });
  }

  /** One append over the stream, opened when there is none. */
  private appendStreamed(req: object): Promise<any> {
    if (!this.appendCall) this.openAppendStream();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        // The answer, when it comes, is dropped; a retry with the same
        // message ids stores nothing twice.
        reject(new SessiondError('AppendStream', grpc.status.DEADLINE_EXCEEDED, `no answer within ${this.timeoutMs} ms`));
      }, this.timeoutMs);
      this.appendWaiting.push({
        resolve: (resp) => { clearTimeout(timer); resolve(resp); },
        reject: (err) => { clearTimeout(timer); reject(err); },
      });
      this.appendCall!.write({ append: req });
    });
  }

  private openAppendStream(): void {
    const call: grpc.ClientDuplexStream<object, any> = this.client.AppendStream(this.metadata());
    this.appendCall = call;
    let failed = false;
    const fail = (err: Error) => {
      if (failed) return;
      failed = true;
      if (this.appendCall === call) this.appendCall = undefined;
      const waiting = this.appendWaiting;
      this.appendWaiting = [];
      for (const w of waiting) w.reject(err);
    };
    call.on('data', (resp: any) => {
      const w = this.appendWaiting.shift();
      if (!w) {
        call.cancel();
        fail(new SessiondError('AppendStream', grpc.status.INTERNAL, 'the daemon answered an append that was not sent'));
        return;
      }
      if (resp.status) w.reject(new SessiondError('AppendMessages', resp.status.code, resp.status.message));
      else w.resolve(resp.result);
    });
    call.on('error', (err: grpc.ServiceError) => {
      if (err.code === grpc.status.UNIMPLEMENTED) {
        this.noAppendStream = true;
        fail(NO_APPEND_STREAM);
        return;
      }
      fail(new SessiondError('AppendStream', err.code ?? grpc.status.UNKNOWN, err.details || err.message));
    });
    call.on('end', () => fail(new SessiondError('AppendStream', grpc.status.UNAVAILABLE, 'the daemon ended the stream')));
  }

  private metadata(): grpc.Metadata {
    const md = new grpc.Metadata();
    if (this.token) md.set('authorization', `Bearer ${this.token}`);
    return md;
  }

  /** Calls a unary RPC once. */
  unary(method: string, req: object): Promise<any> {
    return new Promise((resolve, reject) => {
      this.client[method](req, this.metadata(), { deadline: Date.now() + this.timeoutMs }, (err: grpc.ServiceError | null, resp: any) => {
        if (err) reject(new SessiondError(method, err.code, err.details || err.message));
        else resolve(resp);
      });
    });
  }

  /** Calls a unary RPC that is safe to repeat, retrying it. */
  retrying(method: string, req: object): Promise<any> {
    return this.withRetry(() => this.unary(method, req));
  }

  /**
   * Runs fn again after a backoff (100 ms doubling to 2 s) while the daemon
   * is unreachable or the call timed out, at most `retries` times.
   */
  async withRetry<T>(fn: () => Promise<T>): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await fn();
      } catch (err) {
        const transient = err instanceof SessiondError &&
          (err.code === grpc.status.UNAVAILABLE || err.code === grpc.status.DEADLINE_EXCEEDED);
        if (!transient || attempt >= this.retries) throw err;
        await new Promise((r) => setTimeout(r, Math.min(100 * 2 ** attempt, 2000)));
      }
    }
  }

  /** Collects every frame of a server-streaming RPC; read-only, so retried whole. */
  stream(method: string, req: object): Promise<any[]> {
    return this.withRetry(async () => {
      const frames: any[] = [];
      try {
        const call = this.client[method](req, this.metadata(), { deadline: Date.now() + this.timeoutMs });
        for await (const frame of call) frames.push(frame);
      } catch (err: any) {
        throw new SessiondError(method, err.code ?? grpc.status.UNKNOWN, err.details || err.message);
      }
      return frames;
    });
  }

  /** LoadSession: the session's metadata and its messages. */
  async load<M>(req: object): Promise<{ session: StoredSession; messages: M[] }> {
    const frames = await this.stream('LoadSession', req);
    const session = frames.find((f) => f.session)?.session as StoredSession | undefined;
    if (!session) throw new SessiondError('LoadSession', grpc.status.INTERNAL, 'the answer carried no session');
    return { session, messages: frames.flatMap((f) => f.messages as M[]) };
  }
}
