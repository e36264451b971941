// The sessiond conversation viewer.
//
// It reads the daemon's JSON API under /v1/ with fetch, sending the token
// kept in sessionStorage (if any) as "Authorization: Bearer ...", and builds
// every element with createElement and text nodes: nothing a client stored
// is ever parsed as HTML. The page's Content-Security-Policy (set by the
// server) forbids inline script and, with Trusted Types, any HTML string
// sink, so a mistake here would fail loudly instead of running stored text.
//
// Two views, chosen by the path:
//   /ui/?namespace=NS[&q=TEXT][&page_token=T]   sessions of a namespace, or search hits
//   /ui/sessions/{id}?namespace=NS              one conversation, kept live through the watch
//                                               (an alias in place of the id works too)
import { renderMarkdown } from './markdown.js';

const TOKEN_KEY = 'sessiond.token';
const PAGE_SIZE = 50;
const SEARCH_LIMIT = 100;
const ROLES = ['ROLE_UNSPECIFIED', 'ROLE_SYSTEM', 'ROLE_USER', 'ROLE_ASSISTANT', 'ROLE_TOOL'];
const EVENTS = ['EVENT_TYPE_UNSPECIFIED', 'EVENT_TYPE_APPENDED', 'EVENT_TYPE_REPLACED', 'EVENT_TYPE_UPDATED', 'EVENT_TYPE_DELETED', 'EVENT_TYPE_DELTA', 'EVENT_TYPE_FINISHED'];
EVENTS[8] = 'EVENT_TYPE_COMPACTED'; // 7 is not used
const STATES = ['MESSAGE_STATE_UNSPECIFIED', 'MESSAGE_STATE_STREAMING', 'MESSAGE_STATE_COMPLETE', 'MESSAGE_STATE_INTERRUPTED'];
const UUID = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;
const IMAGE_TYPES = new Set(['image/png', 'image/jpeg', 'image/gif', 'image/webp']);
// gRPC codes the viewer acts on, by number and by name (proto3 JSON may
// carry either).
const CODE_NAMES = { 3: 'INVALID_ARGUMENT', 5: 'NOT_FOUND', 7: 'PERMISSION_DENIED', 11: 'OUT_OF_RANGE', 14: 'UNAVAILABLE', 16: 'UNAUTHENTICATED' };

// ---- small helpers

// h makes an element. attrs: class, text, dataset, on<event>, or plain
// attributes (never "href" or "src" with stored data: those go through
// safeHref or a checked data URL). Children are nodes or strings (which
// become text nodes).
function h(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) {
      continue;
    }
    if (k === 'class') {
      e.className = v;
    } else if (k === 'text') {
      e.textContent = v;
    } else if (k === 'dataset') {
      Object.assign(e.dataset, v);
    } else if (k.startsWith('on')) {
      e.addEventListener(k.slice(2), v);
    } else {
      e.setAttribute(k, v === true ? '' : String(v));
    }
  }
  for (const c of children.flat(Infinity)) {
    if (c !== undefined && c !== null && c !== false) {
      e.append(c instanceof Node ? c : String(c));
    }
  }
  return e;
}

// field reads a proto3 JSON field by its proto name, accepting the
// lowerCamelCase JSON name as well (gateways print either).
function field(obj, name) {
  if (!obj) {
    return undefined;
  }
  const camel = name.replace(/_([a-z])/g, (_, c) => c.toUpperCase());
  return obj[camel] !== undefined ? obj[camel] : obj[name];
}

function enumName(v, names) {
  return typeof v === 'number' ? names[v] || String(v) : v || names[0];
}

function roleOf(m) {
  return enumName(field(m, 'role'), ROLES);
}

function roleLabel(role) {
  return role.replace(/^ROLE_/, '').toLowerCase();
}

function fmtTime(ts) {
  if (!ts) {
    return '';
  }
  const d = new Date(ts);
  return isNaN(d) ? String(ts) : d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, ' UTC');
}

function prettyJSON(text) {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

// apiBase is the API's prefix for a namespace: the default namespace's
// routes, or those under /v1/namespaces/{namespace}/.
function apiBase(ns) {
  return ns ? '/v1/namespaces/' + encodeURIComponent(ns) : '/v1';
}

// validNamespace says whether ns is a namespace name the daemon accepts
// ("" is the default one), checked here so that a name such as ".." can
// never turn into another path of the API.
function validNamespace(ns) {
  return ns === '' || (/^[A-Za-z0-9._-]{1,128}$/.test(ns) && ns !== '.' && ns !== '..');
}

function params() {
  return new URLSearchParams(location.search);
}

function namespace() {
  return params().get('namespace') || '';
}

// sessionURL is the viewer's own address of a session.
function sessionURL(id, ns, hash) {
  const u = new URL('/ui/sessions/' + encodeURIComponent(id), location.origin);
  if (ns) {
    u.searchParams.set('namespace', ns);
  }
  if (hash) {
    u.hash = hash;
  }
  return u.pathname + u.search + u.hash;
}

function setStatus(text, kind) {
  const s = document.getElementById('status');
  s.textContent = text || '';
  s.className = kind || '';
}

// ---- the token

function token() {
  try {
    return sessionStorage.getItem(TOKEN_KEY) || '';
  } catch {
    return '';
  }
}

function setupToken() {
  const form = document.getElementById('token-form');
  const input = document.getElementById('token');
  const show = () => {
    showAccess(null);
    refreshAccess();
  };
  show();
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const t = input.value.trim();
    if (t) {
      sessionStorage.setItem(TOKEN_KEY, t);
    } else {
      sessionStorage.removeItem(TOKEN_KEY);
    }
    input.value = '';
    show();
    route();
  });
  document.getElementById('token-clear').addEventListener('click', () => {
    sessionStorage.removeItem(TOKEN_KEY);
    input.value = '';
    show();
    route();
  });
}

// ---- the namespace picker

// refreshAccess asks the daemon what the token may read (GetServerInfo's
// token: its name, role and namespaces; none when the daemon checks no
// tokens) and fits the picker to it: a list of the token's namespaces when
// it names them all, else a free field (with the names it knows offered).
async function refreshAccess() {
  let access = null;
  try {
    const info = await (await apiFetch('/v1/info')).json();
    const tok = field(info, 'token');
    access = tok
      ? { name: field(tok, 'name') || '', role: field(tok, 'role') || '', namespaces: field(tok, 'namespaces') || [], all: !!field(tok, 'all_namespaces') }
      : { open: true, namespaces: [], all: true };
  } catch {
    // No token yet, or a refused one: the page says so where it loads.
  }
  showAccess(access);
  if (access && !access.all && access.namespaces.length && !params().has('namespace') && !access.namespaces.includes('')) {
    // The default namespace is not the token's: open its first one.
    location.replace(listURL(access.namespaces[0]));
  }
}

function nsLabel(ns) {
  return ns === '' ? '(default)' : ns;
}

function showAccess(access) {
  const input = document.getElementById('ns');
  const select = document.getElementById('ns-select');
  const open = document.getElementById('ns-open');
  const state = document.getElementById('token-state');
  const restricted = !!access && !access.all && access.namespaces.length > 0;
  if (!token()) {
    state.textContent = 'no token';
  } else if (!access) {
    state.textContent = 'token set for this tab';
  } else {
    state.textContent =
      'token ' + access.name + ' (' + access.role + ': ' + (access.all ? 'every namespace' : access.namespaces.map(nsLabel).join(', ')) + ')';
  }
  const names = access ? access.namespaces : [];
  document.getElementById('ns-known').replaceChildren(...names.map((ns) => h('option', { value: ns })));
  if (restricted) {
    const current = namespace();
    const options = names.includes(current) ? names : [current, ...names];
    select.replaceChildren(
      ...options.map((ns) => h('option', { value: ns, text: nsLabel(ns) + (names.includes(ns) ? '' : ' (not the token\'s)'), selected: ns === current })),
    );
  }
  select.hidden = !restricted;
  input.hidden = restricted;
  open.hidden = restricted;
}

// ---- the API

class ApiError extends Error {
  constructor(status, code, message) {
    super(message || 'HTTP ' + status);
    this.status = status;
    this.code = typeof code === 'number' ? CODE_NAMES[code] || String(code) : code || '';
  }
}

function authHeaders(accept) {
  const hd = { Accept: accept };
  const t = token();
  if (t) {
    hd.Authorization = 'Bearer ' + t;
  }
  return hd;
}

async function apiFetch(path, query, { accept = 'application/json', signal } = {}) {
  const url = new URL(path, location.origin);
  for (const [k, v] of Object.entries(query || {})) {
    if (v !== undefined && v !== null && v !== '') {
      url.searchParams.set(k, String(v));
    }
  }
  const res = await fetch(url, { headers: authHeaders(accept), signal, cache: 'no-store', credentials: 'omit' });
  if (!res.ok) {
    throw await apiError(res);
  }
  return res;
}

async function apiError(res) {
  let code = '';
  let message = res.status + ' ' + res.statusText;
  try {
    const body = await res.json();
    const e = body.error || body;
    message = e.message || message;
    code = e.code;
  } catch {
    // not JSON: keep the status line
  }
  return new ApiError(res.status, code, message);
}

function unwrap(frame) {
  if (frame && frame.error) {
    throw new ApiError(0, frame.error.code, frame.error.message);
  }
  return frame && frame.result !== undefined ? frame.result : frame;
}

// frames reads an answer that is either one JSON document or a stream of
// newline-delimited ones (how a gateway sends a server-streaming RPC, each
// frame as {"result": ...} or {"error": ...}).
async function frames(res) {
  const text = await res.text();
  let items;
  try {
    const v = JSON.parse(text);
    items = Array.isArray(v) ? v : [v];
  } catch {
    items = text
      .split('\n')
      .filter((l) => l.trim() !== '')
      .map((l) => JSON.parse(l));
  }
  return items.map(unwrap);
}

function explain(err) {
  if (err.status === 401 || err.code === 'UNAUTHENTICATED') {
    return 'This daemon needs a token: paste it in the token field above. (' + err.message + ')';
  }
  if (err.status === 403 || err.code === 'PERMISSION_DENIED') {
    return 'The token may not read this namespace. (' + err.message + ')';
  }
  return err.message || String(err);
}

// ---- routing

let current = null; // the view being shown: { stop() }

function route() {
  if (current) {
    current.stop();
    current = null;
  }
  setStatus('');
  document.getElementById('ns').value = namespace();
  const m = /^\/ui\/sessions\/([^/]+)$/.exec(location.pathname);
  if (!validNamespace(namespace())) {
    setStatus('Not a namespace name: letters, digits, ".", "_" and "-", at most 128.', 'error');
    document.getElementById('main').replaceChildren();
    return;
  }
  if (m) {
    current = new SessionView(decodeURIComponent(m[1]), namespace());
  } else {
    current = new ListView(namespace(), params().get('q') || '', params().get('page_token') || '');
  }
  current.start();
}

// ---- the list of sessions

class ListView {
  constructor(ns, q, pageToken) {
    this.ns = ns;
    this.q = q;
    this.pageToken = pageToken;
    this.abort = new AbortController();
  }

  stop() {
    this.abort.abort();
  }

  async start() {
    const main = document.getElementById('main');
    const nsLabel = this.ns === '' ? 'the default namespace' : 'namespace ' + this.ns;
    document.title = (this.q ? 'search: ' + this.q : 'sessions') + ' · sessiond';
    const form = h(
      'form',
      { id: 'search-form', method: 'get', action: '/ui/', role: 'search' },
      h('input', { type: 'hidden', name: 'namespace', value: this.ns }),
      h('input', { type: 'search', name: 'q', id: 'q', value: this.q, placeholder: 'search titles, messages, tool arguments', 'aria-label': 'search' }),
      h('button', { type: 'submit', text: 'Search' }),
      this.q ? h('a', { href: listURL(this.ns), text: 'All sessions' }) : null,
    );
    const body = h('div', { id: 'list' });
    main.replaceChildren(h('h1', { text: (this.q ? 'Search in ' : 'Sessions in ') + nsLabel }), form, body);
    setStatus('Loading…');
    try {
      if (this.q) {
        await this.search(body);
      } else {
        await this.list(body);
      }
      setStatus('');
    } catch (err) {
      if (err.name !== 'AbortError') {
        setStatus(explain(err), 'error');
      }
    }
  }

  async list(body) {
    const res = await apiFetch(apiBase(this.ns) + '/sessions', { limit: PAGE_SIZE, page_token: this.pageToken }, { signal: this.abort.signal });
    const got = await frames(res);
    // One frame per session (a stream), or one answer with a list.
    let sessions = [];
    let next = '';
    for (const fr of got) {
      if (field(fr, 'sessions')) {
        sessions.push(...field(fr, 'sessions'));
      } else if (field(fr, 'session')) {
        sessions.push(field(fr, 'session'));
      }
      next = field(fr, 'next_page_token') || next;
    }
    if (sessions.length === 0) {
      body.replaceChildren(h('p', { class: 'empty', text: this.pageToken ? 'No more sessions.' : 'No sessions in this namespace.' }));
    } else {
      body.replaceChildren(sessionTable(sessions, this.ns));
    }
    const nav = h('nav', { class: 'pager' });
    if (this.pageToken) {
      nav.append(h('a', { href: listURL(this.ns), text: '« First page' }));
    }
    if (next && sessions.length >= PAGE_SIZE) {
      nav.append(h('a', { href: listURL(this.ns, { page_token: next }), rel: 'next', text: 'Next page »' }));
    }
    body.append(nav);
  }

  async search(body) {
    const res = await apiFetch(apiBase(this.ns) + '/search', { query: this.q, limit: SEARCH_LIMIT }, { signal: this.abort.signal });
    const hits = await frames(res);
    const flat = [];
    for (const fr of hits) {
      if (field(fr, 'hits')) {
        flat.push(...field(fr, 'hits'));
      } else if (field(fr, 'session')) {
        flat.push(fr);
      }
    }
    if (flat.length === 0) {
      body.replaceChildren(h('p', { class: 'empty', text: 'Nothing found.' }));
      return;
    }
    const rows = flat.map((hit) => {
      const s = field(hit, 'session');
      // proto3 JSON leaves out zero: no message_index is message 0, and
      // a hit outside the messages says -1.
      const idx = Number(field(hit, 'message_index') ?? 0);
      const where = idx >= 0 ? 'message ' + (idx + 1) : 'title, alias or summary';
      return h(
        'tr',
        null,
        h('td', null, h('a', { href: sessionURL(field(s, 'id'), this.ns, idx >= 0 ? 'm-' + idx : ''), text: field(s, 'title') || field(s, 'alias') || field(s, 'id') })),
        h('td', { text: where }),
        h('td', { class: 'snippet', text: field(hit, 'snippet') || '' }),
      );
    });
    body.replaceChildren(
      h('p', { text: flat.length + (flat.length >= SEARCH_LIMIT ? '+' : '') + ' hits' }),
      h('table', { class: 'sessions' }, h('thead', null, h('tr', null, h('th', { text: 'session' }), h('th', { text: 'where' }), h('th', { text: 'snippet' }))), h('tbody', null, rows)),
    );
  }
}

function listURL(ns, extra) {
  const u = new URL('/ui/', location.origin);
  if (ns) {
    u.searchParams.set('namespace', ns);
  }
  for (const [k, v] of Object.entries(extra || {})) {
    u.searchParams.set(k, v);
  }
  return u.pathname + u.search;
}

function sessionTable(sessions, ns) {
  const rows = sessions.map((s) => {
    const usage = field(s, 'usage');
    const models = field(s, 'models') || [];
    return h(
      'tr',
      { dataset: { id: field(s, 'id') } },
      h('td', { class: field(s, 'title_derived') ? 'title derived' : 'title' }, h('a', {
        href: sessionURL(field(s, 'id'), ns),
        title: field(s, 'title_derived') ? 'from the first user message · ' + field(s, 'id') : field(s, 'id'),
        text: field(s, 'title') || '(untitled)',
      })),
      h('td', { class: 'alias', text: field(s, 'alias') || '' }),
      h('td', { class: 'num', text: String(field(s, 'message_count') || 0) }),
      h('td', { class: 'models' }, models.map((m) => h('span', { class: 'model', text: m }))),
      h('td', { class: 'num tokens', title: usage ? usageText(usage) : 'no usage recorded' }, usage ? fmtCount(field(usage, 'input_tokens')) + ' / ' + fmtCount(field(usage, 'output_tokens')) : ''),
      h('td', null, timeAgo(field(s, 'updated_at'))),
      h('td', null, chips(field(s, 'labels'))),
    );
  });
  return h(
    'table',
    { class: 'sessions' },
    h('thead', null, h('tr', null, ['title', 'alias', 'messages', 'models', 'tokens in / out', 'updated', 'labels'].map((t) => h('th', { text: t })))),
    h('tbody', null, rows),
  );
}

// fmtCount prints a token count briefly: 950, 12.3k, 4.1M (int64 counts
// arrive as strings).
function fmtCount(v) {
  const n = Number(v || 0);
  if (n < 1000) {
    return String(n);
  }
  const [div, unit] = n < 1e6 ? [1e3, 'k'] : n < 1e9 ? [1e6, 'M'] : [1e9, 'G'];
  return (n / div).toFixed(n / div < 100 ? 1 : 0).replace(/\.0$/, '') + unit;
}

// timeAgo is a <time> saying how long ago ts was, the exact time on hover.
function timeAgo(ts) {
  const d = ts ? new Date(ts) : null;
  if (!d || isNaN(d)) {
    return ts ? String(ts) : '';
  }
  return h('time', { datetime: d.toISOString(), title: fmtTime(ts), text: relativeTime(d, Date.now()) });
}

const TIME_UNITS = [
  ['year', 365 * 86400],
  ['month', 30 * 86400],
  ['week', 7 * 86400],
  ['day', 86400],
  ['hour', 3600],
  ['minute', 60],
];

// relativeTime says how far d is from now in the largest whole unit.
function relativeTime(d, now) {
  const secs = Math.round((now - d.getTime()) / 1000);
  const abs = Math.abs(secs);
  for (const [unit, size] of TIME_UNITS) {
    if (abs >= size) {
      const n = Math.floor(abs / size);
      const text = n + ' ' + unit + (n === 1 ? '' : 's');
      return secs >= 0 ? text + ' ago' : 'in ' + text;
    }
  }
  return 'just now';
}

function chips(map) {
  return Object.entries(map || {}).map(([k, v]) => h('span', { class: 'chip', text: v ? k + '=' + v : k }));
}

function dl(map) {
  const entries = Object.entries(map || {});
  if (entries.length === 0) {
    return null;
  }
  return h('dl', { class: 'kv' }, entries.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([k, v]) => [h('dt', { text: k }), h('dd', { text: typeof v === 'object' ? JSON.stringify(v) : String(v) })]));
}

// usageText prints a Usage message (token counts) whatever its fields.
function usageText(u) {
  if (!u || typeof u !== 'object') {
    return '';
  }
  return Object.entries(u)
    .map(([k, v]) => k.replace(/([A-Z])/g, '_$1').toLowerCase() + ' ' + v)
    .join(', ');
}

// ---- one conversation

class SessionView {
  constructor(id, ns) {
    this.id = id;
    this.ns = ns;
    this.abort = new AbortController();
    this.session = null;
    this.messages = [];
    this.revision = '0';
    // Every tool call seen, by id: its pair element and whether a later
    // ROLE_TOOL message answered it.
    this.calls = new Map();
  }

  stop() {
    this.abort.abort();
  }

  // apiPath is the API's path of the session: by id, or by alias until the
  // first load tells the id (which a rename cannot change).
  apiPath() {
    const id = field(this.session, 'id') || this.id;
    return apiBase(this.ns) + (UUID.test(id) ? '/sessions/' : '/aliases/') + encodeURIComponent(id);
  }

  async start() {
    const main = document.getElementById('main');
    this.header = h('section', { id: 'session-header' });
    this.toolbar = h(
      'div',
      { class: 'toolbar' },
      h('a', { href: listURL(this.ns), text: '« Sessions' }),
      h('button', { type: 'button', id: 'expand-calls', text: 'Expand tool calls', onclick: () => this.setOpen(true) }),
      h('button', { type: 'button', id: 'collapse-calls', text: 'Collapse tool calls', onclick: () => this.setOpen(false) }),
      h('span', { id: 'live', class: 'live', text: '' }),
    );
    this.list = h('ol', { id: 'messages', class: 'messages' });
    main.replaceChildren(this.header, this.toolbar, this.list);
    setStatus('Loading…');
    try {
      await this.load();
      setStatus('');
      // The messages came after the navigation, so the browser has not
      // scrolled to the one the address names, nor marked it :target.
      const target = location.hash ? document.getElementById(location.hash.slice(1)) : null;
      if (target) {
        openFold(target);
        target.classList.add('target');
        target.scrollIntoView();
      }
    } catch (err) {
      if (err.name !== 'AbortError') {
        setStatus(explain(err), 'error');
      }
      return;
    }
    this.watch();
  }

  async load() {
    const res = await apiFetch(this.apiPath() + '/messages', null, { signal: this.abort.signal });
    const got = await frames(res);
    let session = null;
    const messages = [];
    for (const fr of got) {
      session = session || field(fr, 'session');
      messages.push(...(field(fr, 'messages') || []));
    }
    if (!session) {
      throw new ApiError(0, '', 'the daemon answered without the session');
    }
    this.messages = [];
    this.calls = new Map();
    this.list.replaceChildren();
    this.setSession(session);
    for (const m of messages) {
      this.addMessage(m);
    }
    this.markOpen();
    await this.foldCompaction();
  }

  // foldCompaction folds the messages the latest compaction stands for
  // into a closed <details> under its summary, the message a model is sent
  // in their place (the first of the context view): the originals stay
  // stored and one click away.
  async foldCompaction() {
    const compaction = field(this.session, 'compaction');
    const count = Number(field(compaction, 'through_message_count')) || 0;
    const folded = [...this.list.children].slice(0, count);
    if (count === 0 || folded.length < count) {
      return;
    }
    const res = await apiFetch(this.apiPath() + '/messages', { view: 'LOAD_VIEW_CONTEXT', limit: 1 }, { signal: this.abort.signal });
    let summary = null;
    for (const fr of await frames(res)) {
      summary = summary || (field(fr, 'messages') || [])[0] || null;
    }
    const through = field(compaction, 'through_message_id');
    const noun = count === 1 ? 'message' : 'messages';
    this.list.prepend(
      h(
        'li',
        { id: 'compaction', class: 'msg compaction', dataset: { throughMessageCount: String(count), throughMessageId: through || '' } },
        h(
          'header',
          null,
          h('span', { class: 'role', text: 'summary' }),
          summary ? h('span', { class: 'role-of-summary', text: roleLabel(roleOf(summary)) }) : null,
          h('span', { text: 'stands for messages 1–' + count + ' in what a model is sent' }),
          h('time', { text: fmtTime(field(compaction, 'created_at')) }),
        ),
        summary ? this.renderBody(summary) : h('p', { class: 'item-note', text: 'The summary could not be read.' }),
        h('details', { class: 'compacted' }, h('summary', { text: count + ' original ' + noun + ', compacted' }), h('ol', { class: 'messages' }, folded)),
      ),
    );
  }

  setSession(s) {
    this.session = s;
    this.revision = String(field(s, 'revision') || this.revision);
    const title = field(s, 'title') || '(untitled)';
    document.title = title + ' · sessiond';
    const parent = field(s, 'parent');
    const facts = {
      id: field(s, 'id'),
      alias: field(s, 'alias'),
      namespace: field(s, 'namespace') || '(default)',
      revision: field(s, 'revision'),
      messages: field(s, 'message_count') || '0',
      created: fmtTime(field(s, 'created_at')),
      updated: fmtTime(field(s, 'updated_at')),
    };
    const models = field(s, 'models');
    if (Array.isArray(models) && models.length) {
      facts.models = models.join(', ');
    }
    const usage = usageText(field(s, 'usage'));
    if (usage) {
      facts.usage = usage;
    }
    const ttl = field(s, 'expire_after');
    if (ttl) {
      facts['deleted after idle'] = typeof ttl === 'string' ? ttl : JSON.stringify(ttl);
    }
    const factList = h(
      'dl',
      { class: 'facts' },
      Object.entries(facts)
        .filter(([, v]) => v)
        .map(([k, v]) => [h('dt', { text: k }), h('dd', { text: String(v), dataset: { fact: k } })]),
      parent && field(parent, 'session_id')
        ? [h('dt', { text: 'forked from' }), h('dd', null, h('a', { href: sessionURL(field(parent, 'session_id'), this.ns), text: field(parent, 'session_id') }), ' at message ' + (field(parent, 'message_count') || 0))]
        : null,
    );
    const summary = field(s, 'summary');
    const meta = dl(field(s, 'metadata'));
    // replaceChildren prints null as text: leave absent parts out.
    this.header.replaceChildren(
      ...[
        h('h1', { id: 'title', text: title }),
        factList,
        h('div', { class: 'labels' }, chips(field(s, 'labels'))),
        summary ? h('details', { class: 'summary', open: true }, h('summary', { text: 'Summary' }), h('div', { class: 'md' }, renderMarkdown(summary))) : null,
        meta ? h('details', { class: 'metadata', open: true }, h('summary', { text: 'Metadata' }), meta) : null,
        h('p', { id: 'open-calls', class: 'open-calls' }),
      ].filter(Boolean),
    );
  }

  addMessage(m) {
    const index = this.messages.length;
    this.messages.push(m);
    const role = roleOf(m);
    const agents = agentsItem(m);
    const state = enumName(field(m, 'state'), STATES);
    const live = state === 'MESSAGE_STATE_STREAMING' ? ' streaming' : state === 'MESSAGE_STATE_INTERRUPTED' ? ' interrupted' : '';
    const item = h('li', { id: 'm-' + index, class: 'msg role-' + roleLabel(role) + live, dataset: { role: roleLabel(role), index: String(index) } });
    const head = h(
      'header',
      null,
      h('span', { class: 'role', text: roleLabel(role) }),
      agents && agents.type !== 'message' ? h('span', { class: 'item-type', text: agents.type }) : null,
      field(m, 'name') ? h('span', { class: 'name', text: field(m, 'name') }) : null,
      field(m, 'model') ? h('span', { class: 'model', text: field(m, 'model') }) : null,
      usageText(field(m, 'usage')) ? h('span', { class: 'usage', text: usageText(field(m, 'usage')) }) : null,
      live ? h('span', { class: 'state', text: live === ' streaming' ? 'writing…' : 'interrupted' }) : null,
      h('time', { text: fmtTime(field(m, 'created_at')) }),
      h('a', { class: 'anchor', href: '#m-' + index, title: 'message ' + (index + 1) + ', id ' + (field(m, 'id') || ''), text: '#' + (index + 1) }),
    );
    item.append(head);

    const callId = field(m, 'tool_call_id');
    const answered = role === 'ROLE_TOOL' && callId ? this.calls.get(callId) : undefined;
    if (answered && !answered.result) {
      // A result shown beside its call; here only a pointer to it.
      answered.result = m;
      this.fillResult(answered, m, index);
      item.classList.add('paired');
      item.append(h('p', { class: 'paired-note' }, 'Result of ', h('a', { href: '#' + answered.anchor, text: answered.name || callId }), ', shown beside its call.'));
      this.list.append(item);
      return;
    }
    if (role === 'ROLE_TOOL' && callId) {
      item.append(h('p', { class: 'orphan-note', text: 'Answers tool call ' + callId + ', which is not in this session' + (answered ? ' or was answered already' : '') + '.' }));
    }
    item.append(this.renderBody(m));
    for (const tc of field(m, 'tool_calls') || []) {
      item.append(this.renderCall(tc, index));
    }
    this.list.append(item);
  }

  // addDelta adds a live turn's delta to the open message it names (the
  // last one), redrawing its body; false when the delta does not continue
  // the text shown (then the caller reloads).
  addDelta(d) {
    const index = this.messages.length - 1;
    const m = this.messages[index];
    if (!d || !m || field(m, 'id') !== field(d, 'message_id')) {
      return false;
    }
    const content = field(m, 'content') || '';
    if (Number(field(d, 'offset') || 0) !== new TextEncoder().encode(content).length) {
      return false;
    }
    const next = Object.assign({}, m, { content: content + (field(d, 'content') || '') });
    const reasoning = field(d, 'reasoning');
    if (reasoning) {
      const had = field(m, 'reasoning') || {};
      next.reasoning = Object.assign({}, had, { text: (field(had, 'text') || '') + reasoning });
    }
    if (field(d, 'usage')) {
      next.usage = field(d, 'usage');
    }
    this.messages[index] = next;
    const item = document.getElementById('m-' + index);
    const body = item && item.querySelector(':scope > .body');
    if (!body) {
      return false;
    }
    body.replaceWith(this.renderBody(next));
    return true;
  }

  renderBody(m) {
    const body = h('div', { class: 'body' });
    const item = agentsItem(m);
    const reasoning = field(m, 'reasoning');
    if (reasoning && field(reasoning, 'text')) {
      body.append(h('details', { class: 'reasoning' }, h('summary', { text: 'Reasoning' }), h('div', { class: 'md' }, renderMarkdown(field(reasoning, 'text')))));
    }
    const content = field(m, 'content');
    if (content) {
      body.append(roleOf(m) === 'ROLE_TOOL' ? h('pre', { class: 'tool-output', text: prettyJSON(content) }) : h('div', { class: 'md' }, renderMarkdown(content)));
    }
    // An agents item kept whole as JSON is parts[0]: shown under "Raw
    // item", not as the message's content.
    const allParts = field(m, 'parts') || [];
    const parts = item && item.raw !== undefined ? allParts.slice(1) : allParts;
    for (const part of parts) {
      body.append(renderPart(part));
    }
    if (item) {
      if (!content && !(reasoning && field(reasoning, 'text')) && !(field(m, 'tool_calls') || []).length && parts.length === 0) {
        body.append(h('p', { class: 'item-note', text: item.summary }));
      }
      body.append(
        h('details', { class: 'raw-item' }, h('summary', { text: 'Raw item' }), h('pre', { class: 'json', text: item.raw !== undefined ? prettyJSON(item.raw) : JSON.stringify(m, null, 2) })),
      );
    }
    const metadata = Object.fromEntries(Object.entries(field(m, 'metadata') || {}).filter(([k]) => !(item && k.startsWith(AGENTS_PREFIX))));
    const meta = dl(metadata);
    if (meta) {
      body.append(h('details', { class: 'metadata' }, h('summary', { text: 'Metadata' }), meta));
    }
    return body;
  }

  renderCall(tc, index) {
    const id = field(tc, 'id') || '';
    const name = field(tc, 'name') || '(unnamed tool)';
    const anchor = 'call-' + index + '-' + (this.calls.size + 1);
    const badge = h('span', { class: 'badge open-badge', text: 'open' });
    const call = h(
      'details',
      { class: 'tool-call', open: true },
      h('summary', null, h('span', { class: 'tool-name', text: name }), ' ', h('code', { class: 'call-id', text: id }), ' ', badge),
      h('pre', { class: 'arguments', text: prettyJSON(field(tc, 'arguments') || '') }),
    );
    const result = h('div', { class: 'tool-result pending', text: 'No result yet.' });
    const pair = h('div', { class: 'tool-pair', id: anchor, dataset: { callId: id } }, call, result);
    const entry = { pair, resultEl: result, result: null, name, anchor };
    if (id && !this.calls.has(id)) {
      this.calls.set(id, entry);
    }
    return pair;
  }

  fillResult(entry, m, index) {
    const det = h(
      'details',
      { class: 'tool-result-body', open: true },
      h('summary', null, 'result ', h('a', { href: '#m-' + index, text: '#' + (index + 1) }), field(m, 'name') ? ' from ' + field(m, 'name') : ''),
      this.renderBody(m),
    );
    entry.resultEl.className = 'tool-result';
    entry.resultEl.replaceChildren(det);
  }

  // markOpen marks the tool calls with no answer: the session's
  // open_tool_call_ids when the daemon reports it, else those with no later
  // ROLE_TOOL message.
  markOpen() {
    const reported = field(this.session, 'open_tool_call_ids');
    const open = new Set(Array.isArray(reported) ? reported : [...this.calls].filter(([, e]) => !e.result).map(([id]) => id));
    const links = [];
    for (const [id, e] of this.calls) {
      const isOpen = open.has(id);
      e.pair.classList.toggle('open', isOpen);
      e.pair.dataset.open = String(isOpen);
      if (isOpen) {
        links.push(h('a', { href: '#' + e.anchor, text: e.name + ' (' + id + ')' }));
      }
    }
    const p = document.getElementById('open-calls');
    if (p) {
      p.replaceChildren(...(links.length ? [links.length + ' open tool call' + (links.length > 1 ? 's' : '') + ': ', ...links.flatMap((a, i) => (i ? [', ', a] : [a]))] : []));
    }
  }

  setOpen(open) {
    for (const d of this.list.querySelectorAll('details.tool-call, details.tool-result-body')) {
      d.open = open;
    }
  }

  setLive(text, kind) {
    const s = document.getElementById('live');
    if (s) {
      s.textContent = text;
      s.className = 'live ' + (kind || '');
    }
  }

  // watch follows the session through the SSE watch, read with fetch (not
  // EventSource) so that the Authorization header can be sent. It resumes
  // from the last revision seen after a dropped connection, and reloads the
  // whole session when the daemon says the history needed is gone.
  async watch() {
    let delay = 1000;
    while (!this.abort.signal.aborted) {
      try {
        this.setLive('● live', 'on');
        const res = await apiFetch(
          this.apiPath() + '/events',
          { from_revision: this.revision },
          { accept: 'text/event-stream', signal: this.abort.signal },
        );
        const done = await readEvents(res, (ev) => this.onEvent(ev));
        if (done === 'deleted') {
          return;
        }
        if (done === 'reload') {
          // The messages were rewritten (a save or a rewind): read them
          // again, then watch from the revision read.
          await this.load();
          continue;
        }
        delay = 1000;
      } catch (err) {
        if (this.abort.signal.aborted) {
          return;
        }
        if (err.code === 'OUT_OF_RANGE') {
          try {
            await this.load();
            continue;
          } catch (e) {
            err = e;
          }
        }
        if ([401, 403, 404].includes(err.status) || ['UNAUTHENTICATED', 'PERMISSION_DENIED', 'NOT_FOUND'].includes(err.code)) {
          this.setLive('not live: ' + explain(err), 'off');
          return;
        }
        this.setLive('reconnecting…', 'off');
      }
      await sleep(delay, this.abort.signal);
      delay = Math.min(delay * 2, 30000);
    }
  }

  onEvent(ev) {
    const type = enumName(field(ev, 'type'), EVENTS);
    const rev = field(ev, 'revision');
    const s = field(ev, 'session');
    const atBottom = window.innerHeight + window.scrollY >= document.body.scrollHeight - 40;
    switch (type) {
      case 'EVENT_TYPE_APPENDED':
        for (const m of field(ev, 'messages') || []) {
          this.addMessage(m);
        }
        break;
      case 'EVENT_TYPE_DELTA':
        if (!this.addDelta(field(ev, 'delta'))) {
          return 'reload';
        }
        break;
      case 'EVENT_TYPE_REPLACED':
      case 'EVENT_TYPE_FINISHED':
        // A finished turn may bring tool calls: the reload draws them.
      case 'EVENT_TYPE_COMPACTED':
        return 'reload';
      case 'EVENT_TYPE_DELETED':
        this.setLive('deleted', 'off');
        setStatus('This session was deleted.', 'error');
        return 'deleted';
      default:
        break;
    }
    if (s) {
      this.setSession(s);
    }
    if (rev) {
      this.revision = String(rev);
    }
    this.markOpen();
    if (atBottom && (type === 'EVENT_TYPE_APPENDED' || type === 'EVENT_TYPE_DELTA')) {
      window.scrollTo(0, document.body.scrollHeight);
    }
    return undefined;
  }
}

// openFold opens the compacted range that holds el, if any, so that a link
// to a folded message shows it.
function openFold(el) {
  const fold = el.closest('details.compacted');
  if (fold) {
    fold.open = true;
  }
}

// Messages the OpenAI Agents adapters write (clients/node) name the item
// they hold in their metadata: its type, and whether parts[0].json holds
// the whole item ("json") or the typed fields do ("typed").
const AGENTS_PREFIX = 'agents.';
const AGENTS_TYPE = 'agents.item_type';
const AGENTS_ENCODING = 'agents.item_encoding';

// agentsItem describes m's agents item, or is null for other messages:
// { type, raw (the item's JSON text, when kept whole), summary (one line
// for an item no typed field shows) }.
function agentsItem(m) {
  const meta = field(m, 'metadata') || {};
  const type = meta[AGENTS_TYPE];
  if (!type) {
    return null;
  }
  const first = (field(m, 'parts') || [])[0];
  const raw = meta[AGENTS_ENCODING] === 'json' && first ? field(first, 'json') : undefined;
  let summary = type.replace(/_/g, ' ');
  if (raw !== undefined) {
    try {
      const it = JSON.parse(raw);
      const extra = [it.name, it.status].filter((v) => typeof v === 'string' && v !== '');
      if (extra.length) {
        summary += ' (' + extra.join(', ') + ')';
      }
    } catch {
      // the raw view shows it as it is
    }
  }
  return { type, raw, summary };
}

function renderPart(part) {
  const text = field(part, 'text');
  if (text !== undefined) {
    return h('div', { class: 'md part' }, renderMarkdown(text));
  }
  const json = field(part, 'json');
  if (json !== undefined) {
    return h('pre', { class: 'part json', text: prettyJSON(json) });
  }
  const blob = field(part, 'blob');
  if (blob) {
    const mime = field(blob, 'mime_type') || '';
    const data = field(blob, 'data') || '';
    const bytes = Math.floor((data.length * 3) / 4);
    // Only known raster types become an image, from a data: URL (the CSP
    // allows img-src data:); base64 cannot break out of the attribute.
    if (IMAGE_TYPES.has(mime) && /^[A-Za-z0-9+/_-]*={0,2}$/.test(data)) {
      const img = h('img', { class: 'part blob', alt: mime + ' image' });
      img.src = 'data:' + mime + ';base64,' + data.replace(/-/g, '+').replace(/_/g, '/');
      return img;
    }
    return h('p', { class: 'part blob', text: 'attachment: ' + (mime || 'unknown type') + ', about ' + bytes + ' bytes' });
  }
  return h('p', { class: 'part', text: '(a content part this viewer does not know)' });
}

function sleep(ms, signal) {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => {
      clearTimeout(t);
      resolve();
    });
  });
}

// readEvents reads a text/event-stream body, calling onEvent with each
// event's JSON data, until the stream ends. An "error" event becomes an
// ApiError. It returns what onEvent returned to stop ("deleted",
// "reload").
async function readEvents(res, onEvent) {
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  let ev = { event: '', data: [] };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) {
      return undefined;
    }
    buf += value;
    let nl;
    while ((nl = buf.search(/\r\n|\r|\n/)) >= 0) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + (buf[nl] === '\r' && buf[nl + 1] === '\n' ? 2 : 1));
      if (line === '') {
        if (ev.data.length) {
          const payload = JSON.parse(ev.data.join('\n'));
          if (ev.event === 'error' || (payload && payload.error)) {
            const e = payload.error || payload;
            throw new ApiError(0, e.code, e.message);
          }
          const r = onEvent(unwrap(payload));
          if (r) {
            await reader.cancel();
            return r;
          }
        }
        ev = { event: '', data: [] };
        continue;
      }
      if (line.startsWith(':')) {
        continue; // a comment: keep-alive
      }
      const colon = line.indexOf(':');
      const name = colon < 0 ? line : line.slice(0, colon);
      const val = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
      if (name === 'event') {
        ev.event = val;
      } else if (name === 'data') {
        ev.data.push(val);
      }
    }
  }
}

setupToken();
document.getElementById('ns-form').addEventListener('submit', (e) => {
  e.preventDefault();
  location.assign(listURL(document.getElementById('ns').value.trim()));
});
document.getElementById('ns-select').addEventListener('change', (e) => {
  location.assign(listURL(e.target.value));
});
route();
