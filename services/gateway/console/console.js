// The Engram web console: a client of the public REST API (/v1) only. Vanilla JS, no build step,
// nothing fetched from elsewhere. Every piece of data reaches the page as text (textContent, never
// innerHTML): a memory's content is shown, never run. The token (OAuth access token or a pasted API
// key) lives in this tab's sessionStorage and is sent only as an Authorization header.
(() => {
'use strict';

const TOKEN = 'engram.console.token', THEME = 'engram.console.theme';
const OAUTH = 'engram.console.oauth', CLIENT = 'engram.console.client';
const OAUTH_SCOPES = 'memory:read memory:write memory:maintenance keys:manage';
const LIST_LIMIT = 100;            // the REST list's and recall's most (MAX_RECALL_LIMIT)
const BULK_BATCH = 100;            // memories per POST /v1/memories/bulk when importing
const BULK_FORGET = 100;           // ids per POST /v1/memories/forget/bulk (MAX_BULK_FORGET)
const CATEGORIES = ['user_profile', 'preference', 'personality', 'goal', 'skill', 'relationship', 'emotional_pattern',
  'conversation_style'];
const SCOPES = ['memory:read', 'memory:write', 'memory:maintenance', 'keys:manage', 'memory:act-as', 'admin'];
const OWN_KEY_SCOPES = ['memory:read', 'memory:write', 'memory:maintenance'];  // what a key of one's own may hold
const MODES = ['auto', 'agent', 'handoff'];

const $ = (id) => document.getElementById(id);
const state = { token: sessionStorage.getItem(TOKEN), who: null, scopes: [], restricted: null, projects: [],
  routes: null, theme: localStorage.getItem(THEME) || (matchMedia('(prefers-color-scheme: dark)').matches ? 'dark' : 'light'),
  view: null, busy: 0, rendered: 0, selected: new Set(), rows: [], lastError: null };
window.engramConsole = state;      // inspection (tests): never holds more than the page shows

// ---- DOM helpers: every text goes in as text --------------------------------------------------
function h(tag, props, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (k in el && typeof v !== 'string') el[k] = v;
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined && c !== false) el.append(c instanceof Node ? c : String(c));
  return el;
}
function fill(el, ...kids) { el.replaceChildren(...kids.flat().filter((k) => k !== null && k !== undefined && k !== false)); return el; }
const when = (iso) => { if (!iso) return '—'; const d = new Date(iso); return isNaN(d) ? iso : d.toLocaleString(); };
const can = (scope) => state.scopes.includes(scope);
const idem = () => (crypto.randomUUID ? crypto.randomUUID() : `${Date.now()}-${Math.random().toString(16).slice(2)}`);
let idCounter = 0;
const uid = (p) => `${p}-${++idCounter}`;
function field(label, control, hint) {   // a labelled control
  if (!control.id) control.id = uid('f');
  return h('div', { class: 'field' }, h('label', { for: control.id }, label), control, hint ? h('small', {}, hint) : null);
}
function select(options, value, props) {
  const s = h('select', props || {});
  for (const o of options) { const [v, t] = Array.isArray(o) ? o : [o, o]; s.append(new Option(t, v)); }
  if (value !== undefined && value !== null) s.value = value;
  return s;
}
function notice(message, kind) {
  const n = $('notice');
  fill(n, );
  n.className = kind || '';
  if (message) n.append(h('span', {}, message), h('button', { type: 'button', class: 'link', 'aria-label': 'Dismiss', onclick: () => notice('') }, '×'));
}

// ---- the REST client --------------------------------------------------------------------------
class ApiError extends Error {
  constructor(status, message, extra) { super(message); Object.assign(this, { status }, extra || {}); }
}
async function api(method, path, { body, query, key } = {}) {
  const url = new URL(path, location.origin);
  for (const [k, v] of Object.entries(query || {})) if (v !== undefined && v !== null && v !== '') url.searchParams.set(k, v);
  const headers = { Accept: 'application/json' };
  if (state.token) headers.Authorization = `Bearer ${state.token}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (key) headers['Idempotency-Key'] = key;
  state.busy++;
  let response;
  try {
    response = await fetch(url, { method, headers, credentials: 'omit', cache: 'no-store',
      body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (err) {
    throw new ApiError(0, 'The Engram gateway does not answer (is it running?). Try again in a moment.', { code: 'down' });
  } finally {
    state.busy--;
  }
  if (response.status === 401) {
    const err = new ApiError(401, 'Your sign-in has expired or the key was revoked: sign in again.', { code: 'unauthenticated' });
    signOut(err.message);
    throw err;
  }
  const data = await response.json().catch(() => null);
  if (response.status === 429) {
    const wait = Number(response.headers.get('Retry-After')) || (data && data.error && data.error.retry_after) || null;
    throw new ApiError(429, `Too many requests: try again in ${wait ? Math.ceil(wait) + ' s' : 'a moment'}.`, { code: 'rate_limited', retryAfter: wait });
  }
  if (!response.ok) {
    const e = (data && data.error) || {};
    let message = e.message || (data && data.detail && JSON.stringify(data.detail)) || `HTTP ${response.status}`;
    if (e.field) message += ` (field: ${e.field})`;
    if (response.status === 403) message = `Not allowed: ${message}`;
    if (response.status >= 500) message = `The service failed: ${message}`;
    throw new ApiError(response.status, message, { code: e.code, field: e.field });
  }
  return data;
}
function failed(err, where) {              // an error shown where it happened (and the notice bar)
  state.lastError = err.message;
  if (err.status === 401) return;
  if (where) fill(where, h('p', { class: 'error', role: 'alert' }, err.message));
  else notice(err.message, 'error');
}

// ---- signing in -------------------------------------------------------------------------------
async function start() {
  try {
    const who = await api('GET', '/v1/whoami');
    state.who = who; state.scopes = who.scopes || []; state.restricted = who.project || null;
    $('who').textContent = `${who.user_name || who.user_id}${who.project ? ` · ${who.project}` : ''}`;
    $('who').title = `user ${who.user_id}; scopes ${state.scopes.join(', ')}`;
    $('signin').hidden = true; $('nav').hidden = false; $('signout').hidden = false; $('view').hidden = false;
    await Promise.all([loadProjects(), loadRoutes()]);
    if (!location.hash || location.hash === '#' || location.hash === '#/') location.replace('#/memories');
    else route();
  } catch (err) {
    if (err.status !== 401) signOut(err.message);
  }
}
async function loadProjects() {
  try { state.projects = (await api('GET', '/v1/projects')).projects || []; } catch (err) { state.projects = []; if (err.status === 401) throw err; }
}
async function loadRoutes() {   // which REST routes this gateway has (the console uses newer ones when present)
  try {
    const r = await fetch('/openapi.json', { credentials: 'omit' });
    state.routes = r.ok ? new Set(Object.keys((await r.json()).paths || {})) : new Set();
  } catch { state.routes = new Set(); }
}
function signOut(message) {
  sessionStorage.removeItem(TOKEN);
  Object.assign(state, { token: null, who: null, scopes: [], restricted: null, projects: [] });
  state.selected.clear();
  $('view').hidden = true; fill($('view'), ); $('nav').hidden = true; $('signout').hidden = true; $('who').textContent = '';
  $('signin').hidden = false;
  $('signin-error').textContent = message || '';
  notice('');
}
async function signIn() {
  const key = $('key').value.trim();
  if (!key) { $('signin-error').textContent = 'Paste an API key first.'; $('key').focus(); return; }
  state.token = key;
  $('signin-error').textContent = '';
  try {
    await api('GET', '/v1/whoami');
  } catch (err) {
    state.token = null;
    $('signin').hidden = false;
    $('signin-error').textContent = err.status === 401 ? 'This key was refused (revoked, expired or mistyped).' : err.message;
    return;
  }
  sessionStorage.setItem(TOKEN, key);
  $('key').value = '';
  start();
}

// OAuth: authorization code + PKCE, a public client registered once per browser (its id is no secret)
const b64url = (bytes) => btoa(String.fromCharCode(...bytes)).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
async function oauthSignIn() {
  $('signin-error').textContent = '';
  try {
    if (!window.crypto || !crypto.subtle) throw new Error('OAuth sign-in needs https (or localhost): use an API key here.');
    const meta = await (await fetch('/.well-known/oauth-authorization-server')).json();
    const resource = (await (await fetch('/.well-known/oauth-protected-resource')).json()).resource;
    const redirect = location.origin + '/console';
    let client = JSON.parse(localStorage.getItem(CLIENT) || 'null');
    if (!client || client.redirect !== redirect || client.issuer !== meta.issuer) {
      const r = await fetch(meta.registration_endpoint, { method: 'POST', headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ client_name: 'Engram console (web page)', redirect_uris: [redirect],
          grant_types: ['authorization_code', 'refresh_token'], response_types: ['code'],
          token_endpoint_auth_method: 'none', scope: OAUTH_SCOPES }) });
      if (!r.ok) throw new Error(`The sign-in server refused to register this page (${r.status}).`);
      client = { id: (await r.json()).client_id, redirect, issuer: meta.issuer };
      localStorage.setItem(CLIENT, JSON.stringify(client));
    }
    const verifier = b64url(crypto.getRandomValues(new Uint8Array(32)));
    const challenge = b64url(new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(verifier))));
    const st = b64url(crypto.getRandomValues(new Uint8Array(16)));
    sessionStorage.setItem(OAUTH, JSON.stringify({ verifier, state: st, client: client.id, redirect, resource,
      token: meta.token_endpoint, issuer: meta.issuer, back: location.hash }));
    location.assign(`${meta.authorization_endpoint}?${new URLSearchParams({ response_type: 'code', client_id: client.id,
      redirect_uri: redirect, code_challenge: challenge, code_challenge_method: 'S256', state: st, scope: OAUTH_SCOPES, resource })}`);
  } catch (err) {
    $('signin-error').textContent = err.message;
  }
}
async function oauthCallback() {
  const params = new URLSearchParams(location.search);
  if (!params.has('code') && !params.has('error')) return false;
  const pending = JSON.parse(sessionStorage.getItem(OAUTH) || 'null');
  history.replaceState(null, '', location.pathname + ((pending && pending.back) || ''));   // the code leaves the address bar at once
  sessionStorage.removeItem(OAUTH);
  const fail = (message) => { signOut(message); return true; };
  if (params.get('error')) return fail(`Sign-in refused: ${params.get('error_description') || params.get('error')}`);
  if (!pending || params.get('state') !== pending.state) return fail('This sign-in answer was not asked for by this tab.');
  if (params.get('iss') && params.get('iss') !== pending.issuer) return fail('The sign-in answer came from another server.');
  try {
    const r = await fetch(pending.token, { method: 'POST', headers: { 'Content-Type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ grant_type: 'authorization_code', code: params.get('code'), redirect_uri: pending.redirect,
        client_id: pending.client, code_verifier: pending.verifier, resource: pending.resource }) });
    const token = await r.json();
    if (!r.ok || !token.access_token) return fail(`Sign-in failed: ${token.error_description || token.error || r.status}`);
    state.token = token.access_token;
    sessionStorage.setItem(TOKEN, token.access_token);
    start();
  } catch (err) {
    fail(`Sign-in failed: ${err.message}`);
  }
  return true;
}

// ---- routing ----------------------------------------------------------------------------------
const VIEWS = { memories: viewMemories, memory: viewMemory, conflicts: viewConflicts, logs: viewLogs, log: viewLog, projects: viewProjects, users: viewUsers,
  keys: viewKeys, transfer: viewTransfer };
function parseHash() {
  const [path, query] = location.hash.replace(/^#\/?/, '').split('?');
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  return { name: parts[0] || 'memories', args: parts.slice(1), query: new URLSearchParams(query || '') };
}
async function route() {
  if (!state.token || !state.who) return;
  const { name, args, query } = parseHash();
  const view = VIEWS[name] || viewMemories;
  state.view = name;
  for (const a of document.querySelectorAll('#nav a[data-view]')) {
    const current = a.dataset.view === name || (a.dataset.view === 'memories' && name === 'memory') || (a.dataset.view === 'logs' && name === 'log');
    if (current) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  }
  const root = $('view');
  fill(root, h('p', { class: 'muted' }, 'Loading…'));
  notice('');
  try {
    await view(root, args, query);
  } catch (err) {
    failed(err, root);
  }
  const heading = root.querySelector('h1');
  if (heading) { heading.tabIndex = -1; if (document.activeElement === document.body || !root.contains(document.activeElement)) heading.focus({ preventScroll: true }); }
  state.rendered++;
}
// where a memory came from (its origin; a recall hit written before origins were kept: from its source)
const IMPORTED_SOURCES = ['mem0', 'supermemory', 'chat'];
const originOf = (m) => m.origin || (IMPORTED_SOURCES.includes(m.source) ? 'imported' : m.provenance ? 'extracted' : 'saved');
const memoryHref = (m) => `#/memory/${encodeURIComponent(m.project)}/${encodeURIComponent(m.id)}`;
const logHref = (id, turns) => `#/log/${encodeURIComponent(id)}${turns && turns.length ? `?turns=${turns.join(',')}` : ''}`;
function projectOptions(all) {
  const list = state.restricted ? [[state.restricted, state.restricted]] : [['', all || 'All projects'], ...state.projects.map((p) => [p.project, p.project])];
  return list;
}
function needs(scope, what) {
  return h('p', { class: 'empty' }, `${what} needs a credential with the ${scope} scope; this one has ${state.scopes.join(', ') || 'none'}.`);
}

// ---- memories ---------------------------------------------------------------------------------
async function viewMemories(root, _args, query) {
  const project = select(projectOptions(), query.get('project') || state.restricted || '');
  const category = select([['', 'Any category'], ...CATEGORIES], query.get('category') || '');
  const keyword = h('input', { type: 'search', value: query.get('keyword') || '', maxlength: 200, placeholder: 'word in the text' });
  const status = select([['current', 'Current'], ['superseded', 'Superseded'], ['forgotten', 'Forgotten'], ['all', 'All']],
    query.get('status') || 'current');
  status.id = 'status-filter';
  const q = h('input', { type: 'search', value: query.get('q') || '', maxlength: 1000, placeholder: 'what are you looking for?' });
  const mode = select([['hybrid', 'hybrid (words + meaning)'], ['dense', 'meaning'], ['keyword', 'words']], query.get('mode') || 'hybrid');
  const asOf = h('input', { type: 'date', value: query.get('as_of') || '', max: new Date().toISOString().slice(0, 10), id: 'as-of' });
  // the list is sorted by the REST API (newest, oldest or importance, paged by its cursor); a search's hits here
  const sort = select(query.get('q') ? [['updated-desc', 'Newest first'], ['updated-asc', 'Oldest first'], ['importance', 'Most important'],
    ['category', 'Category'], ['score', 'Best match']] : [['newest', 'Newest first'], ['oldest', 'Oldest first'], ['importance', 'Most important']],
  query.get('sort') || (query.get('q') ? 'score' : 'newest'));
  sort.id = 'sort';
  const from = h('input', { type: 'date', value: query.get('from') || '', id: 'created-from' });
  const to = h('input', { type: 'date', value: query.get('to') || '', id: 'created-to' });
  const source = select([['', 'Any source'], ['saved', 'Saved'], ['extracted', 'Extracted'], ['imported', 'Imported']], query.get('source') || '');
  source.id = 'source-filter';
  const go = (extra) => {
    const p = new URLSearchParams();
    if (project.value) p.set('project', project.value);
    if (category.value) p.set('category', category.value);
    if (keyword.value.trim()) p.set('keyword', keyword.value.trim());
    if (status.value !== 'current') p.set('status', status.value);
    if (from.value) p.set('from', from.value);
    if (to.value) p.set('to', to.value);
    if (source.value) p.set('source', source.value);
    if (query.get('limit')) p.set('limit', query.get('limit'));
    if (extra && extra.search && q.value.trim()) { p.set('q', q.value.trim()); p.set('mode', mode.value); if (asOf.value) p.set('as_of', asOf.value); }
    const searching = !!(extra && extra.search);
    // a new search sorts by match; a sort chosen for a search (or for the list) stays with it
    if (sort.value && !(sort.value === 'score' && !searching) && !(searching && !query.get('q'))) p.set('sort', sort.value);
    const hash = `#/memories?${p}`;
    if (location.hash === hash) route(); else location.hash = hash;
  };
  const filters = h('form', { class: 'filters list-filters', 'aria-label': 'Filter memories', onsubmit: (e) => { e.preventDefault(); go(); } },
    field('Project', project), field('Category', category), field('Keyword', keyword), field('Status', status),
    field('Created from', from), field('Created to', to), field('Source', source), field('Sort', sort),
    h('div', { class: 'actions' }, h('button', { type: 'submit', id: 'apply' }, 'Apply')));
  const search = h('form', { class: 'filters', role: 'search', 'aria-label': 'Search memories', onsubmit: (e) => { e.preventDefault(); go({ search: true }); } },
    field('Search', q), field('Search by', mode), field('As of (optional)', asOf, 'what Engram knew at the end of that day'),
    h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'primary' }, 'Search'),
      query.get('q') ? h('button', { type: 'button', onclick: () => { q.value = ''; asOf.value = ''; go(); } }, 'Clear search') : null));
  sort.addEventListener('change', () => go({ search: !!query.get('q') }));
  const list = h('div', { id: 'memory-list' }, h('p', { class: 'muted' }, 'Loading…'));
  fill(root, h('h1', {}, 'Memories'), search, filters,
    h('p', { class: 'muted small' }, 'The list shows current memories unless a status is chosen; dates are days in this browser\'s time zone. Source: saved here, extracted here from a daily log, or imported (from an Engram, mem0, Supermemory or chat export). A search as of a past day shows what was true then, superseded ones marked.'),
    list);
  let rows, scores = new Map(), next = null;
  state.replacedBy = new Map();     // a hit's id -> the newer memory that replaced it (its relation's excerpt)
  if (query.get('q')) {
    const body = { query: query.get('q'), project: query.get('project') || null, limit: LIST_LIMIT, mode: query.get('mode') || 'hybrid' };
    // a day means its end (all that was said that day), in the browser's time zone
    if (query.get('as_of')) { const end = new Date(`${query.get('as_of')}T23:59:59.999`); body.as_of = isNaN(end) ? query.get('as_of') : end.toISOString(); }
    const result = await api('POST', '/v1/recall', { body });
    rows = result.hits.map((hit) => {
      scores.set(hit.memory.id, hit.score);
      const newer = (hit.relations || []).find((r) => r.kind === 'superseded_by');
      if (newer) state.replacedBy.set(hit.memory.id, newer);
      return hit.memory;
    });
    if (query.get('category')) rows = rows.filter((m) => m.category === query.get('category'));
    const inRange = listQuery(query);
    rows = rows.filter((m) => (!inRange.created_from || new Date(m.created_at) >= new Date(inRange.created_from)) && (!inRange.created_to || new Date(m.created_at) <= new Date(inRange.created_to))
      && (!query.get('source') || originOf(m) === query.get('source')));
  } else {
    const page = await api('GET', '/v1/memories', { query: listQuery(query) });
    rows = page.memories;
    next = page.next_cursor || null;
  }
  const order = sort.value;
  const by = { 'updated-desc': (a, b) => b.updated_at.localeCompare(a.updated_at), 'updated-asc': (a, b) => a.updated_at.localeCompare(b.updated_at),
    importance: (a, b) => b.importance - a.importance || b.updated_at.localeCompare(a.updated_at),
    category: (a, b) => (a.category || '').localeCompare(b.category || '') || b.updated_at.localeCompare(a.updated_at),
    score: (a, b) => (scores.get(b.id) || 0) - (scores.get(a.id) || 0) };
  if (query.get('q')) rows.sort(by[order] || by['updated-desc']);
  state.rows = rows;
  state.selected.clear();
  renderMemoryList(list, rows, scores, query, next);
}
// GET /v1/memories' query from the console's address: a day is the browser's day (its start to its end)
function listQuery(query) {
  const day = (d, end) => { if (!d) return null; const t = new Date(`${d}T${end ? '23:59:59.999' : '00:00:00'}`); return isNaN(t) ? d : t.toISOString(); };
  const sort = query.get('sort');
  return { project: query.get('project'), category: query.get('category'), keyword: query.get('keyword'), status: query.get('status') || null,
    created_from: day(query.get('from'), false), created_to: day(query.get('to'), true), source: query.get('source') || null,
    sort: ['newest', 'oldest', 'importance'].includes(sort) ? sort : 'newest',
    limit: Math.min(LIST_LIMIT, Math.max(1, parseInt(query.get('limit'), 10) || LIST_LIMIT)) };
}
function renderMemoryList(list, rows, scores, query, next) {
  if (!rows.length) {
    fill(list, h('p', { class: 'empty' }, query.get('q') ? 'Nothing matches this search.' : 'No memories here yet.'));
    return;
  }
  const bulk = h('div', { class: 'bulk', role: 'region', 'aria-label': 'Selected memories' });
  const renderBulk = () => {
    const n = state.selected.size;
    fill(bulk, );
    if (!n) { bulk.append(h('span', { class: 'muted small' }, 'Select memories to forget or export several at once.')); return; }
    const reason = h('input', { type: 'text', maxlength: 1000, placeholder: 'why (optional)' });
    const chosen = () => rows.filter((m) => state.selected.has(m.id));
    bulk.append(h('strong', {}, `${n} selected`),
      can('memory:write') ? field('Reason to forget', reason) : null,
      can('memory:write') ? h('button', { type: 'button', class: 'danger', id: 'bulk-forget', onclick: async (e) => {
        const button = e.currentTarget;
        if (button.dataset.confirm !== '1') { button.dataset.confirm = '1'; button.textContent = `Really forget ${n}?`; return; }
        button.disabled = true;
        const progress = h('progress', { max: n, value: 0, 'aria-label': 'Forgetting' });
        bulk.append(progress);
        const errors = [];
        let forgotten = 0;
        let back = 0; // the memories the forgotten ones had replaced, current again
        const ids = chosen().map((m) => m.id);
        // POST /v1/memories/forget/bulk: 100 ids a request, one Idempotency-Key each (a retry forgets nothing twice)
        for (let i = 0; i < ids.length; i += BULK_FORGET) {
          try {
            const answer = await api('POST', '/v1/memories/forget/bulk', { body: { memory_ids: ids.slice(i, i + BULK_FORGET), reason: reason.value.trim() || null }, key: idem() });
            forgotten += answer.forgotten + answer.already_forgotten;
            for (const r of answer.results) {
              if (r.status === 'error') errors.push(r.error.message);
              back += (r.reinstated || []).length;
            }
          } catch (err) { errors.push(err.message); if (err.status === 401) return; }
          progress.value = Math.min(n, i + BULK_FORGET);
        }
        await route();
        const again = back ? ` ${back === 1 ? 'One memory' : `${back} memories`} they had replaced ${back === 1 ? 'is' : 'are'} current again.` : '';
        notice(errors.length ? `Forgot ${forgotten} of ${n}: ${errors[0]}${again}` : `Forgot ${n} memories.${again}`, errors.length ? 'error' : 'ok');
      } }, `Forget ${n}`) : null,
      canMove() ? moveControls('bulk-move', async (to, out) => {
        // POST /v1/memories/{id}/move, one by one (each with its own Idempotency-Key: a retry moves nothing twice)
        const picked = chosen();
        const progress = h('progress', { max: picked.length, value: 0, 'aria-label': 'Moving' });
        out.append(progress);
        const errors = [];
        for (const m of picked) {
          try { await api('POST', `/v1/memories/${encodeURIComponent(m.id)}/move`, { body: { project: m.project, to_project: to }, key: idem() }); }
          catch (err) { errors.push(err.message); if (err.status === 401) return; }
          progress.value += 1;
        }
        state.selected.clear();
        await route();
        notice(errors.length ? `Moved ${picked.length - errors.length} of ${picked.length}: ${errors[0]}` : `Moved ${picked.length} to ${to}.`, errors.length ? 'error' : 'ok');
      }) : null,
      h('button', { type: 'button', id: 'bulk-export', onclick: () => download(chosen().map((m) => JSON.stringify(m)).join('\n') + '\n',
        `engram-memories-${n}.jsonl`, 'application/x-ndjson') }, 'Export selected (JSONL)'),
      h('button', { type: 'button', class: 'link', onclick: () => { state.selected.clear(); renderRows(); renderBulk(); } }, 'Clear selection'));
  };
  const all = h('input', { type: 'checkbox', 'aria-label': 'Select all shown' });
  all.addEventListener('change', () => { for (const m of rows) if (all.checked) state.selected.add(m.id); else state.selected.delete(m.id); renderRows(); renderBulk(); });
  const body = h('tbody');
  const renderRows = () => {
    fill(body, ...rows.map((m) => {
      const box = h('input', { type: 'checkbox', 'aria-label': `Select: ${m.content.slice(0, 60)}`, checked: state.selected.has(m.id) });
      box.addEventListener('change', () => { if (box.checked) state.selected.add(m.id); else state.selected.delete(m.id); all.checked = state.selected.size === rows.length; renderBulk(); });
      const newer = state.replacedBy && state.replacedBy.get(m.id);
      const superseded = m.status === 'superseded' || !!m.superseded_by || !!newer;
      return h('tr', { dataset: { id: m.id, status: superseded ? 'superseded' : (m.status || 'active') }, class: superseded ? 'superseded' : null },
        h('td', { class: 'pick' }, box),
        h('td', { class: 'content' }, h('a', { href: memoryHref(m) }, m.content),
          superseded ? h('span', { class: 'badge superseded', title: m.superseded_by ? `replaced: ${m.superseded_by.reason}` : 'replaced by a newer memory' }, 'superseded') : null,
          newer ? h('span', { class: 'muted small replaced-note' }, ' → now: ', h('a', { href: memoryHref({ id: newer.memory_id, project: m.project }) }, newer.excerpt || 'the newer memory')) : null,
          m.pinned ? h('span', { class: 'badge pinned' }, 'pinned') : null,
          (m.repeats || 1) > 1 ? h('span', { class: 'badge repeats' }, `said ${m.repeats} times`) : null,
          originOf(m) === 'extracted' ? h('span', { class: 'badge', title: 'extracted from a daily log' }, 'from a log') : null),
        h('td', { 'data-label': 'Category' }, m.category || '—'),
        h('td', { 'data-label': 'Project' }, m.project),
        h('td', { 'data-label': 'Version', class: 'num' }, `v${m.version}`),
        h('td', { 'data-label': 'Importance', class: 'num' }, String(m.importance)),
        h('td', { 'data-label': 'Source', title: `written through: ${m.source}` }, originOf(m)),
        scores.size ? h('td', { 'data-label': 'Score', class: 'num' }, (scores.get(m.id) || 0).toFixed(3)) : null,
        h('td', { 'data-label': 'Created' }, when(m.created_at)),
        h('td', { 'data-label': 'Updated' }, when(m.updated_at)));
    }));
  };
  renderRows();
  renderBulk();
  const cap = query.get('q') && rows.length >= LIST_LIMIT ? ` (a search returns at most ${LIST_LIMIT}; narrow it)` : '';
  const count = h('p', { class: 'muted small', id: 'count' });
  const counted = () => { count.textContent = `${rows.length} memor${rows.length === 1 ? 'y' : 'ies'}${cap}${next ? ', more to load' : ''}`; };
  counted();
  const more = h('div', { class: 'actions' });
  const renderMore = () => fill(more, next ? h('button', { type: 'button', id: 'load-more', onclick: async (e) => {
    e.currentTarget.disabled = true;
    try {
      const page = await api('GET', '/v1/memories', { query: { ...listQuery(query), cursor: next } });
      rows.push(...page.memories.filter((m) => !rows.some((r) => r.id === m.id)));
      next = page.next_cursor || null;
    } catch (err) { notice(err.message, 'error'); }
    state.rows = rows;
    renderRows(); renderBulk(); renderMore(); counted();
  } }, 'Load more') : null);
  renderMore();
  fill(list, count, bulk,
    h('div', { class: 'table-wrap' }, h('table', { class: 'rows memories' },
      h('caption', { class: 'sr-only' }, 'Memories'),
      h('thead', {}, h('tr', {}, h('th', { scope: 'col', class: 'pick' }, all), h('th', { scope: 'col' }, 'Memory'), h('th', { scope: 'col' }, 'Category'),
        h('th', { scope: 'col' }, 'Project'), h('th', { scope: 'col' }, 'Version'), h('th', { scope: 'col' }, 'Importance'), h('th', { scope: 'col' }, 'Source'),
        scores.size ? h('th', { scope: 'col' }, 'Score') : null, h('th', { scope: 'col' }, 'Created'), h('th', { scope: 'col' }, 'Updated'))),
      body)), more);
}
function download(text, name, type) {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const a = h('a', { href: url, download: name, hidden: true });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}

// a word-level diff (longest common subsequence): [['=', text] | ['-', text] | ['+', text]]
function diffWords(a, b) {
  const x = a.split(/(\s+)/), y = b.split(/(\s+)/);
  const n = x.length, m = y.length;
  const table = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
  for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--) table[i][j] = x[i] === y[j] ? table[i + 1][j + 1] + 1 : Math.max(table[i + 1][j], table[i][j + 1]);
  const out = [];
  const push = (op, t) => { if (out.length && out[out.length - 1][0] === op) out[out.length - 1][1] += t; else out.push([op, t]); };
  let i = 0, j = 0;
  while (i < n && j < m) {
    if (x[i] === y[j]) { push('=', x[i]); i++; j++; } else if (table[i + 1][j] >= table[i][j + 1]) push('-', x[i++]); else push('+', y[j++]);
  }
  while (i < n) push('-', x[i++]);
  while (j < m) push('+', y[j++]);
  return out;
}
function renderDiff(a, b) {
  return h('p', { class: 'diff' }, ...diffWords(a, b).map(([op, t]) => op === '=' ? t : h(op === '+' ? 'ins' : 'del', {}, t)));
}

async function viewMemory(root, args) {
  const [projectArg, id] = args.length > 1 ? args : [null, args[0]];
  if (!id) { location.hash = '#/memories'; return; }
  let current = null;
  if (state.routes && state.routes.has('/v1/memories/{memory_id}')) {        // GetMemory, when this gateway has it
    try {
      const found = await api('GET', `/v1/memories/${encodeURIComponent(id)}`);
      current = found.memory || (found.id ? found : null);
    } catch (err) { if (err.status !== 404) throw err; }     // a forgotten one: its history still tells
  }
  const historyData = await api('GET', `/v1/memories/${encodeURIComponent(id)}/history`);
  const versions = historyData.versions || [];
  if (!versions.length) { fill(root, h('h1', {}, 'Memory'), h('p', { class: 'empty' }, 'No such memory (or not yours).')); return; }
  const last = versions[versions.length - 1];
  const project = (current && current.project) || projectArg || 'default';
  const forgotten = last.status === 'forgotten';
  const superseded = !forgotten && current && current.status === 'superseded';
  const related = new Map();       // the texts of the memories that replaced this one or that it replaced
  if (current) {
    const ids = [...(current.superseded_by ? [current.superseded_by.memory_id] : []), ...(current.supersedes || []).map((s) => s.memory_id)].slice(0, 20);
    await Promise.all(ids.map(async (other) => {
      try { const f = await api('GET', `/v1/memories/${encodeURIComponent(other)}`); const m = f.memory || (f.id ? f : null); if (m) related.set(other, m); }
      catch (err) { if (err.status === 401) throw err; }
    }));
  }
  const head = h('div', { class: 'memory-head' },
    h('p', { class: 'memory-text', id: 'memory-content' }, last.content),
    current ? truthBadges(current) : null,
    current ? replacedBy(current, related) : null,
    last.context ? h('p', { class: 'muted' }, `Context: ${last.context}`) : null,
    h('dl', { class: 'facts' },
      ...[['Status', forgotten ? `forgotten${last.forget_reason ? ` — ${last.forget_reason}` : ''}` : superseded ? 'superseded (replaced by a newer memory)' : 'current'], ['Version', `v${last.version}`],
        ['Project', project], ['Category', last.category || '—'], ['Key', last.memory_key || '—'], ['Importance', String(last.importance)],
        ['Confidence', String(last.confidence)], ['Source', last.source || (current && current.source) || '—'],
        ['Last change', when(last.occurred_at)], ['Valid until', (current && current.valid_until) || last.valid_until ? when((current && current.valid_until) || last.valid_until) : '—']]
        .flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v)])));
  const prov = [...versions].reverse().find((v) => v.provenance);
  const provenance = prov ? h('section', { class: 'card', 'aria-labelledby': 'prov-title' }, h('h2', { id: 'prov-title' }, 'Where it came from'),
    h('p', {}, 'Extracted from ', h('a', { href: logHref(prov.provenance.log_id, prov.provenance.turns), id: 'provenance-link' },
      `the daily log${prov.provenance.log_date ? ` of ${prov.provenance.log_date}` : ''}`),
    prov.provenance.turns && prov.provenance.turns.length ? `, turn${prov.provenance.turns.length > 1 ? 's' : ''} ${prov.provenance.turns.map((t) => t + 1).join(', ')}` : '',
    ` (extraction run ${prov.provenance.task_id}).`)) : null;
  // every time the fact was said (a merged memory's sayings), each with the log and turns it came from
  const sayings = historyData.sayings || [];
  const said = sayings.length > 1 ? h('section', { class: 'card', 'aria-labelledby': 'said-title' },
    h('h2', { id: 'said-title' }, `Said ${sayings.length} times`),
    h('ol', { class: 'sayings', id: 'sayings' }, ...sayings.map((x) => h('li', {},
      h('span', { class: 'muted small' }, `${when(x.said_at)} · ${x.source}`), ' ',
      x.provenance ? h('a', { href: logHref(x.provenance.log_id, x.provenance.turns), class: 'saying-log' },
        `daily log${x.provenance.log_date ? ` of ${x.provenance.log_date}` : ''}`) : null,
      x.content ? h('q', { class: 'saying-words' }, x.content) : null)))) : null;

  // versions, newest first, and a diff between any two
  // a merge (the same fact said again) can be undone: that saying becomes a memory of its own again
  const canUnmerge = !forgotten && can('memory:write') && state.routes && state.routes.has('/v1/memories/{memory_id}/unmerge');
  const unmerge = async (button, version) => {
    button.disabled = true;
    try {
      const result = await api('POST', `/v1/memories/${encodeURIComponent(id)}/unmerge`, { body: { project, version }, key: idem() });
      await route();
      notice(result.message, result.unmerged ? 'ok' : null);
    } catch (err) { failed(err, button.parentElement); button.disabled = false; }
  };
  const list = h('ol', { class: 'versions', id: 'versions', reversed: true },
    ...[...versions].reverse().map((v) => h('li', { class: 'version', dataset: { version: String(v.version) } },
      h('div', { class: 'muted small' }, `v${v.version} · ${v.event} · ${when(v.occurred_at)}${v.client ? ` · by ${v.client}` : ''}${v.status === 'forgotten' ? ' · forgotten' : ''}`),
      h('p', {}, v.content, v.content_chars ? h('span', { class: 'muted small' }, ` … [${(v.content_chars - v.content.length).toLocaleString()} more characters: the export holds every version whole]`) : null), v.forget_reason ? h('p', { class: 'muted small' }, `Reason: ${v.forget_reason}`) : null,
      canUnmerge && v.event === 'MemoryMerged' ? h('button', { type: 'button', class: 'unmerge', 'aria-label': `Undo the merge of version ${v.version}: it was not the same fact`,
        onclick: (e) => unmerge(e.currentTarget, v.version) }, 'Not the same fact: undo this merge') : null)));
  const numbers = [...new Set(versions.map((v) => v.version))];
  const contentOf = (n) => [...versions].reverse().find((v) => v.version === n).content;
  const from = select(numbers.map((n) => [String(n), `v${n}`]), String(numbers[Math.max(0, numbers.length - 2)]));
  const to = select(numbers.map((n) => [String(n), `v${n}`]), String(numbers[numbers.length - 1]));
  const diffOut = h('div', { id: 'diff', 'aria-live': 'polite' });
  const showDiff = () => fill(diffOut, renderDiff(contentOf(Number(from.value)), contentOf(Number(to.value))));
  from.addEventListener('change', showDiff); to.addEventListener('change', showDiff);
  showDiff();

  const sections = [h('p', {}, h('a', { href: '#/memories' }, '← Memories')), h('h1', {}, forgotten ? 'Memory (forgotten)' : superseded ? 'Memory (superseded)' : 'Memory'), head];
  if (current && current.supersedes && current.supersedes.length) sections.push(replacedList(current, related));
  if (current && !forgotten && !superseded && can('memory:write') && state.routes && state.routes.has('/v1/memories/{memory_id}/pin')) sections.push(pinForm(current));
  if (provenance) sections.push(provenance);
  if (said) sections.push(said);
  sections.push(h('section', { class: 'card', 'aria-labelledby': 'ver-title' }, h('h2', { id: 'ver-title' }, `Versions (${numbers.length})`),
    numbers.length > 1 ? h('div', { class: 'filters' }, field('Compare', from), field('with', to)) : null, numbers.length > 1 ? diffOut : null, list));
  if (current && !forgotten && !superseded && canMove()) {
    sections.push(h('section', { class: 'card', 'aria-labelledby': 'move-title' }, h('h2', { id: 'move-title' }, 'Move to another project'),
      h('p', { class: 'muted small' }, 'It becomes a memory of that project (its words, sayings and pin go with it); this one is forgotten, naming it.'),
      moveControls('move-memory', async (to) => {
        const result = await api('POST', `/v1/memories/${encodeURIComponent(id)}/move`, { body: { project, to_project: to }, key: idem() });
        location.hash = `#/memory/${encodeURIComponent(result.project)}/${encodeURIComponent(result.memory_id)}`;
        notice(result.message, 'ok');
      })));
  }
  if (!forgotten && can('memory:write')) sections.push(editForm(id, project, last), forgetForm(id, project));
  else if (!forgotten) sections.push(needs('memory:write', 'Editing or forgetting'));
  sections.push(h('p', { class: 'muted small' }, 'Relations other than supersession are not offered by the REST API yet.'));
  fill(root, ...sections);
}
// what the truth rules say about a memory: superseded, said N times, pinned, expires on …
function truthBadges(m) {
  const badges = [];
  if (m.status === 'superseded') badges.push(h('span', { class: 'badge superseded' }, 'superseded'));
  if (m.status === 'forgotten') badges.push(h('span', { class: 'badge forgotten' }, 'forgotten'));
  if ((m.repeats || 1) > 1) badges.push(h('span', { class: 'badge repeats', title: 'the same fact, said again, merged into this memory' }, `said ${m.repeats} times`));
  if (m.pinned) badges.push(h('span', { class: 'badge pinned', title: 'never fades in recall' }, 'pinned'));
  if (m.forget_after) badges.push(h('span', { class: 'badge expires', title: 'leaves recall then; stays in its history' },
    `${new Date(m.forget_after) <= new Date() ? 'expired' : 'expires'} on ${when(m.forget_after)}`));
  return badges.length ? h('div', { class: 'badges', id: 'truth-badges' }, ...badges) : null;
}
const decider = (s) => ({ rules: 'Engram\'s rules', person: 'a person', agent: 'an agent' }[s.decided_by] || s.decided_by || 'Engram');
function replacedBy(m, related) {
  const s = m.superseded_by;
  if (!s) return null;
  const newer = related.get(s.memory_id);
  return h('p', { class: 'replaced', id: 'replaced-by' }, 'Replaced by ',
    h('a', { href: memoryHref({ id: s.memory_id, project: (newer && newer.project) || m.project }), id: 'replaced-by-link' }, newer ? `“${newer.content}”` : 'a newer memory'),
    m.valid_until ? ` on ${when(m.valid_until)}` : '', ` — ${s.reason}`, h('span', { class: 'muted small' }, ` (${decider(s)}, confidence ${pct(s.confidence)})`));
}
function replacedList(m, related) {
  const gone = m.status === 'forgotten';   // forgotten: what it replaced is current again (unless replaced since)
  const again = (s) => gone && related.get(s.memory_id) && related.get(s.memory_id).status === 'active';
  return h('section', { class: 'card', 'aria-labelledby': 'replaced-title' }, h('h2', { id: 'replaced-title' }, `It ${gone ? 'had replaced' : 'replaced'} ${m.supersedes.length} older memor${m.supersedes.length === 1 ? 'y' : 'ies'}`),
    h('ul', { class: 'links', id: 'supersedes' }, ...m.supersedes.map((s) => h('li', { dataset: { id: s.memory_id } },
      h('a', { href: memoryHref({ id: s.memory_id, project: m.project }) }, related.get(s.memory_id) ? `“${related.get(s.memory_id).content}”` : 'an older memory'), ` — ${s.reason}`, h('span', { class: 'muted small' }, ` (${decider(s)}, confidence ${pct(s.confidence)})`),
      again(s) ? h('span', { class: 'badge', title: 'this memory was forgotten, so the one it had replaced stands again' }, 'current again') : null))));
}
const localInput = (iso) => {   // an ISO moment as a datetime-local value (the browser's time zone)
  const d = new Date(iso);
  if (isNaN(d)) return '';
  const p = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}`;
};
function pinForm(m) {
  const out = h('div', { role: 'status', id: 'pin-out' });
  const expiry = h('input', { type: 'datetime-local', value: m.forget_after ? localInput(m.forget_after) : '' });
  const send = async (button, body, done) => {
    button.disabled = true;
    try {
      await api('POST', `/v1/memories/${encodeURIComponent(m.id)}/pin`, { body: { ...body, project: m.project }, key: idem() });
      await route();
      notice(done, 'ok');
    } catch (err) { failed(err, out); button.disabled = false; }
  };
  const pin = h('button', { type: 'button', id: 'pin-toggle', class: m.pinned ? null : 'primary', 'aria-pressed': m.pinned ? 'true' : 'false',
    onclick: (e) => send(e.currentTarget, { pinned: !m.pinned }, m.pinned ? 'Unpinned: it fades like other memories.' : 'Pinned: it never fades in recall.') },
  m.pinned ? 'Unpin' : 'Pin');
  const setExpiry = h('button', { type: 'button', id: 'expiry-set', onclick: (e) => {
    if (!expiry.value) { fill(out, h('p', { class: 'error' }, 'Choose a date and time first.')); expiry.focus(); return; }
    const at = new Date(expiry.value);
    if (isNaN(at)) { fill(out, h('p', { class: 'error' }, 'That is not a date and time.')); return; }
    send(e.currentTarget, { forget_after: at.toISOString() }, `It leaves recall on ${when(at.toISOString())}.`);
  } }, 'Set expiry');
  const clear = m.forget_after ? h('button', { type: 'button', id: 'expiry-clear', onclick: (e) => send(e.currentTarget, { clear_forget_after: true }, 'Expiry removed.') }, 'Clear expiry') : null;
  return h('section', { class: 'card', id: 'pin', 'aria-labelledby': 'pin-title' }, h('h2', { id: 'pin-title' }, 'Keep or let go'),
    h('p', { class: 'muted small' }, 'A pinned memory never fades in recall. One with an expiry leaves recall then (a parking spot for this week) and stays in its history.'),
    h('div', { class: 'actions' }, pin),
    h('div', { class: 'filters' }, field('Leaves recall on (optional)', expiry), h('div', { class: 'actions' }, setExpiry, clear)), out);
}
function editForm(id, project, last) {
  const content = h('textarea', { rows: 3, maxlength: 4000, required: true }, last.content);
  const context = h('input', { type: 'text', maxlength: 2000, value: last.context || '' });
  const category = select([['', '—'], ...CATEGORIES], last.category || '');
  const importance = h('input', { type: 'number', min: 1, max: 5, step: 1, value: String(last.importance) });
  const out = h('div', { role: 'status' });
  const form = h('form', { class: 'card', id: 'edit', 'aria-labelledby': 'edit-title', onsubmit: async (e) => {
    e.preventDefault();
    const body = { id, project };
    if (content.value.trim() !== last.content) body.content = content.value.trim();
    if (context.value.trim() && context.value.trim() !== (last.context || '')) body.context = context.value.trim();
    if (category.value && category.value !== (last.category || '')) body.category = category.value;
    if (Number(importance.value) !== last.importance) body.importance = Number(importance.value);
    if (Object.keys(body).length === 2) { fill(out, h('p', { class: 'muted' }, 'Nothing changed.')); return; }
    if (body.content === '') { fill(out, h('p', { class: 'error' }, 'The content may not be empty.')); return; }
    form.querySelector('button[type=submit]').disabled = true;
    try {
      const saved = await api('POST', '/v1/memories/update', { body, key: idem() });
      await route();
      // an edit that no longer says what changed the memories it had replaced brings them back
      const back = (saved.reinstated || []).length;
      notice(`Saved version ${saved.version}.${back ? ` The ${back === 1 ? 'memory' : `${back} memories`} it had replaced ${back === 1 ? 'is' : 'are'} current again: the new words no longer change ${back === 1 ? 'it' : 'them'}.` : ''}`, 'ok');
    } catch (err) { failed(err, out); form.querySelector('button[type=submit]').disabled = false; }
  } }, h('h2', { id: 'edit-title' }, 'Edit (writes a new version)'), field('Content', content), field('Context', context, 'a note on when it holds'),
    h('div', { class: 'row' }, field('Category', category), field('Importance (1-5)', importance)),
    h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'primary' }, 'Save new version')), out);
  return form;
}
function forgetForm(id, project) {
  const reason = h('input', { type: 'text', maxlength: 1000, placeholder: 'e.g. no longer true' });
  const out = h('div', { role: 'status' });
  const button = h('button', { type: 'submit', class: 'danger' }, 'Forget this memory');
  const form = h('form', { class: 'card', id: 'forget', 'aria-labelledby': 'forget-title', onsubmit: async (e) => {
    e.preventDefault();
    if (button.dataset.confirm !== '1') { button.dataset.confirm = '1'; button.textContent = 'Really forget it?'; return; }
    button.disabled = true;
    try {
      const result = await api('POST', '/v1/memories/forget', { body: { memory_id: id, project, reason: reason.value.trim() || null }, key: idem() });
      await route();
      const back = (result.reinstated || []).length;
      notice(result.forgotten ? `Forgotten. Its versions stay in its history.${back ? ` The ${back === 1 ? 'memory' : `${back} memories`} it had replaced ${back === 1 ? 'is' : 'are'} current again.` : ''}` : (result.message || 'Nothing was forgotten.'), result.forgotten ? 'ok' : 'error');
    } catch (err) { failed(err, out); button.disabled = false; }
  } }, h('h2', { id: 'forget-title' }, 'Forget'), h('p', { class: 'muted small' }, 'Recall stops returning it; its history keeps every version.'),
    field('Reason', reason), h('div', { class: 'actions' }, button), out);
  return form;
}

// ---- moving memories to another project (POST /v1/memories/{id}/move) --------------------------
const canMove = () => can('memory:write') && !state.restricted && state.routes && state.routes.has('/v1/memories/{memory_id}/move');
function moveControls(id, run) {
  const to = h('input', { type: 'text', pattern: '[A-Za-z0-9_.:\\-]{1,128}', required: true, placeholder: 'project', list: `${id}-projects`, id: `${id}-to` });
  const out = h('span', { role: 'status' });
  const form = h('form', { class: 'move', id, 'aria-label': 'Move to project', onsubmit: async (e) => {
    e.preventDefault();
    const target = to.value.trim();
    if (!target) return;
    const button = form.querySelector('button');
    button.disabled = true;
    try { await run(target, out); } catch (err) { failed(err, out); } finally { button.disabled = false; }
  } }, field('Move to project', to), h('datalist', { id: `${id}-projects` }, ...state.projects.map((p) => new Option(p.project, p.project))),
    h('button', { type: 'submit' }, 'Move'), out);
  return form;
}

// ---- conflicts: pairs the truth rules flagged for a person to settle ---------------------------
const pct = (x) => `${Math.round((Number(x) || 0) * 100)}%`;
async function viewConflicts(root, _args, query) {
  const project = select(projectOptions(), query.get('project') || state.restricted || '');
  project.addEventListener('change', () => { location.hash = `#/conflicts${project.value ? `?project=${encodeURIComponent(project.value)}` : ''}`; });
  const out = h('div', { id: 'conflict-out', role: 'status', 'aria-live': 'polite' });
  const intro = h('p', { class: 'muted small' }, 'When a new memory may contradict an older one and Engram\'s rules cannot tell which holds ' +
    '(a second dog\'s name, a "now" without what changed, another language), the pair waits here. Say which is true: the other leaves ' +
    'recall and stays in its history, marked as replaced.');
  const conflicts = (await api('GET', '/v1/memories/conflicts', { query: { project: query.get('project'), limit: LIST_LIMIT } })).conflicts || [];
  const head = [h('h1', {}, 'Conflicts'), intro, h('form', { class: 'filters', 'aria-label': 'Filter conflicts', onsubmit: (e) => e.preventDefault() }, field('Project', project)), out];
  if (!conflicts.length) { fill(root, ...head, h('p', { class: 'empty', id: 'no-conflicts' }, 'No conflict waiting: nothing Engram was told contradicts itself as far as it can tell.')); return; }
  const side = (m, label) => h('div', { class: 'side' },
    h('p', { class: 'muted small' }, label),
    h('p', { class: 'side-text' }, h('a', { href: memoryHref(m) }, m.content)),
    h('p', { class: 'muted small' }, `${m.category || 'no category'} · ${m.project} · said ${when(m.valid_from || m.created_at)}`));
  const pairs = conflicts.map((c, i) => {
    const titleId = uid('conflict');
    const settle = async (e, keep) => {
      const buttons = [...e.currentTarget.closest('.conflict').querySelectorAll('button')];
      buttons.forEach((b) => { b.disabled = true; });
      try {
        const result = await api('POST', '/v1/memories/conflicts/settle', { key: idem(),
          body: { memory_id: c.memory.id, other_id: c.other.id, keep, project: c.memory.project, reason: reason.value.trim() || null } });
        const kept = keep === 'both' ? 'Both stand.' : `Kept “${(keep === 'memory' ? c.memory : c.other).content}”; the other is replaced.`;
        await route();
        fill($('conflict-out'), h('p', { class: result.settled ? 'ok-text' : 'error-text' }, result.settled ? `Settled. ${kept} ${result.message || ''}` : (result.message || 'Nothing was settled.')));
      } catch (err) { failed(err, $('conflict-out')); buttons.forEach((b) => { b.disabled = false; }); }
    };
    const reason = h('input', { type: 'text', maxlength: 1000, placeholder: 'why (optional), kept with the decision' });
    const writes = can('memory:write');
    return h('li', { class: 'conflict card', dataset: { memory: c.memory.id, other: c.other.id }, 'aria-labelledby': titleId },
      h('h2', { id: titleId, class: 'small-title' }, `Conflict ${i + 1}: ${c.reason}`, h('span', { class: 'badge', title: 'how sure the rules are that these clash' }, `confidence ${pct(c.confidence)}`)),
      h('div', { class: 'pair' }, side(c.memory, 'This one (said later)'), side(c.other, 'The other (said before)')),
      writes ? field('Reason (optional)', reason) : needs('memory:write', 'Settling a conflict'),
      writes ? h('div', { class: 'actions' },
        h('button', { type: 'button', class: 'keep-both', 'aria-label': `Both are true: “${c.memory.content}” and “${c.other.content}”`, onclick: (e) => settle(e, 'both') }, 'Both are true'),
        h('button', { type: 'button', class: 'primary keep-memory', 'aria-label': `Keep this one: “${c.memory.content}”`, onclick: (e) => settle(e, 'memory') }, 'Keep this one'),
        h('button', { type: 'button', class: 'primary keep-other', 'aria-label': `Keep the other: “${c.other.content}”`, onclick: (e) => settle(e, 'other') }, 'Keep the other')) : null);
  });
  fill(root, ...head, h('p', { class: 'muted small', id: 'conflict-count' }, `${conflicts.length} pair${conflicts.length === 1 ? '' : 's'} to settle, the surest first.`),
    h('ol', { class: 'conflicts', id: 'conflict-list' }, ...pairs));
}

// ---- logs and extraction ----------------------------------------------------------------------
async function viewLogs(root, _args, query) {
  const sections = [h('h1', {}, 'Logs and extraction')];
  const open = h('input', { type: 'text', placeholder: 'a daily log id', pattern: '[0-9a-fA-F-]{36}', spellcheck: 'false' });
  sections.push(h('form', { class: 'filters', 'aria-label': 'Open a log', onsubmit: (e) => { e.preventDefault(); if (open.value.trim()) location.hash = logHref(open.value.trim()); } },
    field('Open a log by id', open), h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Open'))));
  const logsBox = h('section', { class: 'card', 'aria-labelledby': 'queue-title' });
  const modesBox = h('section', { class: 'card', 'aria-labelledby': 'modes-title' });
  sections.push(logsBox, modesBox);
  fill(root, ...sections);
  await Promise.all([renderQueue(logsBox, query), renderModes(modesBox)]);
}
async function renderQueue(box, query) {
  const title = h('h2', { id: 'queue-title' }, 'Daily logs');
  if (!can('memory:maintenance')) { fill(box, title, needs('memory:maintenance', 'Seeing the daily logs')); return; }
  const options = projectOptions();        // a project with logs but no memory yet is kept when named
  if (query.get('project') && !options.some(([v]) => v === query.get('project'))) options.push([query.get('project'), query.get('project')]);
  const project = select(options, query.get('project') || state.restricted || '');
  const status = select([['', 'Any status'], ['pending', 'Pending'], ['processing', 'Processing'], ['processed', 'Processed'], ['failed', 'Failed']], query.get('status') || '');
  status.id = 'log-status';
  const from = h('input', { type: 'date', value: query.get('from') || '', id: 'log-from' });
  const to = h('input', { type: 'date', value: query.get('to') || '', id: 'log-to' });
  const go = () => {
    const p = new URLSearchParams();
    for (const [k, el] of [['project', project], ['status', status], ['from', from], ['to', to]]) if (el.value) p.set(k, el.value);
    const hash = `#/logs${p.toString() ? `?${p}` : ''}`;
    if (location.hash === hash) route(); else location.hash = hash;
  };
  const filters = h('form', { class: 'filters list-filters', 'aria-label': 'Filter logs', onsubmit: (e) => { e.preventDefault(); go(); } },
    field('Project', project), field('Status', status), field('Day from', from), field('Day to', to),
    h('div', { class: 'actions' }, h('button', { type: 'submit', id: 'log-apply' }, 'Apply')));
  const logQuery = { limit: LIST_LIMIT, project: query.get('project'), status: query.get('status'),
    date_from: query.get('from'), date_to: query.get('to') };
  const first = await api('GET', '/v1/daily-logs', { query: logQuery });
  const logs = first.logs;
  let next = first.next_cursor || null;
  if (!logs.length) { fill(box, title, filters, h('p', { class: 'empty' }, 'No log matches.')); return; }
  const note = h('p', { class: 'muted small', id: 'log-count' });
  const counted = () => { note.textContent = `${logs.length} log${logs.length === 1 ? '' : 's'}, newest day first${next ? ', more to load' : ''}. A failed log has used its tries: re-queue it for a fresh start.`; };
  const row = (l) => h('tr', { dataset: { id: l.id, status: l.processing_status } },
    h('td', {}, h('a', { href: logHref(l.id) }, l.log_date)), h('td', { 'data-label': 'Project' }, l.project),
    h('td', { 'data-label': 'Status' }, h('span', { class: `status ${l.processing_status}` }, l.processing_status)),
    h('td', { 'data-label': 'Tries', class: 'num' }, String(l.retry_count)), h('td', { 'data-label': 'Error', class: 'error-text' }, l.error_reason || '—'),
    h('td', { 'data-label': 'Updated' }, when(l.updated_at)),
    h('td', {}, l.processing_status === 'failed' ? requeueButton(l) : null));
  const body = h('tbody', {}, ...logs.map(row));
  const more = h('div', { class: 'actions' });
  const renderMore = () => fill(more, next ? h('button', { type: 'button', id: 'logs-more', onclick: async (e) => {
    e.currentTarget.disabled = true;
    try {
      const page = await api('GET', '/v1/daily-logs', { query: { ...logQuery, cursor: next } });
      const fresh = page.logs.filter((l) => !logs.some((o) => o.id === l.id));
      logs.push(...fresh);
      body.append(...fresh.map(row));
      next = page.next_cursor || null;
    } catch (err) { failed(err); }
    renderMore(); counted();
  } }, 'Load more') : null);
  counted(); renderMore();
  fill(box, title, filters, note, h('div', { class: 'table-wrap' }, h('table', { class: 'rows logs', id: 'log-list' },
    h('thead', {}, h('tr', {}, ...['Day', 'Project', 'Status', 'Tries', 'Error', 'Updated', ''].map((t) => h('th', { scope: 'col' }, t)))),
    body)), more);
}
function requeueButton(log) {
  return h('button', { type: 'button', class: 'requeue', 'aria-label': `Re-queue the log of ${log.log_date}`, onclick: async (e) => {
    e.currentTarget.disabled = true;
    try {
      await api('POST', `/v1/daily-logs/${encodeURIComponent(log.id)}/status`, { body: { processing_status: 'pending' }, key: idem() });
      await route();
      notice(`The log of ${log.log_date} is queued again.`, 'ok');
    } catch (err) { failed(err); e.currentTarget && (e.currentTarget.disabled = false); }
  } }, 'Re-queue');
}
async function renderModes(box) {
  const title = h('h2', { id: 'modes-title' }, 'Who learns from daily logs');
  const modes = await api('GET', '/v1/extraction/modes');
  const own = new Map((modes.projects || []).map((p) => [p.project, p.mode]));
  const names = [...new Set([...state.projects.map((p) => p.project), ...own.keys()])].filter((p) => !state.restricted || p === state.restricted).sort();
  const explain = h('p', { class: 'muted small' }, `auto: the engine extracts each log at once; agent: only external agents extract; handoff: agents first, the engine after ${modes.handoff_minutes} minutes. This install's default: ${modes.default}.`);
  if (!names.length) { fill(box, title, explain, h('p', { class: 'empty' }, 'No project yet.')); return; }
  const rows = names.map((p) => {
    const choice = select([['', `install default (${modes.default})`], ...MODES], own.get(p) || '', { 'aria-label': `Extraction mode of ${p}`, disabled: !can('memory:maintenance') });
    choice.addEventListener('change', async () => {
      try {
        const set = await api('PUT', `/v1/projects/${encodeURIComponent(p)}/extraction-mode`, { body: { mode: choice.value || null }, key: idem() });
        notice(`${p}: ${set.mode} (${set.source}).`, 'ok');
      } catch (err) { failed(err); choice.value = own.get(p) || ''; }
    });
    return h('tr', {}, h('th', { scope: 'row' }, p), h('td', {}, choice));
  });
  fill(box, title, explain, can('memory:maintenance') ? null : needs('memory:maintenance', 'Changing a mode'),
    h('table', { class: 'rows modes', id: 'modes' }, h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'Project'), h('th', { scope: 'col' }, 'Mode'))), h('tbody', {}, ...rows)));
}
async function viewLog(root, args, query) {
  const id = args[0];
  const back = h('p', {}, h('a', { href: '#/logs' }, '← Logs'));
  if (!can('memory:maintenance')) { fill(root, back, h('h1', {}, 'Daily log'), needs('memory:maintenance', 'Reading a daily log')); return; }
  const found = await api('GET', `/v1/daily-logs/${encodeURIComponent(id)}`);
  if (!found.found || !found.log) { fill(root, back, h('h1', {}, 'Daily log'), h('p', { class: 'empty' }, 'No such log (or not yours).')); return; }
  const log = found.log;
  const marked = new Set((query.get('turns') || '').split(',').filter(Boolean).map(Number));
  const facts = [['Day', log.log_date], ['Project', log.project], ['Status', log.processing_status], ['Tries', String(log.retry_count)],
    ['Error', log.error_reason || '—'], ['Claimed', when(log.claimed_at)], ['Processed', when(log.processed_at)], ['Updated', when(log.updated_at)],
    ['Topics', (log.topics || []).join(', ') || '—'], ['Mood', log.mood === null || log.mood === undefined ? '—' : String(log.mood)]];
  const turns = h('ol', { class: 'turns', start: 1, id: 'turns' }, ...(log.turns || []).map((t, i) => h('li', { class: marked.has(i) ? 'turn marked' : 'turn', dataset: { index: String(i) } },
    h('span', { class: 'speaker' }, t.speaker), ' ', h('span', {}, t.text), marked.has(i) ? h('span', { class: 'sr-only' }, ' (a memory came from this turn)') : null)));
  const extraction = h('section', { class: 'card', 'aria-labelledby': 'ex-title' }, h('h2', { id: 'ex-title' }, 'Extraction'), h('p', { class: 'muted' }, 'Loading…'));
  fill(root, back, h('h1', {}, `Daily log ${log.log_date}`),
    h('dl', { class: 'facts', id: 'log-facts' }, ...facts.flatMap(([k, v]) => [h('dt', {}, k), h('dd', { class: k === 'Status' ? `status ${v}` : null }, v)])),
    log.processing_status === 'failed' ? h('div', { class: 'actions' }, requeueButton(log)) : null,
    h('section', { class: 'card', 'aria-labelledby': 'turns-title' }, h('h2', { id: 'turns-title' }, `Turns (${(log.turns || []).length})`),
      (log.turns || []).length ? turns : h('p', { class: 'empty' }, 'This log has no turns.')),
    extraction);
  // the runs covering this log (GET /v1/extraction-tasks?log_id=), and what each produced from it
  const [results, runs] = await Promise.all([
    api('GET', '/v1/extraction-results', { query: { log_id: id, limit: 100 } }).then((r) => r.results),
    api('GET', '/v1/extraction-tasks', { query: { log_id: id, limit: 100 } }).then((r) => r.tasks)]);
  const tasks = new Map(runs.map((t) => [t.task_id, t]));
  await Promise.all([...new Set(results.map((r) => r.task_id))].filter((t) => !tasks.has(t)).map(async (t) => {
    const list = (await api('GET', '/v1/extraction-tasks', { query: { task_id: t, limit: 1 } })).tasks;   // a run that did not name the log
    if (list.length) tasks.set(t, list[0]);
  }));
  const unresulted = runs.filter((t) => !results.some((r) => r.task_id === t.task_id));
  const runCard = (t) => h('div', { class: 'result run', dataset: { task: t.task_id } },
    h('p', {}, h('strong', {}, `Run ${t.task_id}`), ` · ${t.status}${t.engine ? ` · ${t.engine}` : ''} · ${when(t.updated_at)}`),
    t.error ? h('p', { class: 'error-text' }, t.error) : null,
    h('p', { class: 'muted small' }, 'No result recorded for this log by this run.'));
  if (!results.length) {
    fill(extraction, extraction.firstChild, ...unresulted.map(runCard), h('p', { class: 'empty' }, runs.length ? 'No run recorded a result for this log yet.' : 'No extraction run for this log yet.'));
    return;
  }
  const texts = new Map();              // each produced memory's current text (its history's last version)
  const produced = [...new Set(results.flatMap((r) => r.memory_ids))].slice(0, 50);
  await Promise.all(produced.map(async (m) => {
    try { const v = (await api('GET', `/v1/memories/${encodeURIComponent(m)}/history`)).versions || []; if (v.length) texts.set(m, v[v.length - 1]); }
    catch (err) { if (err.status === 401) throw err; }
  }));
  fill(extraction, extraction.firstChild, ...unresulted.map(runCard), ...results.map((r) => {
    const t = tasks.get(r.task_id);
    return h('div', { class: 'result' },
      h('p', {}, h('strong', {}, `Run ${r.task_id}`), t ? ` · ${t.status}${t.engine ? ` · ${t.engine}` : ''}${t.finished_at ? ` · finished ${when(t.finished_at)}` : ''}` : ' · no task recorded for this run'),
      t && t.error ? h('p', { class: 'error-text' }, t.error) : null,
      t && t.metrics && Object.keys(t.metrics).length ? h('p', { class: 'muted small' }, Object.entries(t.metrics).map(([k, v]) => `${k}: ${typeof v === 'object' ? JSON.stringify(v) : v}`).join(' · ')) : null,
      h('p', {}, `${r.memory_ids.length} memor${r.memory_ids.length === 1 ? 'y' : 'ies'}, ${r.shared_memory_ids.length} shared`),
      r.memory_ids.length ? h('ul', { class: 'links produced' }, ...r.memory_ids.map((m) => {
        const v = texts.get(m);
        return h('li', { dataset: { id: m } }, h('a', { href: memoryHref({ id: m, project: r.project }) }, v ? v.content : m),
          v && v.status === 'forgotten' ? h('span', { class: 'badge' }, 'forgotten') : null);
      })) : null);
  }));
}

// ---- projects ---------------------------------------------------------------------------------
async function viewProjects(root) {
  await loadProjects();
  const list = state.projects;
  fill(root, h('h1', {}, 'Projects'), !list.length ? h('p', { class: 'empty' }, 'No project has a memory yet.') :
    h('div', { class: 'table-wrap' }, h('table', { class: 'rows', id: 'project-list' },
      h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'Project'), h('th', { scope: 'col' }, 'Memories'), h('th', { scope: 'col' }, 'Last change'))),
      h('tbody', {}, ...list.map((p) => h('tr', {}, h('td', {}, h('a', { href: `#/memories?project=${encodeURIComponent(p.project)}` }, p.project)),
        h('td', { 'data-label': 'Memories', class: 'num' }, String(p.memories)), h('td', { 'data-label': 'Last change' }, when(p.last_updated))))))),
  h('p', { class: 'muted small' }, 'Counts are current memories. Extraction modes per project are under Logs.'));
}

// ---- API keys (admin) -------------------------------------------------------------------------
async function viewUsers(root) {
  const title = h('h1', {}, 'Users');
  if (!can('admin') || state.restricted) { fill(root, title, needs('admin', 'Listing users'), h('p', { class: 'muted' }, 'The users of the install are the operator\'s to see: sign in with an unrestricted admin key.')); return; }
  const users = (await api('GET', '/v1/users')).users;
  if (!users.length) { fill(root, title, h('p', { class: 'empty' }, 'No user yet.')); return; }
  users.sort((a, b) => b.created_at.localeCompare(a.created_at));
  fill(root, title, h('p', { class: 'muted small', id: 'user-count' }, `${users.length} user${users.length === 1 ? '' : 's'}, newest first. A user's keys open from their row.`),
    h('div', { class: 'table-wrap' }, h('table', { class: 'rows users', id: 'user-list' },
      h('thead', {}, h('tr', {}, ...['User', 'Sign-in name', 'Id', 'State', 'Created', ''].map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, ...users.map((u) => h('tr', { dataset: { id: u.user_id }, class: u.disabled ? 'revoked' : null },
        h('td', {}, u.name), h('td', { 'data-label': 'Sign-in name' }, u.username || '—'), h('td', { 'data-label': 'Id' }, h('code', {}, u.user_id)),
        h('td', { 'data-label': 'State' }, u.disabled ? 'disabled' : 'active'), h('td', { 'data-label': 'Created' }, when(u.created_at)),
        h('td', {}, h('a', { href: `#/keys?user=${encodeURIComponent(u.user_id)}`, class: 'user-keys' }, u.user_id === state.who.user_id ? 'Your keys' : 'Keys'))))))));
}
async function viewKeys(root, _args, query) {
  const asked = query && query.get('user');
  const title = h('h1', {}, asked && state.who && asked !== state.who.user_id ? `API keys of ${asked}` : 'API keys');
  // an admin manages every user's keys (/v1/keys); anyone with keys:manage their own (/v1/me/keys)
  const admin = can('admin');
  if (!admin && !can('keys:manage')) {
    fill(root, title, needs('keys:manage', 'Managing your API keys'),
      h('p', { class: 'muted' }, 'Sign in again (OAuth asks for it) or with a key that holds keys:manage; the install operator manages every user\'s keys with an admin key or ', h('code', {}, 'engram keys create'), '.'));
    return;
  }
  const user = (admin && query && query.get('user')) || state.who.user_id;
  const userName = user === state.who.user_id ? (state.who.user_name || user) : user;
  const base = admin ? '/v1/keys' : '/v1/me/keys';
  const keys = (await api('GET', base, { query: admin ? { user_id: user } : {} })).keys;
  const name = h('input', { type: 'text', maxlength: 200, required: true, value: 'console key' });
  const offered = admin ? SCOPES : OWN_KEY_SCOPES.filter((s) => can(s));  // (a key of one's own: at most one's own scopes)
  const boxes = offered.map((s) => h('input', { type: 'checkbox', value: s, checked: s === 'memory:read' || s === 'memory:write', id: uid('scope') }));
  const project = h('input', { type: 'text', pattern: '[A-Za-z0-9_.:\\-]{1,128}', placeholder: 'any project', list: 'project-names' });
  const days = h('input', { type: 'number', min: 1, max: 3650, placeholder: 'never' });
  const out = h('div', { id: 'key-out', role: 'status' });
  const create = h('form', { class: 'card', id: 'create-key', 'aria-labelledby': 'new-key-title', onsubmit: async (e) => {
    e.preventDefault();
    const scopes = boxes.filter((b) => b.checked).map((b) => b.value);
    if (!scopes.length) { fill(out, h('p', { class: 'error' }, 'Choose at least one scope.')); return; }
    if (project.value && scopes.includes('admin')) { fill(out, h('p', { class: 'error' }, 'An admin key cannot be restricted to a project.')); return; }
    const body = { ...(admin ? { user_id: user } : {}), name: name.value.trim() || 'console key', scopes,
      project: project.value.trim() || null, expires_in_days: days.value ? Number(days.value) : null };
    try {
      const made = await api('POST', base, { body, key: idem() });
      await route();
      const secret = h('input', { type: 'text', readonly: true, value: made.key, id: 'new-key-secret', class: 'secret' });
      fill($('key-out'), h('div', { class: 'once', role: 'alert' }, h('p', {}, h('strong', {}, `Key “${made.view.name}” made.`), ' Copy it now: it is shown this once.'),
        field('The new key', secret), h('button', { type: 'button', onclick: async () => {
          try { await navigator.clipboard.writeText(made.key); notice('Copied.', 'ok'); } catch { secret.select(); notice('Press Ctrl+C to copy the selected key.'); }
        } }, 'Copy'), h('button', { type: 'button', class: 'link', onclick: () => fill($('key-out'), ) }, 'Done: hide it')));
      secret.focus(); secret.select();
    } catch (err) { failed(err, out); }
  } }, h('h2', { id: 'new-key-title' }, `New key for ${userName}`), field('Name', name),
    h('fieldset', {}, h('legend', {}, 'Scopes'), ...boxes.map((b) => h('label', { class: 'check', for: b.id }, b, ` ${b.value}`))),
    h('div', { class: 'row' }, field('Project (optional)', project, 'restricts the key to one project'), field('Expires in days (optional)', days)),
    h('datalist', { id: 'project-names' }, ...state.projects.map((p) => new Option(p.project, p.project))),
    h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'primary' }, 'Create key')), out);
  const rows = keys.sort((a, b) => b.created_at.localeCompare(a.created_at)).map((k) => h('tr', { dataset: { id: k.key_id }, class: k.revoked_at ? 'revoked' : null },
    h('td', {}, k.name), h('td', { 'data-label': 'Prefix' }, h('code', {}, k.prefix)), h('td', { 'data-label': 'Scopes' }, k.scopes.join(', ')),
    h('td', { 'data-label': 'Project' }, k.project || 'any'), h('td', { 'data-label': 'Created' }, when(k.created_at)),
    h('td', { 'data-label': 'Last used' }, when(k.last_used_at)),
    h('td', { 'data-label': 'State' }, k.revoked_at ? `revoked ${when(k.revoked_at)}` : k.expires_at ? `expires ${when(k.expires_at)}` : 'active'),
    h('td', {}, k.revoked_at ? null : k.key_id === state.who.key_id ? h('span', { class: 'muted small' }, 'this key') : h('button', { type: 'button', class: 'danger revoke', 'aria-label': `Revoke ${k.name}`, onclick: async (e) => {
      const b = e.currentTarget;
      if (b.dataset.confirm !== '1') { b.dataset.confirm = '1'; b.textContent = 'Really revoke?'; return; }
      b.disabled = true;
      try { await api('DELETE', `${base}/${encodeURIComponent(k.key_id)}`, { key: idem() }); await route(); notice(`Revoked “${k.name}”.`, 'ok'); }
      catch (err) { failed(err); b.disabled = false; }
    } }, 'Revoke'))));
  fill(root, title, create, h('section', { class: 'card', 'aria-labelledby': 'keys-title' }, h('h2', { id: 'keys-title' }, `Keys of ${state.who.user_name || user}`),
    rows.length ? h('div', { class: 'table-wrap' }, h('table', { class: 'rows', id: 'key-list' },
      h('thead', {}, h('tr', {}, ...['Name', 'Prefix', 'Scopes', 'Project', 'Created', 'Last used', 'State', ''].map((t) => h('th', { scope: 'col' }, t)))), h('tbody', {}, ...rows)))
      : h('p', { class: 'empty' }, 'No key yet.')),
  h('p', { class: 'muted small' }, admin ? 'Other users\' keys: open Users and follow a user\'s Keys link.'
    : 'Your own keys (keys:manage): a key made here gets at most the scopes of this sign-in, and its project when this sign-in is restricted to one.'));
}

// ---- export / import --------------------------------------------------------------------------
async function viewTransfer(root) {
  const project = select(projectOptions('Everything'), state.restricted || '');
  const format = select([['jsonl', 'JSONL (engram import reads it back)'], ['markdown', 'Markdown (to read)']], 'jsonl');
  const exportOut = h('div', { id: 'export-out', role: 'status', 'aria-live': 'polite' });
  const exportForm = h('form', { class: 'card', 'aria-labelledby': 'export-title', onsubmit: async (e) => {
    e.preventDefault();
    const button = exportForm.querySelector('button[type=submit]');
    button.disabled = true;
    try { await runExport(project.value, format.value, exportOut); } catch (err) { failed(err, exportOut); } finally { button.disabled = false; }
  } }, h('h2', { id: 'export-title' }, 'Export'), h('p', { class: 'muted small' }, 'Every memory with all its versions, shared memories, daily logs and extraction results.'),
    h('div', { class: 'row' }, field('Project', project), field('Format', format)), h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'primary' }, 'Export')), exportOut);
  const file = h('input', { type: 'file', accept: '.jsonl,.ndjson,application/x-ndjson,application/json' });
  const into = select(projectOptions('Each memory\'s own project'), state.restricted || '');
  const importOut = h('div', { id: 'import-out', role: 'status', 'aria-live': 'polite' });
  const importForm = h('form', { class: 'card', 'aria-labelledby': 'import-title', onsubmit: async (e) => {
    e.preventDefault();
    if (!file.files.length) { fill(importOut, h('p', { class: 'error' }, 'Choose a file first.')); return; }
    const button = importForm.querySelector('button[type=submit]');
    button.disabled = true;
    try { await runImport(file.files[0], into.value, importOut); } catch (err) { failed(err, importOut); } finally { button.disabled = false; }
  } }, h('h2', { id: 'import-title' }, 'Import'),
    h('p', { class: 'muted small' }, 'A JSONL file: an Engram export (each memory\'s current version is saved; forgotten ones are left out) or one memory object per line ({"content": …, "category": …}). Saved in batches of 100 through POST /v1/memories/bulk; importing the same file again saves nothing twice. To restore whole histories, use engram import.'),
    h('div', { class: 'row' }, field('File', file), field('Into project', into)), h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'primary' }, 'Import')), importOut);
  fill(root, h('h1', {}, 'Export and import'), exportForm, can('memory:write') ? importForm : needs('memory:write', 'Importing'));
}
async function runExport(project, format, out) {
  const url = new URL('/v1/export', location.origin);
  if (project) url.searchParams.set('project', project);
  url.searchParams.set('format', format);
  const progress = h('p', { class: 'muted' }, 'Starting…');
  fill(out, progress);
  let response;
  try { response = await fetch(url, { headers: { Authorization: `Bearer ${state.token}` }, credentials: 'omit', cache: 'no-store' }); }
  catch { throw new ApiError(0, 'The Engram gateway does not answer (is it running?).'); }
  if (response.status === 401) { signOut('Your sign-in has expired or the key was revoked: sign in again.'); return; }
  if (!response.ok) { const e = ((await response.json().catch(() => null)) || {}).error || {}; throw new ApiError(response.status, e.message || `HTTP ${response.status}`); }
  const reader = response.body.getReader();
  const chunks = [];
  let bytes = 0, lines = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value); bytes += value.length;
    for (const b of value) if (b === 10) lines++;
    progress.textContent = `Received ${lines.toLocaleString()} lines (${(bytes / 1024).toFixed(1)} KiB)…`;
  }
  const name = `engram-export${project ? `-${project}` : ''}.${format === 'markdown' ? 'md' : 'jsonl'}`;
  const blob = new Blob(chunks, { type: format === 'markdown' ? 'text/markdown' : 'application/x-ndjson' });
  const href = URL.createObjectURL(blob);
  progress.textContent = `Done: ${lines.toLocaleString()} lines (${(bytes / 1024).toFixed(1)} KiB).`;
  out.append(h('a', { href, download: name, id: 'export-download', class: 'button' }, `Save ${name}`));
  out.querySelector('#export-download').click();
}
const ITEM_FIELDS = ['content', 'category', 'memory_key', 'context', 'importance', 'confidence', 'project'];
function importItems(text) {             // (items, skipped) from an export or plain memory lines
  const items = [];
  let skipped = 0, lineNo = 0;
  const records = [];
  for (const line of text.split('\n')) {
    lineNo++;
    if (!line.trim()) continue;
    try { records.push([lineNo, JSON.parse(line)]); } catch { throw new Error(`Line ${lineNo} is not JSON.`); }
  }
  // a long memory's record may come in consecutive parts (its versions cut across lines): its last part holds its state
  const lastPart = new Map(records.filter(([, r]) => r && r.type === 'memory').map(([n, r]) => [r.id, n]));
  for (const [n, record] of records) {
    lineNo = n;
    let memory = null, key = null;
    if (record.type === 'memory' && lastPart.get(record.id) !== n) continue;
    if (record.type === 'memory' && Array.isArray(record.versions) && record.versions.length) {
      const last = record.versions[record.versions.length - 1].state || {};
      if (last.status === 'forgotten') { skipped++; continue; }
      memory = last; key = `console-import:${record.id}:${last.version}`;
    } else if (record.type) { skipped++; continue; }   // header, shared memories, logs: engram import restores them
    else if (typeof record.content === 'string') memory = record;
    else throw new Error(`Line ${lineNo} is neither an export record nor a memory with "content".`);
    const item = {};
    for (const f of ITEM_FIELDS) if (memory[f] !== undefined && memory[f] !== null) item[f] = memory[f];
    item.source = (key && memory.source) || 'import';   // a restored memory keeps its source (another source is a change: a new version)
    if (key) item.idempotency_key = key;
    items.push(item);
  }
  return { items, skipped };
}
async function runImport(file, project, out) {
  const { items, skipped } = importItems(await file.text());
  if (!items.length) { fill(out, h('p', { class: 'empty' }, `No memory to import${skipped ? ` (${skipped} record${skipped === 1 ? '' : 's'} left out)` : ''}.`)); return; }
  const bar = h('progress', { max: items.length, value: 0, 'aria-label': 'Import progress' });
  const text = h('p', { class: 'muted' }, `0 of ${items.length}`);
  fill(out, bar, text);
  const run = idem();   // one key per batch of this run: a retried batch saves nothing twice (items dedupe by content too)
  const totals = { saved: 0, duplicates: 0, errors: 0 };
  const firstErrors = [];
  for (let i = 0; i < items.length; i += BULK_BATCH) {
    const batch = items.slice(i, i + BULK_BATCH).map((it) => (project ? { ...it, project } : it));
    const result = await api('POST', '/v1/memories/bulk', { body: { memories: batch }, key: `console-import:${run}:${i}` });
    totals.saved += result.saved; totals.duplicates += result.duplicates; totals.errors += result.errors;
    for (const r of result.results || []) if (r.status === 'error' && firstErrors.length < 5) firstErrors.push(`#${i + (r.index ?? 0) + 1}: ${(r.error && r.error.message) || 'refused'}`);
    bar.value = Math.min(items.length, i + batch.length);
    text.textContent = `${bar.value} of ${items.length}`;
  }
  text.textContent = `Done: ${totals.saved} saved, ${totals.duplicates} already there, ${totals.errors} refused${skipped ? `, ${skipped} record${skipped === 1 ? '' : 's'} left out` : ''}.`;
  if (firstErrors.length) out.append(h('ul', { class: 'error-text' }, ...firstErrors.map((e) => h('li', {}, e))));
  await loadProjects();
}

// ---- theme, wiring ----------------------------------------------------------------------------
function setTheme(theme) {
  state.theme = theme;
  localStorage.setItem(THEME, theme);                 // a preference, not a secret
  document.documentElement.dataset.theme = theme;
  $('theme').textContent = theme === 'dark' ? '☀ Light' : '☾ Dark';
}
function wire() {
  $('oauth-go').addEventListener('click', oauthSignIn);
  $('signin-go').addEventListener('click', signIn);
  $('key').addEventListener('keydown', (e) => { if (e.key === 'Enter') signIn(); });
  $('signout').addEventListener('click', () => signOut(''));
  $('theme').addEventListener('click', () => setTheme(state.theme === 'dark' ? 'light' : 'dark'));
  window.addEventListener('hashchange', route);
  setTheme(state.theme);
  oauthCallback().then((handled) => { if (!handled) { if (state.token) start(); else signOut(''); } });
}
if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', wire); else wire();
})();
