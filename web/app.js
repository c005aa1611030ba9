// The dshd dashboard: one ES module, no dependencies, no build step. It talks to the API of the
// origin that served it. The API key lives in sessionStorage (this tab only); event streams use
// short-lived stream tokens, because an EventSource cannot send an Authorization header.
//
// Everything on a session's screen is derived from its event log, applied in seq order: an
// event whose seq is not above the last one applied is ignored, so reconnects, reloads and
// network cuts never show an event twice or skip one (a gap reopens the stream after the last
// seq applied).

const KEY = 'dshd.apiKey';
const $ = (sel, root = document) => root.querySelector(sel);
const main = $('#main');

// ---------------------------------------------------------------------------------------------
// DOM helpers. Text always goes in as text (event data is untrusted), never as HTML.

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (v === true) el.setAttribute(k, '');
    else el.setAttribute(k, String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

let uid = 0;
const nextId = (p) => `${p}-${++uid}`;

// field returns a labelled control: the label's for= names the control's id.
function field(label, control, hint) {
  control.id ||= nextId('f');
  const parts = [h('label', { for: control.id }, label), control];
  if (hint) {
    const hid = nextId('hint');
    control.setAttribute('aria-describedby', hid);
    parts.push(h('p', { class: 'hint', id: hid }, hint));
  }
  return h('div', { class: 'field' }, parts);
}

const badge = (s) => h('span', { class: `badge ${s}` }, s);
const fmtTime = (ms) => new Date(ms).toLocaleTimeString();
const shortId = (id) => id.slice(0, 8);

function pretty(v) {
  if (typeof v === 'string') {
    try { return JSON.stringify(JSON.parse(v), null, 2); } catch { return v; }
  }
  return JSON.stringify(v, null, 2);
}

function showAlert(msg) {
  const a = $('#alert');
  if (!msg) { a.hidden = true; a.textContent = ''; return; }
  a.textContent = msg;
  a.hidden = false;
}

function setConn(state, text) {
  const c = $('#conn');
  c.className = `conn ${state}`;
  c.textContent = text;
}

// ---------------------------------------------------------------------------------------------
// The API.

class APIError extends Error {
  constructor(status, problem) {
    super(problem?.detail || `HTTP ${status}`);
    this.status = status;
    this.code = problem?.code;
  }
}

const apiKey = () => sessionStorage.getItem(KEY);

async function api(method, path, body, key = apiKey()) {
  const headers = { Authorization: `Bearer ${key}` };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const resp = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  if (resp.status === 204) return null;
  const type = resp.headers.get('Content-Type') || '';
  const data = type.includes('json') ? await resp.json() : await resp.text();
  if (!resp.ok) {
    const err = new APIError(resp.status, data);
    if (resp.status === 401 && key === apiKey()) signOut('The API key was refused; sign in again.');
    throw err;
  }
  return data;
}

// guard runs fn and shows what failed instead of throwing.
async function guard(fn) {
  try {
    showAlert('');
    return await fn();
  } catch (e) {
    if (e.status !== 401) showAlert(e.message || String(e));
    return undefined;
  }
}

// ---------------------------------------------------------------------------------------------
// Routing: #/sessions, #/sessions/<id>, #/presets, #/presets/new, #/presets/<id>.

let view = null; // the current view, with an optional close()

function route() {
  view?.close?.();
  view = null;
  showAlert('');
  main.replaceChildren();
  if (!apiKey()) {
    $('#nav').hidden = true;
    view = signInView();
    return;
  }
  $('#nav').hidden = false;
  const [, section, id] = (location.hash || '#/sessions').slice(1).split('/');
  for (const a of document.querySelectorAll('nav a')) {
    if (a.getAttribute('href') === `#/${section}`) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  setConn('', '');
  if (section === 'presets' && id) view = presetEditor(id === 'new' ? null : id);
  else if (section === 'presets') view = presetList();
  else if (section === 'sessions' && id) view = new SessionView(id);
  else view = sessionList();
}

function go(hash) {
  if (location.hash === hash) route();
  else location.hash = hash;
}

function signOut(message) {
  sessionStorage.removeItem(KEY);
  go('#/sessions');
  if (message) showAlert(message);
}

// ---------------------------------------------------------------------------------------------
// Sign in.

function signInView() {
  const key = h('input', { type: 'password', autocomplete: 'off', required: true, spellcheck: 'false' });
  const form = h('form', { class: 'card signin', onsubmit: async (e) => {
    e.preventDefault();
    const k = key.value.trim();
    if (!k) return;
    showAlert('');
    key.removeAttribute('aria-invalid');
    try {
      await api('GET', '/v1/sessions?limit=1', undefined, k);
    } catch (err) {
      // A refused key is said so here: api() signs out only a key that was signed in.
      key.setAttribute('aria-invalid', 'true');
      showAlert(err.status === 401 ? 'This API key was refused (unknown, revoked or expired). Check it and sign in again.' : (err.message || String(err)));
      key.focus();
      return;
    }
    sessionStorage.setItem(KEY, k);
    route();
  } },
  h('h1', {}, 'Sign in'),
  field('API key', key, 'Kept in this tab\'s sessionStorage only. Live streams use short-lived stream tokens instead of the key.'),
  h('p', {}, h('button', { type: 'submit', class: 'primary' }, 'Sign in')));
  main.append(form);
  key.focus();
  return {};
}

// ---------------------------------------------------------------------------------------------
// Presets.

let presetCache = null;

async function presets(refresh = false) {
  if (!presetCache || refresh) {
    const items = [];
    let cursor = '';
    do {
      const page = await api('GET', `/v1/presets?limit=500&cursor=${encodeURIComponent(cursor)}`);
      items.push(...page.items);
      cursor = page.nextCursor;
    } while (cursor);
    presetCache = items;
  }
  return presetCache;
}

function presetList() {
  const body = h('tbody');
  main.append(h('h1', {}, 'Presets'),
    h('p', {}, h('a', { class: 'button', href: '#/presets/new' }, 'New preset')),
    h('div', { class: 'table-wrap' }, h('table', {},
      h('thead', {}, h('tr', {}, h('th', {}, 'Name'), h('th', {}, 'Version'), h('th', {}, 'Model'), h('th', { class: 'hide-narrow' }, 'Mode'), h('th', {}, 'Updated'))),
      body)));
  guard(async () => {
    for (const p of await presets(true)) {
      body.append(h('tr', {},
        h('td', {}, h('a', { href: `#/presets/${p.id}` }, p.name)),
        h('td', { class: 'num' }, p.version),
        h('td', {}, `${p.model.provider}/${p.model.model}`),
        h('td', { class: 'hide-narrow' }, p.tools.mode),
        h('td', {}, new Date(p.updatedAt).toLocaleString())));
    }
    if (!body.children.length) body.append(h('tr', {}, h('td', { colspan: 5 }, 'No presets yet.')));
  });
  return {};
}

// presetEditor edits every field of a preset; what the form has no control for is kept from the
// loaded version (PUT replaces the whole preset) or given in the policies JSON.
function presetEditor(id) {
  let base = { name: '', model: { provider: 'scripted', model: 'default' }, tools: {}, prompt: {}, approval: {}, limits: {} };
  const name = h('input', { type: 'text', required: true, maxlength: 200 });
  const provider = h('select', {}, ['scripted', 'deepseek', 'openai'].map((p) => h('option', { value: p }, p)));
  const model = h('input', { type: 'text', required: true, maxlength: 200 });
  const baseUrl = h('input', { type: 'url', placeholder: 'provider default' });
  const mode = h('select', {}, ['native', 'code', 'both'].map((m) => h('option', { value: m }, m)));
  const toolsBox = h('div', { class: 'tools-list' }, h('p', { class: 'hint' }, 'Loading the tool catalogue…'));
  const persona = h('textarea', { rows: 3 });
  const sections = h('div', { class: 'editor-sections' });
  const variables = h('div', { class: 'editor-vars' });
  const policies = h('textarea', { rows: 6, class: 'mono', spellcheck: 'false' });
  const preview = h('div', { class: 'preview', 'aria-live': 'polite' });
  const title = h('h1', {}, id ? 'Edit preset' : 'New preset');

  // A row added with its Add button takes the focus on its first field; a removed row gives it
  // back to the Add button, so keyboard focus never falls to the page.
  const addSection = h('button', { type: 'button', onclick: () => sectionRow(undefined, true) }, 'Add section');
  const addVariable = h('button', { type: 'button', onclick: () => variableRow('', '', true) }, 'Add variable');
  function sectionRow(s = { name: '', order: 0, text: '' }, focus = false) {
    const n = h('input', { type: 'text', value: s.name, required: true, dataset: { k: 'name' } });
    const o = h('input', { type: 'number', value: s.order ?? 0, step: 'any', dataset: { k: 'order' } });
    const t = h('textarea', { rows: 2, dataset: { k: 'text' } });
    t.value = s.text || '';
    const c = h('input', { type: 'checkbox', dataset: { k: 'complete' } });
    c.checked = !!s.complete;
    const card = h('div', { class: 'card section-row' },
      h('div', { class: 'row' }, h('div', { class: 'grow' }, field('Section name', n)), field('Order', o)),
      field('Section text', t),
      h('label', { class: 'inline', for: (c.id = nextId('f')) }, c, 'Complete (replaces the assembled prompt)'),
      h('button', { type: 'button', class: 'danger', onclick: () => { card.remove(); addSection.focus(); } }, 'Remove section'));
    sections.append(card);
    if (focus) n.focus();
  }
  function variableRow(k = '', v = '', focus = false) {
    const kn = h('input', { type: 'text', value: k, pattern: '[a-z][a-z0-9_]*', dataset: { k: 'key' } });
    const vv = h('input', { type: 'text', value: v, dataset: { k: 'value' } });
    const row = h('div', { class: 'row var-row' }, h('div', { class: 'grow' }, field('Variable name', kn)),
      h('div', { class: 'grow' }, field('Value', vv)),
      h('button', { type: 'button', class: 'danger', onclick: () => { row.remove(); addVariable.focus(); } }, 'Remove variable'));
    variables.append(row);
    if (focus) kn.focus();
  }

  function fill(p) {
    base = structuredClone(p);
    for (const k of ['id', 'version', 'createdAt', 'updatedAt']) delete base[k];
    name.value = p.name;
    provider.value = p.model.provider || 'deepseek';
    model.value = p.model.model;
    baseUrl.value = p.model.baseUrl || '';
    mode.value = p.tools?.mode || 'native';
    persona.value = p.prompt?.persona || '';
    sections.replaceChildren();
    for (const s of p.prompt?.sections || []) sectionRow(s);
    variables.replaceChildren();
    for (const [k, v] of Object.entries(p.prompt?.variables || {})) variableRow(k, v);
    const rest = {};
    for (const [k, v] of Object.entries(base)) if (!['name', 'model', 'tools', 'prompt'].includes(k)) rest[k] = v;
    policies.value = JSON.stringify(rest, null, 2);
    title.textContent = `Edit preset ${p.name} (version ${p.version})`;
    markAllowed(p.tools?.allow || []);
  }

  let allowed = [];
  function markAllowed(list) {
    allowed = list;
    for (const cb of toolsBox.querySelectorAll('input[type=checkbox]')) cb.checked = list.includes(cb.value);
  }

  function body() {
    const b = structuredClone(base);
    b.name = name.value.trim();
    b.model = { ...b.model, provider: provider.value, model: model.value.trim() };
    if (baseUrl.value.trim()) b.model.baseUrl = baseUrl.value.trim(); else delete b.model.baseUrl;
    b.tools = { ...b.tools, mode: mode.value,
      allow: [...toolsBox.querySelectorAll('input[type=checkbox]:checked')].map((c) => c.value) };
    const secs = [...sections.querySelectorAll('.section-row')].map((row) => {
      const get = (k) => row.querySelector(`[data-k="${k}"]`);
      return { name: get('name').value.trim(), order: Number(get('order').value || 0), text: get('text').value, complete: get('complete').checked };
    });
    const vars = {};
    for (const row of variables.querySelectorAll('.var-row')) {
      const k = row.querySelector('[data-k="key"]').value.trim();
      if (k) vars[k] = row.querySelector('[data-k="value"]').value;
    }
    b.prompt = { ...b.prompt, persona: persona.value, sections: secs, variables: vars };
    let extra;
    try { extra = JSON.parse(policies.value || '{}'); } catch (e) { throw new Error(`Policies JSON: ${e.message}`); }
    if (typeof extra !== 'object' || Array.isArray(extra) || extra === null) throw new Error('Policies JSON must be an object');
    for (const k of Object.keys(b)) if (!['name', 'model', 'tools', 'prompt'].includes(k)) delete b[k];
    return { ...b, ...extra };
  }

  async function save(e) {
    e.preventDefault();
    await guard(async () => {
      const p = id ? await api('PUT', `/v1/presets/${id}`, body()) : await api('POST', '/v1/presets', body());
      presetCache = null;
      preview.replaceChildren(h('p', { class: 'note' }, `Saved version ${p.version}.`));
      if (!id) { go(`#/presets/${p.id}`); return; }
      fill(p);
    });
  }

  // The prompt preview assembles the saved version: GET /v1/sessions/{id}/prompt of a session
  // made for the purpose, deleted right after.
  async function doPreview() {
    if (!id) { showAlert('Save the preset first: the preview shows the saved version.'); return; }
    await guard(async () => {
      const s = await api('POST', '/v1/sessions', { presetId: id });
      try {
        const pr = await api('GET', `/v1/sessions/${s.id}/prompt`);
        preview.replaceChildren(h('h2', {}, 'System prompt'), h('pre', { class: 'preview-system' }, pr.system || '(empty)'),
          h('h2', {}, `Tools (${pr.tools.length})`),
          ...pr.tools.map((t) => h('details', {}, h('summary', {}, t.name, ' — ', t.description), h('pre', {}, pretty(t.parameters)))));
      } finally {
        await api('DELETE', `/v1/sessions/${s.id}`);
      }
    });
  }

  const form = h('form', { onsubmit: save },
    title,
    field('Name', name),
    h('fieldset', {}, h('legend', {}, 'Model'),
      h('div', { class: 'row' }, field('Provider', provider), h('div', { class: 'grow' }, field('Model', model))),
      field('Base URL', baseUrl, 'deepseek and openai only; the host must be in the server\'s DSHD_MODEL_HOSTS.')),
    h('fieldset', {}, h('legend', {}, 'Tools'), field('Mode', mode),
      h('p', { class: 'hint' }, 'Allowed tools: none checked means all.'), toolsBox),
    h('fieldset', {}, h('legend', {}, 'Prompt'), field('Persona', persona),
      h('h2', {}, 'Sections'), sections, addSection,
      h('h2', {}, 'Variables'), variables, addVariable),
    field('Policies (JSON)', policies, 'Merged into the preset: approval ({"policy":"ask","ask":["echo"],"timeoutMs":60000}), limits ({"maxSteps":20}) and any other preset field. Saving replaces the whole preset (PUT) with a new version.'),
    h('div', { class: 'row' },
      h('button', { type: 'submit', class: 'primary' }, 'Save'),
      h('button', { type: 'button', onclick: doPreview }, 'Preview prompt'),
      id && h('button', { type: 'button', class: 'danger', onclick: () => guard(async () => {
        if (!confirm('Delete this preset? Sessions that pinned a version keep working.')) return;
        await api('DELETE', `/v1/presets/${id}`);
        presetCache = null;
        go('#/presets');
      }) }, 'Delete')),
    preview);
  main.append(form);
  policies.value = JSON.stringify({ approval: { policy: 'ask', ask: [] }, limits: { maxSteps: 50 } }, null, 2);
  model.value = 'default';

  guard(async () => {
    const cat = await api('GET', '/v1/tools');
    toolsBox.replaceChildren(...cat.items.map((t) => {
      const cb = h('input', { type: 'checkbox', value: t.name, id: nextId('tool') });
      cb.checked = allowed.includes(t.name);
      return h('label', { class: 'inline', for: cb.id, title: t.description }, cb, t.name);
    }));
  });
  if (id) guard(async () => fill(await api('GET', `/v1/presets/${id}`)));
  name.focus();
  return {};
}

// ---------------------------------------------------------------------------------------------
// Sessions list: polled while shown.

function sessionList() {
  const body = h('tbody');
  const presetSel = h('select', {});
  main.append(h('h1', {}, 'Sessions'),
    h('form', { class: 'row', onsubmit: async (e) => {
      e.preventDefault();
      await guard(async () => {
        const s = await api('POST', '/v1/sessions', { presetId: presetSel.value });
        go(`#/sessions/${s.id}`);
      });
    } }, field('Preset', presetSel), h('button', { type: 'submit', class: 'primary' }, 'New session')),
    h('div', { class: 'table-wrap' }, h('table', { class: 'sessions' },
      h('thead', {}, h('tr', {}, h('th', {}, 'Session'), h('th', {}, 'Status'), h('th', {}, 'Preset'), h('th', { class: 'hide-narrow' }, 'Turns'), h('th', { class: 'hide-narrow' }, 'Events'), h('th', {}, 'Created'))),
      body)));
  let names = {};
  guard(async () => {
    const list = await presets(true);
    names = Object.fromEntries(list.map((p) => [p.id, p.name]));
    presetSel.replaceChildren(...list.map((p) => h('option', { value: p.id }, `${p.name} (v${p.version})`)));
    if (!list.length) presetSel.append(h('option', { value: '' }, 'create a preset first'));
  });
  // A row is kept (with its link, so keyboard focus stays on it) while its session is listed;
  // only its cells change.
  const rows = new Map();
  function sessionRow(s) {
    let tr = rows.get(s.id);
    if (!tr) {
      tr = h('tr', { dataset: { id: s.id } }, h('td', {}, h('a', { href: `#/sessions/${s.id}`, class: 'mono' }, shortId(s.id))));
      rows.set(s.id, tr);
    }
    const cells = [
      h('td', {}, badge(s.status || 'idle'), s.turn ? ` turn ${s.turn}` : ''),
      h('td', {}, names[s.presetId] || (s.presetId ? shortId(s.presetId) : '—'), s.parentSession ? ' (fork)' : ''),
      h('td', { class: 'num hide-narrow' }, s.lastTurn ?? ''),
      h('td', { class: 'num hide-narrow' }, s.lastSeq + 1),
      h('td', {}, new Date(s.createdAt).toLocaleString())];
    // Each changed cell is replaced where it is: the first cell, with the link, never leaves the
    // page (taking it out, even to put it back at once, would blur a focused link).
    const shown = [...tr.children].slice(1);
    cells.forEach((td, i) => {
      if (!shown[i]) tr.append(td);
      else if (shown[i].outerHTML !== td.outerHTML) shown[i].replaceWith(td);
    });
    return tr;
  }
  let stopped = false;
  let timer;
  let loads = 0; // refreshes rendered, in data-loads (the browser test waits for one)
  async function load() {
    if (stopped) return;
    if (navigator.onLine) {
      await guard(async () => {
        const page = await api('GET', '/v1/sessions?limit=100');
        // Moving the rows blurs a focused link: it gets the focus back.
        const active = document.activeElement;
        const next = page.items.map(sessionRow);
        const listed = new Set(page.items.map((s) => s.id));
        for (const id of rows.keys()) if (!listed.has(id)) rows.delete(id);
        if (next.length !== body.children.length || next.some((tr, i) => body.children[i] !== tr)) {
          body.replaceChildren(...next);
          if (!page.items.length) body.append(h('tr', {}, h('td', { colspan: 6 }, 'No sessions yet.')));
        }
        if (active && active !== document.activeElement && body.contains(active)) active.focus();
        body.dataset.loads = String(++loads);
      });
    }
    if (!stopped) timer = setTimeout(load, 2000);
  }
  load();
  return { close() { stopped = true; clearTimeout(timer); } };
}

// ---------------------------------------------------------------------------------------------
// A session: chat, timeline, history, turns, prompt; following the log live.

class SessionView {
  constructor(id) {
    this.id = id;
    this.lastSeq = -1;
    this.events = [];
    this.turnOpen = false; // whether a turn/start of the events read has no turn/end yet
    this.forkAt = new Set(); // the seqs a fork may end at: those outside an open turn
    this.turnEls = new Map();   // turn number -> section
    this.bubbles = new Map();   // "turn:step" -> assistant bubble
    this.userMsgs = new Map();  // message id -> bubble
    this.tools = new Map();     // call id -> card
    this.subs = new Map();      // sub-call id -> li
    this.approvals = new Map(); // approval id -> card
    this.clientWaits = new Map(); // call id -> the form that posts a client-executed call's result, and its controls
    this.inbox = { 'next-turn': [], 'next-step': [] };
    this.currentTurn = null;
    this.endedTurns = new Set(); // ended turns whose status the turn resource has not shown yet
    this.knownTurns = new Map(); // turn number -> the ended turn as GET .../turns showed it
    this.queue = [];
    this.closed = false;
    this.retry = 0;
    this.build();
    this.onOnline = () => this.connect();
    this.onOffline = () => { this.disconnect(); setConn('down', 'offline'); };
    window.addEventListener('online', this.onOnline);
    window.addEventListener('offline', this.onOffline);
    this.refresh();
    this.connect();
    this.poll = setInterval(() => { if (navigator.onLine) this.refresh(); }, 5000);
    // The tool calls without a result yet show how long they have run, once a second.
    this.running = new Set();
    this.ticker = setInterval(() => this.tickRunning(), 1000);
  }

  close() {
    this.closed = true;
    clearInterval(this.poll);
    clearInterval(this.ticker);
    clearTimeout(this.reconnectTimer);
    clearTimeout(this.refreshTimer);
    window.removeEventListener('online', this.onOnline);
    window.removeEventListener('offline', this.onOffline);
    this.disconnect();
  }

  build() {
    this.title = h('h1', { class: 'mono' }, `Session ${shortId(this.id)}`);
    this.status = h('span', { class: 'status', role: 'status', 'aria-live': 'polite' });
    this.usage = h('span', { class: 'usage' });
    this.cancelBtn = h('button', { type: 'button', class: 'danger', onclick: () => this.cancel() }, 'Cancel turn');
    // A fork copies a prefix that ends between turns (SES-15): the whole log only while no turn
    // holds the session, and in the timeline only after a turn/end or before the first turn.
    this.forkBtn = h('button', { type: 'button', disabled: true, title: 'A fork is made between turns', onclick: () => this.fork(null) }, 'Fork');
    const head = h('div', { class: 'session-head' }, this.title, this.status, this.cancelBtn, this.forkBtn, this.usage);

    const tabs = ['Chat', 'Timeline', 'Turns', 'History', 'Prompt'];
    this.panels = {};
    const list = h('div', { role: 'tablist', 'aria-label': 'Session views' });
    this.tabButtons = tabs.map((name, i) => {
      const pid = nextId('panel');
      const b = h('button', { type: 'button', role: 'tab', id: nextId('tab'), 'aria-controls': pid,
        'aria-selected': i === 0 ? 'true' : 'false', tabindex: i === 0 ? '0' : '-1',
        onclick: () => this.select(name),
        onkeydown: (e) => {
          const d = e.key === 'ArrowRight' ? 1 : e.key === 'ArrowLeft' ? -1 : 0;
          if (!d) return;
          const next = tabs[(i + d + tabs.length) % tabs.length];
          this.select(next);
          this.tabButtons[tabs.indexOf(next)].focus();
        } }, name);
      this.panels[name] = h('section', { role: 'tabpanel', id: pid, 'aria-labelledby': b.id, hidden: i !== 0 });
      list.append(b);
      return b;
    });

    // Chat
    this.chat = h('div', { class: 'chat', 'aria-live': 'off' });
    this.pending = h('div', { class: 'chat pending-area' });
    const input = h('textarea', { rows: 2, name: 'message', placeholder: 'tools:2, say:Hello, tool:sleep args:{"ms":5000} …' });
    const modeSel = h('select', {}, ['followup', 'steer', 'inject'].map((m) => h('option', { value: m }, m)));
    const send = async (e) => {
      e?.preventDefault();
      const content = input.value;
      if (!content.trim()) return;
      await guard(async () => {
        await api('POST', `/v1/sessions/${this.id}/messages`, { content, mode: modeSel.value });
        input.value = '';
        this.refreshSoon();
      });
    };
    input.addEventListener('keydown', (e) => { if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) send(e); });
    this.composer = h('form', { class: 'composer', onsubmit: send },
      h('div', { class: 'row' }, h('div', { class: 'grow' }, field('Message', input, 'Ctrl+Enter sends.')), field('Mode', modeSel),
        h('button', { type: 'submit', class: 'primary' }, 'Send')));
    this.panels.Chat.append(this.chat, this.pending, this.composer);

    // Timeline
    this.typeFilter = h('input', { type: 'text', placeholder: 'e.g. tool/, turn/end', list: 'event-types' });
    this.seqFilter = h('input', { type: 'number', min: 0, placeholder: '0' });
    this.typeList = h('datalist', { id: 'event-types' });
    const refilter = () => this.renderTimeline();
    this.typeFilter.addEventListener('input', refilter);
    this.seqFilter.addEventListener('input', refilter);
    this.timelineBody = h('tbody');
    this.timelineCount = h('p', { class: 'hint', 'aria-live': 'polite' });
    this.panels.Timeline.append(
      h('div', { class: 'row' }, h('div', { class: 'grow' }, field('Types', this.typeFilter, 'Comma-separated; an entry matches types that start with it.')),
        field('From seq', this.seqFilter)), this.typeList, this.timelineCount,
      h('div', { class: 'table-wrap' }, h('table', { class: 'timeline' },
        h('thead', {}, h('tr', {}, h('th', {}, 'Seq'), h('th', { class: 'hide-narrow' }, 'Time'), h('th', {}, 'Type'), h('th', {}, 'Data'), h('th', {}, 'Fork'))),
        this.timelineBody)));

    this.turnsBody = h('tbody');
    this.panels.Turns.append(h('button', { type: 'button', onclick: () => this.loadTurns() }, 'Refresh'),
      h('div', { class: 'table-wrap' }, h('table', { class: 'turns' },
        h('thead', {}, h('tr', {}, h('th', {}, 'Turn'), h('th', {}, 'Status'), h('th', {}, 'Seqs'), h('th', {}, 'Steps'), h('th', {}, 'Duration'), h('th', {}, 'Tokens in/out'), h('th', {}, 'Calls (model/tool)'), h('th', {}, 'Errors'))),
        this.turnsBody)));
    this.history = h('div');
    this.panels.History.append(h('button', { type: 'button', onclick: () => this.loadHistory() }, 'Refresh'), this.history);
    this.prompt = h('div');
    this.panels.Prompt.append(this.prompt);

    main.append(head, list, ...Object.values(this.panels));
  }

  select(name) {
    for (const b of this.tabButtons) {
      const on = b.textContent === name;
      b.setAttribute('aria-selected', on ? 'true' : 'false');
      b.tabIndex = on ? 0 : -1;
    }
    for (const [n, p] of Object.entries(this.panels)) p.hidden = n !== name;
    if (name === 'Turns') this.loadTurns();
    if (name === 'History') this.loadHistory();
    if (name === 'Prompt') this.loadPrompt();
  }

  // ----- the stream

  async connect() {
    if (this.closed || this.es || !navigator.onLine) return;
    clearTimeout(this.reconnectTimer);
    this.connecting = true;
    let tok;
    try {
      tok = await api('POST', `/v1/sessions/${this.id}/stream-tokens`);
    } catch (e) {
      this.connecting = false;
      if (e.status === 404) { showAlert('This session does not exist (any more).'); return; }
      this.scheduleReconnect();
      return;
    }
    // The turns that ended before the page opened, so that their turn/end shows their status at
    // once (a failed read leaves them to syncTurns).
    if (!this.turnsRead) {
      try { await this.readTurns(); this.turnsRead = true; } catch { /* syncTurns reads them */ }
    }
    this.connecting = false;
    if (this.closed || this.es || !navigator.onLine) return;
    const es = new EventSource(`${tok.streamUrl}&after=${this.lastSeq}`);
    this.es = es;
    setConn('', 'connecting…');
    es.onopen = () => { this.retry = 0; setConn('live', 'live'); };
    es.onerror = () => {
      if (es.readyState === EventSource.CLOSED) {
        // Refused (an expired token, a deleted session): a fresh token, from the last seq.
        this.disconnect();
        this.scheduleReconnect();
      } else {
        setConn('down', 'reconnecting…'); // the browser resumes with Last-Event-ID
      }
    };
    es.onmessage = (m) => this.receive(m);
    // Named events (event: <type>) do not reach onmessage: listen to each type as it is seen.
    this.listen = (type) => {
      if (this.listening.has(type)) return;
      this.listening.add(type);
      es.addEventListener(type, (m) => this.receive(m));
    };
    this.listening = new Set();
    for (const t of KNOWN_TYPES) this.listen(t);
  }

  disconnect() {
    if (this.es) { this.es.close(); this.es = null; }
  }

  scheduleReconnect() {
    if (this.closed) return;
    const delay = Math.min(10000, 500 * 2 ** this.retry++);
    setConn('down', 'reconnecting…');
    clearTimeout(this.reconnectTimer);
    this.reconnectTimer = setTimeout(() => this.connect(), delay);
  }

  // receive queues a frame; drain applies the queue in seq order. An event at or below the last
  // seq applied is already on screen; one beyond the next seq means frames did not arrive (a
  // kind this page does not listen to by name): the missing events are read as JSON pages first.
  receive(m) {
    let ev;
    try { ev = JSON.parse(m.data); } catch { return; }
    this.queue.push(ev);
    if (!this.draining) this.drain();
  }

  async drain() {
    this.draining = true;
    try {
      while (this.queue.length && !this.closed) {
        const ev = this.queue.shift();
        if (ev.seq <= this.lastSeq) continue;
        while (ev.seq > this.lastSeq + 1 && !this.closed) {
          const page = await api('GET', `/v1/sessions/${this.id}/events?after=${this.lastSeq}&limit=${Math.min(1000, ev.seq - this.lastSeq - 1)}`);
          if (!page.events.length) break;
          for (const missing of page.events) if (missing.seq < ev.seq) this.take(missing);
        }
        this.take(ev);
      }
    } catch (e) {
      showAlert(`reading the log: ${e.message}`);
    } finally {
      this.draining = false;
    }
  }

  take(ev) {
    if (ev.seq <= this.lastSeq) return;
    // Follow the conversation while the reader is at its end.
    const atEnd = window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 80;
    this.lastSeq = ev.seq;
    this.events.push(ev);
    if (ev.type === 'turn/start') this.turnOpen = true;
    if (ev.type === 'turn/end') this.turnOpen = false;
    if (!this.turnOpen) this.forkAt.add(ev.seq);
    if (ev.type === 'turn/start') this.setForkable(false); // once a turn, not once an event
    try { this.apply(ev); } catch (e) { showAlert(`event ${ev.seq} (${ev.type}): ${e.message}`); }
    this.timelineRow(ev);
    if (atEnd && !this.panels.Chat.hidden && this.composer.contains(document.activeElement)) this.composer.scrollIntoView({ block: 'end' });
  }

  // ----- applying events to the chat

  turnEl(n) {
    let el = this.turnEls.get(n);
    if (!el) {
      const st = h('span', { class: 'turn-status' }, badge('running'));
      el = h('section', { class: 'turn', dataset: { turn: n }, 'aria-label': `Turn ${n}` },
        h('div', { class: 'turn-head' }, h('span', {}, `Turn ${n}`), st));
      el.statusEl = st;
      this.turnEls.set(n, el);
      this.chat.append(el);
    }
    return el;
  }

  place(el) {
    (this.currentTurn ? this.turnEl(this.currentTurn) : this.chat).append(el);
  }

  userBubble(msg, pending) {
    let b = this.userMsgs.get(msg.id);
    if (!b) {
      b = h('div', { class: 'msg user', dataset: { id: msg.id } }, textOf(msg.content));
      this.userMsgs.set(msg.id, b);
    }
    b.classList.toggle('pending', pending);
    return b;
  }

  assistantBubble(turn, step) {
    const key = `${turn}:${step}`;
    let b = this.bubbles.get(key);
    if (!b) {
      b = h('div', { class: 'msg assistant', dataset: { turn, step } });
      b.blocks = new Map();
      this.bubbles.set(key, b);
      this.place(b);
    }
    return b;
  }

  block(b, index, kind) {
    let el = b.blocks.get(index);
    if (!el) {
      el = h('div', { class: kind === 'reasoning' ? 'reasoning' : 'text' });
      b.blocks.set(index, el);
      b.append(el);
    }
    return el;
  }

  // tickRunning shows each running call's time since its tool/call: the browser's clock against
  // the event's server time, so a reloaded page counts from the call's start too (a skew between
  // the two clocks shifts it).
  tickRunning() {
    for (const c of this.running) {
      const secs = Math.max(0, Math.floor((Date.now() - c.started) / 1000));
      c.timing.textContent = `running for ${secs < 60 ? `${secs} s` : `${Math.floor(secs / 60)} min ${secs % 60} s`}`;
    }
  }

  toolCard(callId, name) {
    let c = this.tools.get(callId);
    if (!c) {
      c = h('article', { class: 'tool', dataset: { callId }, 'aria-label': `Tool call ${name || ''}` });
      c.head = h('div', { class: 'tool-head' }, h('span', { class: 'tool-name mono' }, name || '?'));
      c.state = h('span', { class: 'tool-state' }, badge('running'));
      c.timing = h('span', { class: 'timing' });
      c.head.append(c.state, c.timing);
      c.args = h('div', { class: 'tool-args' });
      c.result = h('div', { class: 'tool-result' });
      c.subs = h('ul', { class: 'subcalls', 'aria-label': 'run_code sub-calls' });
      c.append(c.head, c.args, c.subs, c.result);
      this.tools.set(callId, c);
      this.place(c);
    }
    return c;
  }

  apply(ev) {
    const d = ev.data || {};
    switch (ev.type) {
      case 'session/end-seed':
        this.inbox = { 'next-turn': [], 'next-step': [] };
        this.place(h('p', { class: 'note' }, `— copied from the parent session up to here (seq ${ev.seq}) —`));
        break;
      case 'agent/inbox/spliced': {
        const list = this.inbox[d.target] || [];
        const removed = list.splice(d.start, d.removedCount || 0, ...(d.inserted || []).map((m) => m.id));
        for (const m of d.inserted || []) {
          if (m.source?.kind === 'user') this.pending.append(this.userBubble(m, true));
        }
        if (d.outcome === 'canceled') {
          for (const id of removed) {
            const b = this.userMsgs.get(id);
            if (b && b.classList.contains('pending')) {
              b.classList.remove('pending');
              b.append(' ', badge('cancelled'));
            }
          }
        }
        break;
      }
      case 'turn/start':
        this.currentTurn = d.turn;
        this.turnEl(d.turn);
        break;
      case 'user/message':
        if (d.source?.kind === 'user') this.place(this.userBubble(d, false));
        else if (d.source?.kind === 'tool') this.place(h('p', { class: 'note' }, 'tool context entered: ', textOf(d.content).slice(0, 200)));
        break;
      case 'assistant/chunk': {
        const c = d.chunk || {};
        if (c.type === 'text-delta' || c.type === 'reasoning-delta') {
          const b = this.assistantBubble(d.turn, d.step);
          this.block(b, `${c.type}:${c.index}`, c.type === 'reasoning-delta' ? 'reasoning' : 'text').append(c.text || '');
        } else if (c.type === 'finish' && c.reason?.kind === 'error') {
          this.place(h('p', { class: 'note model-error' }, `model call failed: ${c.reason.failure?.code || ''} ${c.reason.failure?.message || ''}`));
        }
        break;
      }
      case 'assistant/message': {
        const blocks = (d.message?.content || []).filter((b) => b.type === 'text' || b.type === 'reasoning');
        const key = `${d.turn}:${d.step}`;
        if (!blocks.length && !this.bubbles.has(key)) break;
        const b = this.assistantBubble(d.turn, d.step);
        b.blocks = new Map();
        b.replaceChildren(...blocks.map((x) => h('div', { class: x.type === 'reasoning' ? 'reasoning' : 'text' }, x.text)));
        if (d.interrupted) b.append(badge('interrupted'));
        b.dataset.final = 'true';
        if (!blocks.length) { b.remove(); this.bubbles.delete(key); }
        break;
      }
      case 'tool/call': {
        const c = this.toolCard(d.callId, d.name);
        c.started = ev.time;
        c.rawArgs = d.arguments;
        this.running.add(c);
        this.tickRunning();
        c.args.replaceChildren(h('pre', { class: 'args' }, pretty(d.arguments || '')));
        break;
      }
      case 'tool/result': {
        const callId = d.message?.source?.callId;
        const c = this.toolCard(callId, this.tools.get(callId) ? null : '(never started)');
        const block = (d.message?.content || []).find((x) => x.type === 'tool-result') || {};
        const failed = block.isError || !!d.error;
        this.running.delete(c);
        c.classList.toggle('error', failed);
        c.state.replaceChildren(badge(failed ? 'error' : 'ok'), d.error ? h('code', { class: 'error-code' }, ` ${d.error.code}`) : '');
        if (c.started !== undefined) c.timing.textContent = `${ev.time - c.started} ms`;
        c.result.replaceChildren(h('pre', { class: 'result' }, textOf(block.content)));
        break;
      }
      case 'tool/code-dispatch-start': {
        const parent = this.tools.get(d.parentCallId) || this.tools.get(d.rootCallId) || this.toolCard(d.rootCallId, 'run_code');
        const li = h('li', { class: 'subcall', dataset: { subCallId: d.subCallId } },
          h('div', { class: 'tool-head' }, h('span', { class: 'mono' }, d.name), h('span', { class: 'sub-state' }, badge('running'))),
          h('pre', {}, pretty(d.arguments)));
        li.started = ev.time;
        li.rawArgs = d.arguments;
        const nested = d.parentCallId !== d.rootCallId ? this.subs.get(d.parentCallId) : null;
        (nested ? (nested.querySelector('ul') || nested.appendChild(h('ul', { class: 'subcalls' }))) : parent.subs).append(li);
        this.subs.set(d.subCallId, li);
        break;
      }
      case 'tool/code-dispatch': {
        const li = this.subs.get(d.subCallId);
        if (!li) break;
        $('.sub-state', li).replaceChildren(badge(d.isError ? 'error' : 'ok'), li.started !== undefined ? ` ${ev.time - li.started} ms` : '');
        li.append(h('pre', { class: 'result' }, textOf(d.content)));
        break;
      }
      case 'approval/asked': {
        // The ask names its call (APR-3); the arguments are the call's (its tool/call, or a
        // run_code sub-call's tool/code-dispatch-start); logs of older servers carry them here.
        // When neither is on this page, the pending approvals list (which reads them from the
        // log) fills them in.
        const args = d.arguments !== undefined ? d.arguments : (this.tools.get(d.callId) || this.subs.get(d.callId))?.rawArgs;
        const argsPre = h('pre', {}, args !== undefined ? pretty(args) : '');
        if (args === undefined) this.fillApprovalArgs(d.id, argsPre);
        const card = h('div', { class: 'approval', role: 'group', 'aria-label': `Approval for ${d.toolName}`, dataset: { approvalId: d.id } },
          h('div', {}, h('strong', {}, `Approve ${d.toolName}?`), d.reason ? ` ${d.reason}` : ''),
          argsPre);
        const actions = h('div', { class: 'actions' },
          h('button', { type: 'button', class: 'primary', onclick: () => this.answer(d.id, 'allowed-once') }, 'Allow once'),
          h('button', { type: 'button', class: 'danger', onclick: () => this.answer(d.id, 'rejected') }, 'Reject'));
        card.append(actions);
        card.actions = actions;
        this.approvals.set(d.id, card);
        const tool = this.tools.get(d.callId);
        if (tool) tool.insertBefore(card, tool.result); else this.place(card);
        this.refreshSoon();
        break;
      }
      case 'approval/decided': {
        const card = this.approvals.get(d.id);
        if (card) {
          card.actions.replaceChildren(badge(d.outcome === 'allowed-once' ? 'ok' : d.outcome), d.reason ? ` ${d.reason}` : '');
          card.classList.add('decided');
        }
        this.answered(`a:${d.id}`);
        this.refreshSoon();
        break;
      }
      case 'turn/parked':
        this.parked(d);
        break;
      case 'tool/client-result':
        this.clientResult(d);
        this.refreshSoon();
        break;
      case 'turn/resumed':
        this.closeWaits('the turn resumed without it');
        this.turnEl(d.turn).statusEl.replaceChildren(badge('running'));
        this.place(h('p', { class: 'note' }, `turn ${d.turn} resumed (parked at seq ${d.parkedSeq})`));
        this.refreshSoon();
        break;
      case 'llm/retry':
        this.place(h('p', { class: 'note' }, `retrying the model call after ${d.code || 'a failure'} (attempt ${d.attempt} of ${d.maxRetries + 1}), in ${d.delayMs} ms`));
        break;
      case 'agent/cancel':
        this.place(h('p', { class: 'note' }, 'cancel requested'));
        this.answered(null);
        this.refreshSoon();
        break;
      case 'turn/end':
        this.turnEl(d.turn);
        this.closeWaits('the turn ended without it');
        for (const c of this.running) c.timing.textContent = '';
        this.running.clear();
        this.currentTurn = null;
        if (this.knownTurns.has(d.turn)) {
          this.showTurn(this.knownTurns.get(d.turn));
        } else {
          this.endedTurns.add(d.turn);
          this.endedCount = (this.endedCount || 0) + 1;
        }
        this.refreshSoon();
        break;
      default:
    }
  }

  // ----- parked turns (E6)

  // parked shows what a parked turn waits for and, for each client-executed call among its
  // waits, a form that posts the call's result; approvals have their buttons on the ask's card.
  parked(d) {
    const waits = d.waits || [];
    const what = d.reason === 'handover' ? 'handed over to another replica; it waits for nothing'
      : `waits for ${waits.map((w) => w.kind === 'approval' ? `approval of ${w.toolName}` : `the client's result of ${w.toolName}`).join(', ')}`;
    const status = d.reason === 'approval' ? 'waiting-approval' : d.reason === 'client' ? 'waiting-client' : 'queued';
    const note = h('div', { class: 'parked', role: 'group', 'aria-label': `Turn ${d.turn} parked` },
      h('div', {}, badge(status), ` turn ${d.turn} parked in step ${d.step}: ${what}`));
    this.place(note);
    this.turnEl(d.turn).statusEl.replaceChildren(badge(status));
    this.park = { turn: d.turn, open: new Set(waits.map((w) => w.kind === 'approval' ? `a:${w.approvalId}` : `c:${w.callId}`)) };
    for (const w of waits) {
      if (w.kind !== 'client' || this.clientWaits.has(w.callId)) continue;
      const { form } = this.clientForm(w);
      const tool = this.tools.get(w.callId);
      if (tool) tool.insertBefore(form, tool.result); else note.append(form);
    }
    this.refreshSoon();
  }

  clientForm(w) {
    const content = h('textarea', { rows: 3, name: 'content', placeholder: 'The tool\'s output' });
    const isError = h('input', { type: 'checkbox', name: 'isError' });
    const submit = h('button', { type: 'submit', class: 'primary' }, 'Submit result');
    const deadline = w.deadlineMs ? ` (times out ${fmtTime(w.deadlineMs)})` : '';
    // The controls are kept beside the form, not on it: a form's named controls shadow its
    // properties.
    const wait = { callId: w.callId, content, isError, submit };
    wait.form = h('form', { class: 'client-wait', 'aria-label': `Result of ${w.toolName}`, dataset: { callId: w.callId },
      onsubmit: (e) => { e.preventDefault(); this.postResult(wait); } },
      h('div', {}, h('strong', {}, `Result of ${w.toolName}`), ` call ${w.callId}${deadline}`),
      field('Content', content), h('label', { class: 'check' }, isError, ' is an error'), submit);
    this.clientWaits.set(w.callId, wait);
    return wait;
  }

  postResult(wait) {
    return guard(async () => {
      wait.submit.disabled = true;
      try {
        await api('POST', `/v1/sessions/${this.id}/tool-results`,
          { callId: wait.callId, content: wait.content.value, isError: wait.isError.checked });
      } catch (e) {
        wait.submit.disabled = false;
        throw e;
      }
    });
  }

  // answered takes a wait of the park off the list (key a:<approval id> or c:<call id>); once
  // none is left, or a cancel came, the turn is queued for a replica to resume it.
  answered(key) {
    if (!this.park || !(key === null || this.park.open.delete(key))) return;
    if (key === null || !this.park.open.size) this.turnEl(this.park.turn).statusEl.replaceChildren(badge('queued'));
  }

  // clientResult replaces the call's form with the result that arrived (from this page or any
  // other client, or the call's deadline).
  clientResult(d) {
    const wait = this.clientWaits.get(d.callId);
    const shown = h('div', { class: 'client-result', dataset: { callId: d.callId } },
      badge(d.timedOut ? 'timed-out' : d.isError ? 'error' : 'ok'), ' client result', h('pre', { class: 'result' }, textOf(d.content)));
    this.answered(`c:${d.callId}`);
    if (wait && !wait.done) {
      wait.form.replaceWith(shown);
      wait.done = true;
      return;
    }
    const tool = this.tools.get(d.callId);
    if (tool) tool.insertBefore(shown, tool.result); else this.place(shown);
  }

  // closeWaits disables the forms of a park that is over (resumed or ended) without their result.
  closeWaits(why) {
    this.park = null;
    for (const [id, wait] of this.clientWaits) {
      if (!wait.done) {
        for (const el of wait.form.querySelectorAll('textarea, input, button')) el.disabled = true;
        wait.form.append(h('p', { class: 'hint' }, why));
        wait.done = true;
      }
      this.clientWaits.delete(id);
    }
  }

  // ----- the timeline

  matches(ev) {
    const from = this.seqFilter.value === '' ? -1 : Number(this.seqFilter.value);
    if (ev.seq < from) return false;
    const types = this.typeFilter.value.split(',').map((s) => s.trim()).filter(Boolean);
    return !types.length || types.some((t) => ev.type.startsWith(t));
  }

  timelineRow(ev) {
    if (![...this.typeList.options].some((o) => o.value === ev.type)) this.typeList.append(h('option', { value: ev.type }));
    if (this.matches(ev)) this.timelineBody.append(this.row(ev));
    this.countRows();
  }

  row(ev) {
    const data = JSON.stringify(ev.data);
    return h('tr', { dataset: { seq: ev.seq, type: ev.type } },
      h('td', { class: 'num' }, ev.seq),
      h('td', { class: 'num hide-narrow' }, fmtTime(ev.time)),
      h('td', { class: 'mono' }, ev.type),
      h('td', { class: 'data' }, h('details', {}, h('summary', { class: 'mono' }, data.length > 90 ? `${data.slice(0, 90)}…` : data),
        h('pre', {}, JSON.stringify(ev, null, 2)))),
      h('td', {}, this.forkAt.has(ev.seq)
        ? h('button', { type: 'button', class: 'fork', disabled: this.forkBtn.disabled, 'aria-label': `Fork after event ${ev.seq}`, onclick: () => this.fork(ev.seq) }, 'Fork')
        : ''));
  }

  renderTimeline() {
    this.timelineBody.replaceChildren(...this.events.filter((ev) => this.matches(ev)).map((ev) => this.row(ev)));
    this.countRows();
  }

  countRows() {
    this.timelineCount.textContent = `${this.timelineBody.children.length} of ${this.events.length} events`;
  }

  // ----- actions and reads

  refreshSoon() {
    clearTimeout(this.refreshTimer);
    this.refreshTimer = setTimeout(() => this.refresh(), 150);
  }

  async refresh() {
    if (this.closed) return;
    this.syncTurns();
    try {
      const s = await api('GET', `/v1/sessions/${this.id}`);
      if (this.closed) return;
      this.status.replaceChildren(badge(s.status), s.turn ? ` turn ${s.turn}` : '');
      this.cancelBtn.disabled = s.status === 'idle';
      this.setForkable(s.status === 'idle' && !this.turnOpen);
      // The run lease may outlive the turn/end briefly: look again until the session is idle.
      if (s.status !== 'idle' && !this.turnOpen) setTimeout(() => this.refreshSoon(), 500);
      const u = s.usage || {};
      this.usage.textContent = `${s.lastTurn || 0} turns · ${u.inputTokens || 0} in / ${u.outputTokens || 0} out tokens · ${u.modelCalls || 0} model calls · ${u.toolCalls || 0} tool calls · ${(u.toolErrors || 0) + (u.modelErrors || 0)} errors`;
      if (s.parentSession && !this.title.dataset.fork) {
        this.title.dataset.fork = '1';
        this.title.after(h('a', { class: 'parent', href: `#/sessions/${s.parentSession}` }, `fork of ${shortId(s.parentSession)}`));
      }
    } catch (e) {
      if (e.status === 404) showAlert('This session does not exist (any more).');
    }
  }

  // readTurns reads the turns after turn `after` (all of them by default) into knownTurns, the
  // ended ones; with untilShown it stops once every turn waiting in endedTurns is known.
  async readTurns(after = 0, untilShown = false) {
    let cursor = String(after);
    while (cursor && !this.closed) {
      const page = await api('GET', `/v1/sessions/${this.id}/turns?limit=500&cursor=${cursor}`);
      for (const t of page.items) if (t.endedAt) this.knownTurns.set(t.turn, t);
      cursor = page.nextCursor;
      if (untilShown && [...this.endedTurns].every((n) => this.knownTurns.has(n))) return;
    }
  }

  // syncTurns shows the status of the ended turns as the turn resource has it (GET .../turns: the
  // server folds the log by its one outcome rule; the dashboard does not fold turn/end itself).
  // A failed read leaves the turns waiting for the next refresh.
  async syncTurns() {
    if (this.closed || this.syncingTurns || !this.endedTurns.size) return;
    this.syncingTurns = true;
    const seen = this.endedCount;
    try {
      await this.readTurns(Math.min(...this.endedTurns) - 1, true);
      if (this.closed) return;
      for (const n of [...this.endedTurns]) {
        if (this.knownTurns.has(n)) { this.endedTurns.delete(n); this.showTurn(this.knownTurns.get(n)); }
      }
      if (this.endedCount !== seen) this.refreshSoon(); // turns that ended during the read
    } catch {
      // offline or refused: the next refresh reads again
    } finally {
      this.syncingTurns = false;
    }
  }

  showTurn(t) {
    const el = this.turnEl(t.turn);
    const r = t.endReason || {};
    el.statusEl.replaceChildren(badge(t.status), r.error ? ` ${r.error.code}: ${r.error.message}` : '',
      t.status === 'aborted' && r.reason?.kind ? ` (${r.reason.kind})` : '');
    el.classList.toggle('failed', t.failed);
    el.dataset.status = t.status;
  }

  cancel() {
    return guard(async () => {
      const r = await api('POST', `/v1/sessions/${this.id}/cancel`, {});
      if (!r.cancelled) showAlert('Nothing was running.');
      this.refreshSoon();
    });
  }

  // fillApprovalArgs writes the arguments of a pending approval, as GET .../approvals shows them,
  // into pre (nothing when the approval is no longer pending or the read fails).
  async fillApprovalArgs(approvalId, pre) {
    try {
      const r = await api('GET', `/v1/sessions/${this.id}/approvals`);
      const item = (r.items || []).find((x) => x.id === approvalId);
      if (item && item.arguments !== undefined && !pre.textContent) pre.textContent = pretty(item.arguments);
    } catch { /* the card still shows the ask and its answers */ }
  }

  answer(approvalId, outcome) {
    return guard(async () => {
      const card = this.approvals.get(approvalId);
      for (const b of card?.actions.querySelectorAll('button') || []) b.disabled = true;
      try {
        await api('POST', `/v1/sessions/${this.id}/approvals/${encodeURIComponent(approvalId)}`, { outcome });
      } catch (e) {
        for (const b of card?.actions.querySelectorAll('button') || []) b.disabled = false;
        throw e;
      }
    });
  }

  // setForkable enables the Fork buttons (the header's and the timeline's) only while no turn
  // holds the session: a fork then answers 409 whatever its boundary.
  setForkable(ok) {
    this.forkBtn.disabled = !ok;
    for (const b of this.timelineBody?.querySelectorAll('button.fork') || []) b.disabled = !ok;
  }

  fork(seq) {
    return guard(async () => {
      const fork = { sessionId: this.id };
      if (seq !== null) fork.boundarySeq = seq;
      const s = await api('POST', '/v1/sessions', { fork });
      go(`#/sessions/${s.id}`);
    });
  }

  loadTurns() {
    return guard(async () => {
      const rows = [];
      let cursor = '';
      do {
        const page = await api('GET', `/v1/sessions/${this.id}/turns?limit=500&cursor=${cursor}`);
        rows.push(...page.items);
        cursor = page.nextCursor;
      } while (cursor);
      this.turnsBody.replaceChildren(...rows.map((t) => h('tr', { dataset: { turn: t.turn } },
        h('td', { class: 'num' }, t.turn), h('td', {}, badge(t.status)),
        h('td', { class: 'num' }, `${t.firstSeq}–${t.lastSeq}`), h('td', { class: 'num' }, t.steps),
        h('td', { class: 'num' }, `${t.durationMs} ms`),
        h('td', { class: 'num' }, `${t.usage.inputTokens}/${t.usage.outputTokens}`),
        h('td', { class: 'num' }, `${t.usage.modelCalls}/${t.usage.toolCalls}`),
        h('td', { class: 'num' }, t.usage.toolErrors + t.usage.modelErrors))));
      if (!rows.length) this.turnsBody.append(h('tr', {}, h('td', { colspan: 8 }, 'No turns yet.')));
    });
  }

  loadHistory() {
    return guard(async () => {
      const { messages } = await api('GET', `/v1/sessions/${this.id}/history`);
      this.history.replaceChildren(h('p', { class: 'hint' }, `${messages.length} messages the model sees next.`),
        ...messages.map((m) => h('div', { class: `msg ${m.role === 'user' ? 'user' : 'assistant'} history-msg` },
          h('div', { class: 'note' }, m.role, m.source?.kind ? ` (${m.source.kind})` : ''),
          h('div', { class: 'text' }, textOf(m.content) || m.content.map((b) => b.type).join(', ')))));
    });
  }

  loadPrompt() {
    return guard(async () => {
      const pr = await api('GET', `/v1/sessions/${this.id}/prompt`);
      this.prompt.replaceChildren(h('h2', {}, 'System prompt'), h('pre', {}, pr.system || '(empty)'),
        h('h2', {}, `Tools (${pr.tools.length})`),
        ...pr.tools.map((t) => h('details', {}, h('summary', {}, t.name, ' — ', t.description), h('pre', {}, pretty(t.parameters)))));
    });
  }
}

// The event kinds of the log (docs/events.md). A frame's `event:` names its kind; EventSource
// dispatches named events only to listeners of that name.
const KNOWN_TYPES = ['agent/inbox/spliced', 'turn/start', 'turn/end', 'step/start', 'step/end', 'user/message',
  'request/header', 'request/context', 'assistant/chunk', 'assistant/message', 'tool/call', 'tool/result',
  'todo/write', 'session/end-seed', 'llm/retry', 'agent/cancel', 'turn/trace', 'assistant/usage', 'turn/parked',
  'turn/resumed', 'tool/client-result', 'approval/asked',
  'approval/decided', 'approval/policy', 'tool/code-dispatch-start', 'tool/code-dispatch', 'agent-preset/selected', 'command/run',
  'command/done', 'compact/start', 'compact/end', 'compact/prune', 'compact/summary', 'feedback/record',
  'goal/change', 'hook/invoked', 'hook/result', 'llm/retry-started', 'permission/preset', 'plan/mode',
  'sandbox/mode', 'schedule/change', 'session/title', 'session/title-llm-request', 'subagent/descriptor',
  'tool-workflow/run-start', 'tool-workflow/run-end', 'tool-workflow/agent-start', 'tool-workflow/agent-end',
  'web/deepseek-search-llm-request'];

// textOf joins the text of content blocks (tool results nest theirs).
function textOf(content) {
  if (typeof content === 'string') return content;
  return (content || []).map((b) => (b.type === 'text' ? b.text : b.type === 'tool-result' ? textOf(b.content) : '')).join('');
}

$('#signout').addEventListener('click', () => signOut());
window.addEventListener('hashchange', route);
route();
