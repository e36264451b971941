// A small Markdown renderer for the sessiond viewer.
//
// It never produces HTML text: every element is made with
// document.createElement and every piece of the source lands in the page
// through text nodes, so nothing in a stored message can become markup or
// script. Raw HTML in the source stays visible as text. Links keep only
// http:, https: and mailto: targets; anything else (javascript:, data:,
// relative paths) is shown as plain text. Images are shown as links, never
// loaded.
//
// Supported: paragraphs (single line breaks kept), ATX headings, fenced and
// indented code blocks, block quotes, ordered and unordered lists (nested by
// indentation), horizontal rules, GitHub-style tables, and inline code,
// **strong**, *emphasis*, ~~strike~~, [links](https://...), <https://...>
// and bare https:// URLs.

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)[^`]*$/;
const HEADING = /^ {0,3}(#{1,6})(?:\s+(.*?))?(?:\s+#+)?\s*$/;
const RULE = /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/;
const QUOTE = /^ {0,3}> ?/;
const ITEM = /^( {0,3})([-*+]|\d{1,9}[.)])(?:\s+|$)/;
const TABLE_SEP = /^\s*\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*)*\|?\s*$/;
const INDENTED = /^(?: {4}|\t)/;

// MAX_SPAN bounds how far a code span or an emphasis may reach to its
// closing marker.
const MAX_SPAN = 4096;

const SAFE_SCHEMES = new Set(['http:', 'https:', 'mailto:']);

// MAX_MARKDOWN is the longest text rendered as Markdown; a longer one is
// shown as plain text. MAX_INLINE bounds the inline elements (code, emphasis,
// links) of one text; past it the rest of each paragraph stays plain. Both
// keep a message built to be slow to lay out (hundreds of thousands of
// markers) from stalling the page.
const MAX_MARKDOWN = 100000;
const MAX_INLINE = 2000;

// inlineLeft is what remains of MAX_INLINE while renderMarkdown runs.
let inlineLeft = 0;

// renderMarkdown returns a DocumentFragment for the Markdown text.
export function renderMarkdown(text) {
  const frag = document.createDocumentFragment();
  const src = String(text ?? '');
  if (src.length > MAX_MARKDOWN) {
    const note = document.createElement('p');
    note.className = 'plain-note';
    note.textContent = 'Shown as plain text: longer than ' + MAX_MARKDOWN.toLocaleString('en') + ' characters.';
    const plain = document.createElement('div');
    plain.className = 'plain';
    plain.textContent = src;
    frag.append(note, plain);
    return frag;
  }
  inlineLeft = MAX_INLINE;
  renderBlocks(src.replace(/\r\n?/g, '\n').split('\n'), frag, 0);
  return frag;
}

// safeHref returns the URL as a string when its scheme is safe to follow,
// else null.
export function safeHref(raw) {
  let url;
  try {
    url = new URL(raw);
  } catch {
    return null;
  }
  return SAFE_SCHEMES.has(url.protocol) ? url.href : null;
}

function isBlockStart(line) {
  return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) || ITEM.test(line);
}

function renderBlocks(lines, parent, depth) {
  // Nesting is bounded: a hostile message of ten thousand '>' must not blow
  // the stack; past the bound the rest is shown as text.
  if (depth > 16) {
    parent.append(el('p', lines.join('\n')));
    return;
  }
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (line.trim() === '') {
      i++;
      continue;
    }
    let m;
    if ((m = FENCE.exec(line))) {
      const fence = m[1];
      const body = [];
      i++;
      while (i < lines.length && !new RegExp('^ {0,3}' + fence[0] + '{' + fence.length + ',}\\s*$').test(lines[i])) {
        body.push(lines[i]);
        i++;
      }
      i++; // the closing fence, or past the end
      const code = el('code', body.join('\n'));
      const lang = m[2].replace(/[^\w+-]/g, '').slice(0, 32);
      if (lang) {
        code.dataset.lang = lang;
      }
      parent.append(el('pre', code));
      continue;
    }
    if (INDENTED.test(line)) {
      const body = [];
      while (i < lines.length && (INDENTED.test(lines[i]) || lines[i].trim() === '')) {
        body.push(lines[i].replace(INDENTED, ''));
        i++;
      }
      while (body.length && body[body.length - 1].trim() === '') {
        body.pop();
      }
      parent.append(el('pre', el('code', body.join('\n'))));
      continue;
    }
    if ((m = HEADING.exec(line))) {
      const h = document.createElement('h' + m[1].length);
      appendInline(h, m[2] || '', 0);
      parent.append(h);
      i++;
      continue;
    }
    if (RULE.test(line)) {
      parent.append(document.createElement('hr'));
      i++;
      continue;
    }
    if (QUOTE.test(line)) {
      const body = [];
      while (i < lines.length && lines[i].trim() !== '' && (QUOTE.test(lines[i]) || !isBlockStart(lines[i]))) {
        body.push(lines[i].replace(QUOTE, ''));
        i++;
      }
      const q = document.createElement('blockquote');
      renderBlocks(body, q, depth + 1);
      parent.append(q);
      continue;
    }
    if ((m = ITEM.exec(line))) {
      i = renderList(lines, i, parent, depth);
      continue;
    }
    if (line.includes('|') && i + 1 < lines.length && TABLE_SEP.test(lines[i + 1]) && lines[i + 1].includes('-')) {
      i = renderTable(lines, i, parent);
      continue;
    }
    const body = [];
    while (i < lines.length && lines[i].trim() !== '' && (body.length === 0 || !isBlockStart(lines[i]))) {
      body.push(lines[i]);
      i++;
    }
    const p = document.createElement('p');
    appendInline(p, body.join('\n'), 0);
    parent.append(p);
  }
}

// renderList renders the list starting at lines[i] and returns the index of
// the first line after it.
function renderList(lines, i, parent, depth) {
  const first = ITEM.exec(lines[i]);
  const ordered = /\d/.test(first[2]);
  const list = document.createElement(ordered ? 'ol' : 'ul');
  if (ordered) {
    const start = parseInt(first[2], 10);
    if (start !== 1) {
      list.start = start;
    }
  }
  const baseIndent = first[1].length;
  while (i < lines.length) {
    const m = ITEM.exec(lines[i]);
    if (!m || m[1].length !== baseIndent || /\d/.test(m[2]) !== ordered) {
      break;
    }
    const contentIndent = m[0].length;
    const body = [lines[i].slice(contentIndent)];
    i++;
    while (i < lines.length) {
      const line = lines[i];
      if (line.trim() === '') {
        // A blank line ends the item unless the next line is indented
        // under it.
        const next = lines[i + 1];
        if (next !== undefined && leadingSpaces(next) >= Math.min(contentIndent, baseIndent + 2) && next.trim() !== '') {
          body.push('');
          i++;
          continue;
        }
        break;
      }
      const indent = leadingSpaces(line);
      if (indent > baseIndent) {
        body.push(line.slice(Math.min(indent, contentIndent)));
        i++;
        continue;
      }
      if (ITEM.test(line) || isBlockStart(line)) {
        break;
      }
      body.push(line); // a lazy continuation of the item's paragraph
      i++;
    }
    const li = document.createElement('li');
    renderBlocks(body, li, depth + 1);
    // A one-paragraph item reads better without its <p>.
    if (li.childNodes.length === 1 && li.firstChild.nodeName === 'P') {
      li.replaceChildren(...li.firstChild.childNodes);
    }
    list.append(li);
    while (i < lines.length && lines[i].trim() === '' && ITEM.test(lines[i + 1] || '')) {
      i++;
    }
  }
  parent.append(list);
  return i;
}

function leadingSpaces(line) {
  return line.length - line.replace(/^ +/, '').length;
}

function splitRow(line) {
  let s = line.trim();
  if (s.startsWith('|')) {
    s = s.slice(1);
  }
  if (s.endsWith('|') && !s.endsWith('\\|')) {
    s = s.slice(0, -1);
  }
  const cells = [];
  let cur = '';
  for (let j = 0; j < s.length; j++) {
    if (s[j] === '\\' && s[j + 1] === '|') {
      cur += '|';
      j++;
    } else if (s[j] === '|') {
      cells.push(cur.trim());
      cur = '';
    } else {
      cur += s[j];
    }
  }
  cells.push(cur.trim());
  return cells;
}

function renderTable(lines, i, parent) {
  const head = splitRow(lines[i]);
  const aligns = splitRow(lines[i + 1]).map((c) =>
    c.startsWith(':') && c.endsWith(':') ? 'center' : c.endsWith(':') ? 'right' : c.startsWith(':') ? 'left' : '',
  );
  const table = document.createElement('table');
  const thead = document.createElement('thead');
  const tr = document.createElement('tr');
  head.forEach((c, j) => tr.append(cell('th', c, aligns[j])));
  thead.append(tr);
  table.append(thead);
  const tbody = document.createElement('tbody');
  i += 2;
  while (i < lines.length && lines[i].trim() !== '' && lines[i].includes('|')) {
    const row = document.createElement('tr');
    const cells = splitRow(lines[i]);
    for (let j = 0; j < head.length; j++) {
      row.append(cell('td', cells[j] ?? '', aligns[j]));
    }
    tbody.append(row);
    i++;
  }
  table.append(tbody);
  const wrap = document.createElement('div');
  wrap.className = 'table-wrap';
  wrap.append(table);
  parent.append(wrap);
  return i;
}

function cell(tag, text, align) {
  const c = document.createElement(tag);
  if (align) {
    c.className = 'align-' + align;
  }
  appendInline(c, text, 0);
  return c;
}

// INLINE finds the next inline construct. Groups: 1 code ticks, 2 image or
// link bang, 3 link text, 4 link target, 5 autolink, 6 bare URL, 7 strong
// marker, 8 emphasis marker (*), 9 emphasis marker (_), 10 strike.
const INLINE =
  /(`+)|(!?)\[([^\]\n]*)\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"\n]*")?\s*\)|<((?:https?|mailto):[^>\s]+)>|((?:https?:\/\/|mailto:)[^\s<>()]*[^\s<>().,;:!?'"*_~\]])|(\*\*|__)(?=\S)|(\*)(?=[^\s*])|(?<![\w])(_)(?=[^\s_])|(~~)(?=\S)/g;

function appendInline(parent, text, depth) {
  if (depth > 8) {
    parent.append(text);
    return;
  }
  const closers = new Closers(text);
  let pos = 0;
  // Text between constructs is gathered into one text node.
  let pending = '';
  for (;;) {
    if (inlineLeft <= 0) {
      break;
    }
    INLINE.lastIndex = pos;
    const m = INLINE.exec(text);
    if (!m) {
      break;
    }
    const start = m.index;
    let end = -1;
    let node = null;
    if (m[1]) {
      // A code span closes at the next run of exactly as many backticks.
      const ticks = m[1];
      const close = closers.after(ticks, start);
      if (close >= 0 && close - start <= MAX_SPAN) {
        let code = text.slice(start + ticks.length, close).replace(/\n/g, ' ');
        if (/^ .*[^ ].* $/.test(code)) {
          code = code.slice(1, -1);
        }
        node = el('code', code);
        end = close + ticks.length;
      }
    } else if (m[3] !== undefined && m[4] !== undefined) {
      const href = safeHref(m[4]);
      const label = m[2] ? m[3] || m[4] : m[3];
      if (href) {
        node = document.createElement('a');
        node.href = href;
        node.rel = 'noopener noreferrer nofollow';
        node.target = '_blank';
        if (m[2]) {
          node.className = 'image-link';
          node.append('image: ');
        }
        appendInline(node, label, depth + 1);
      } else {
        node = document.createElement('span');
        appendInline(node, label, depth + 1);
        node.append(' (' + m[4] + ')');
      }
      end = start + m[0].length;
    } else if (m[5] || m[6]) {
      const raw = m[5] || m[6];
      const href = safeHref(raw);
      if (href) {
        node = el('a', raw);
        node.href = href;
        node.rel = 'noopener noreferrer nofollow';
        node.target = '_blank';
        end = start + m[0].length;
      }
    } else {
      const marker = m[7] || m[8] || m[9] || m[10];
      const tag = m[7] ? 'strong' : m[10] ? 'del' : 'em';
      const close = closers.after(marker, start + marker.length);
      if (close >= 0 && close - start <= MAX_SPAN) {
        node = document.createElement(tag);
        appendInline(node, text.slice(start + marker.length, close), depth + 1);
        end = close + marker.length;
      }
    }
    if (node) {
      parent.append(pending + text.slice(pos, start), node);
      pending = '';
      inlineLeft--;
      pos = end;
    } else {
      // Not a construct after all: keep the marker as text and go on.
      const skip = start + Math.max(1, m[0].length);
      pending += text.slice(pos, skip);
      pos = skip;
    }
  }
  parent.append(pending + text.slice(pos));
}

// Closers finds where a code span or an emphasis that opens at some point
// of text closes. It lists each marker's closing places once, so that a
// text full of markers that never close costs linear time, not quadratic.
class Closers {
  constructor(text) {
    this.text = text;
    this.lists = new Map();
  }

  // after returns the first place after from where marker closes, or -1.
  after(marker, from) {
    let list = this.lists.get(marker);
    if (!list) {
      list = marker[0] === '`' ? this.tickRuns(marker.length) : this.emphasisCloses(marker);
      this.lists.set(marker, list);
    }
    let lo = 0;
    let hi = list.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (list[mid] > from) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    return lo < list.length ? list[lo] : -1;
  }

  // tickRuns lists the starts of the runs of exactly n backticks.
  tickRuns(n) {
    const out = [];
    for (const m of this.text.matchAll(/`+/g)) {
      if (m[0].length === n) {
        out.push(m.index);
      }
    }
    return out;
  }

  // emphasisCloses lists where marker can close an emphasis: after a
  // non-space; a single * not followed by another; _ not followed by a
  // word character.
  emphasisCloses(marker) {
    const out = [];
    const text = this.text;
    for (let i = text.indexOf(marker, 1); i >= 0; i = text.indexOf(marker, i + marker.length)) {
      const before = text[i - 1];
      const after = text[i + marker.length];
      if (
        !/\s/.test(before) &&
        !(marker === '*' && after === '*') &&
        !(marker === '_' && after !== undefined && /\w/.test(after))
      ) {
        out.push(i);
      }
    }
    return out;
  }
}

function el(tag, text) {
  const e = document.createElement(tag);
  if (typeof text === 'string') {
    e.textContent = text;
  } else if (text) {
    e.append(text);
  }
  return e;
}
