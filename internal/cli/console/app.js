// The TrainJob console: a live page of the list of TrainJobs from one server-sent event stream,
// and the details of the one selected. The console's server filters and pages the list, so the
// page holds one page of it however many TrainJobs there are. Everything is read and changed
// through the console's server, which acts with the user's kubeconfig.
'use strict';

const PAGE = 100;            // rows a page of the list shows: the server's pageSize
const DETAIL_REFRESH = 10000; // ms between re-reads of the selected TrainJob's tree and events
const MAX_LOG_LINES = 5000;

const state = {
  list: { items: [], page: 0, matching: 0, all: 0 }, // the page the server sent last
  page: 0,
  stream: null,     // EventSource of the list's page
  selected: null,   // key
  summary: null,    // the selected TrainJob's summary, as the stream sent it last
  detail: null,
  logs: null,       // EventSource of the logs shown
  logSource: '',
  renderQueued: false,
  detailTimer: null,
  detailQueued: false,
};

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v;
    else if (k.startsWith('data-')) e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(c ?? ''));
  return e;
}

// Durations as kubectl prints them: 45s, 3m20s, 5h, 2d.
function human(seconds) {
  seconds = Math.max(0, Math.round(seconds));
  if (seconds < 120) return seconds + 's';
  const m = Math.floor(seconds / 60);
  if (m < 10) return m + 'm' + (seconds % 60 ? (seconds % 60) + 's' : '');
  if (m < 180) return m + 'm';
  const h = Math.floor(m / 60);
  if (h < 48) return h + 'h' + (m % 60 && h < 8 ? (m % 60) + 'm' : '');
  return Math.floor(h / 24) + 'd';
}

const age = (t) => human((Date.now() - new Date(t)) / 1000);

// The seconds left by the trainer's estimate, counted down since it made it.
function etaLeft(s) {
  if (s.eta == null || s.finished) return null;
  const since = s.reportedAt ? (Date.now() - new Date(s.reportedAt)) / 1000 : 0;
  return Math.max(0, s.eta - since);
}

function stateClass(st) { return 'state state-' + (st || 'Pending').toLowerCase(); }

// ---- The list ----

function queueRender() {
  if (state.renderQueued) return;
  state.renderQueued = true;
  requestAnimationFrame(() => { state.renderQueued = false; renderList(); });
}

function progressCell(s) {
  if (s.progress == null) return el('td', {}, '-');
  const fill = el('span', { class: 'mini-fill' });
  fill.style.width = Math.min(100, Math.max(0, s.progress)) + '%';
  return el('td', { class: 'progress-cell' }, el('span', { class: 'mini-bar' }, fill), ' ' + s.progress + '%');
}

function renderList() {
  const list = state.list;
  const body = el('tbody');
  for (const s of list.items) {
    const left = etaLeft(s);
    const tr = el('tr', { 'data-key': s.key, class: s.key === state.selected ? 'selected' : '' },
      el('td', {}, s.namespace),
      el('td', { class: 'name' }, s.name),
      el('td', {}, el('span', { class: stateClass(s.state) }, s.state || 'Pending'), s.reason ? ' ' + s.reason : ''),
      el('td', {}, s.ready || '-'),
      progressCell(s),
      el('td', {}, left == null ? '-' : human(left)),
      el('td', {}, age(s.created)),
      el('td', {}, s.runtime));
    tr.addEventListener('click', () => select(s.key));
    body.append(tr);
  }
  $('list').tBodies[0].replaceWith(body);
  $('empty').hidden = list.matching > 0;
  $('empty').textContent = list.all ? 'No TrainJob matches the filter.' : 'No TrainJobs here yet.';
  const first = list.page * PAGE;
  $('page-info').textContent = list.matching ? `${first + 1}–${first + list.items.length} of ${list.matching}` : '';
  $('prev').disabled = list.page === 0;
  $('next').disabled = first + list.items.length >= list.matching;
  $('count').textContent = `${list.all} TrainJob${list.all === 1 ? '' : 's'}` + (list.listing ? ', reading the rest…' : '');
}

// connect opens the stream of the page the list shows, its filter and the selected TrainJob,
// closing the one before: another page, filter or selection is another stream.
function connect() {
  if (state.stream) state.stream.close();
  const params = new URLSearchParams({ q: $('filter').value, state: $('state-filter').value, page: state.page, selected: state.selected || '' });
  const events = new EventSource('api/stream?' + params);
  state.stream = events;
  events.addEventListener('open', () => { $('connection').textContent = 'live'; $('connection').className = 'connection live'; });
  events.addEventListener('error', () => {
    $('connection').textContent = 'reconnecting';
    $('connection').className = 'connection';
    // The browser connects again by itself, unless the console's server answered with an error:
    // then this page does, a little later.
    if (events.readyState === EventSource.CLOSED) setTimeout(() => { if (state.stream === events) connect(); }, 5000);
  });
  events.addEventListener('scope', (e) => { $('scope').textContent = JSON.parse(e.data); });
  events.addEventListener('page', (e) => {
    const list = JSON.parse(e.data);
    state.list = list;
    state.page = list.page;
    showProblem(list.problem);
    queueRender();
    if (state.selected) selectedIs(list.selected, list.listing);
  });
}

// selectedIs takes the selected TrainJob's summary as the stream sent it: its change reads the
// details again; its absence, once the list is read whole, is its deletion.
function selectedIs(s, listing) {
  if (!s) {
    if (state.summary && !listing) {
      $('d-state').textContent = 'Deleted';
      $('d-state').className = 'state state-deleted';
      for (const id of ['action-suspend', 'action-resume', 'action-delete']) $(id).disabled = true;
    }
    state.summary = null;
    return;
  }
  const changed = JSON.stringify(s) !== JSON.stringify(state.summary);
  state.summary = s;
  if (changed) { renderSummary(s); refreshDetailSoon(); }
}

function showProblem(message) {
  $('problem').hidden = !message;
  $('problem').textContent = message ? 'The cluster refused the console: ' + message : '';
}

// ---- The selected TrainJob ----

function select(key) {
  if (state.selected === key) return;
  state.selected = key;
  state.summary = state.list.items.find((s) => s.key === key) || null;
  state.detail = null;
  location.hash = key;
  $('detail-pane').hidden = false;
  $('action-message').hidden = true;
  $('d-name').textContent = key;
  if (state.summary) renderSummary(state.summary);
  for (const id of ['d-timeline', 'd-charts', 'd-tree', 'd-logs']) $(id).replaceChildren();
  state.logSource = '';
  closeLogs();
  connect();
  queueRender();
  refreshDetail();
  clearInterval(state.detailTimer);
  state.detailTimer = setInterval(refreshDetail, DETAIL_REFRESH);
}

function closeDetail() {
  state.selected = null;
  state.summary = null;
  closeLogs();
  clearInterval(state.detailTimer);
  $('detail-pane').hidden = true;
  history.replaceState(null, '', location.pathname);
  connect();
  queueRender();
}

function renderSummary(s) {
  $('d-name').textContent = s.name;
  $('d-state').textContent = s.state || 'Pending';
  $('d-state').className = stateClass(s.state);
  $('d-meta').textContent = `${s.namespace} · ${s.runtime} · ${s.ready || '-'} nodes ready · ${age(s.created)} old` + (s.queue ? ` · queue ${s.queue}` : '');
  const p = $('d-progress');
  p.hidden = s.progress == null && s.eta == null;
  p.querySelector('.bar-fill').style.width = Math.min(100, Math.max(0, s.progress || 0)) + '%';
  p.querySelector('.pct').textContent = s.progress == null ? '' : s.progress + '%';
  const left = etaLeft(s);
  p.querySelector('.eta').textContent = left == null ? '' : 'ETA ' + human(left);
  $('action-suspend').disabled = s.finished || (s.suspended && !s.queue);
  $('action-resume').disabled = s.finished || (!s.suspended && !s.queue);
  $('action-delete').disabled = false;
}

function refreshDetailSoon() {
  if (state.detailQueued) return;
  state.detailQueued = true;
  setTimeout(() => { state.detailQueued = false; refreshDetail(); }, 500);
}

async function refreshDetail() {
  const key = state.selected;
  // A hidden tab reads nothing: it reads again when shown.
  if (!key || document.hidden) return;
  const [namespace, name] = key.split('/');
  const resp = await fetch(`api/trainjob?namespace=${encodeURIComponent(namespace)}&name=${encodeURIComponent(name)}`);
  const body = await answer(resp);
  if (key !== state.selected) return;
  if (!resp.ok) {
    $('d-why').hidden = false;
    $('d-why').querySelector('.why-reason').textContent = 'Cannot read it';
    $('d-why').querySelector('.why-message').textContent = body.error;
    return;
  }
  state.detail = body;
  renderSummary(body.summary);
  renderDetail(body);
}

function renderDetail(d) {
  const why = $('d-why');
  why.hidden = !d.why;
  if (d.why) {
    why.querySelector('.why-reason').textContent = d.why.reason;
    why.querySelector('.why-message').textContent = d.why.message;
  }
  $('d-timeline').replaceChildren(...d.timeline.map((m) =>
    el('li', {}, el('time', { dateTime: m.time, title: new Date(m.time).toLocaleString() }, new Date(m.time).toLocaleTimeString()), ' ', m.what)));
  renderCharts(d);
  fillTable('d-conditions', d.conditions.map((c) => [c.type, c.status, c.reason, age(c.time), c.message]));
  $('d-tree').replaceChildren(...d.tree.map((n) =>
    el('li', { class: 'depth-' + n.depth, 'data-kind': n.kind },
      el('span', { class: 'kind' }, n.kind), ' ', el('span', { class: 'name' }, n.name), ' ',
      el('span', { class: n.state ? stateClass(n.state) : '' }, n.state), ' ', el('span', { class: 'detail' }, n.detail))));
  $('d-notes').hidden = !(d.notes && d.notes.length);
  $('d-notes').textContent = (d.notes || []).map((n) => 'Not shown: ' + n).join('\n');
  fillTable('d-events', d.events.slice().reverse().map((e) => [age(e.time), e.type, e.reason, e.object, e.message]));
  renderLogSources(d);
}

function fillTable(id, rows) {
  const body = el('tbody');
  for (const r of rows) body.append(el('tr', {}, ...r.map((c) => el('td', {}, c))));
  if (!rows.length) body.append(el('tr', {}, el('td', { colSpan: 5, class: 'none' }, 'none')));
  $(id).tBodies[0].replaceWith(body);
}

// ---- Charts: progress and each numeric metric over the reports the console saw ----

const SVG = 'http://www.w3.org/2000/svg';

function svg(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
}

function renderCharts(d) {
  const series = new Map();
  const add = (name, t, v) => {
    if (!Number.isFinite(v)) return;
    if (!series.has(name)) series.set(name, []);
    series.get(name).push([new Date(t).getTime(), v]);
  };
  for (const p of d.history) {
    if (p.progress != null) add('progress %', p.time, p.progress);
    for (const [k, v] of Object.entries(p.metrics || {})) add(k, p.time, parseFloat(v));
  }
  const charts = [...series.entries()].map(([name, pts]) => chart(name, pts));
  if (!charts.length) charts.push(el('p', { class: 'none' }, d.metrics && d.metrics.length
    ? 'Reported: ' + d.metrics.map((m) => m.name + '=' + m.value).join(', ') + ' (charts grow with each report while the console runs)'
    : 'No reports yet: a trainer reports progress and metrics as docs/progress.md says.'));
  $('d-charts').replaceChildren(...charts);
}

function chart(name, pts) {
  const W = 300, H = 110, pad = 6;
  const xs = pts.map((p) => p[0]), ys = pts.map((p) => p[1]);
  const x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
  const sx = (x) => pad + (x1 === x0 ? (W - 2 * pad) : (x - x0) / (x1 - x0) * (W - 2 * pad));
  const sy = (y) => H - pad - (y1 === y0 ? (H - 2 * pad) / 2 : (y - y0) / (y1 - y0) * (H - 2 * pad));
  const s = svg('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart-svg', role: 'img', 'aria-label': name });
  s.append(svg('polyline', { points: pts.map((p) => sx(p[0]) + ',' + sy(p[1])).join(' '), class: 'line' }));
  for (const p of pts) s.append(svg('circle', { cx: sx(p[0]), cy: sy(p[1]), r: 2, class: 'dot' }));
  const last = ys[ys.length - 1];
  return el('figure', { class: 'chart', 'data-metric': name, 'data-points': String(pts.length) },
    el('figcaption', {}, el('strong', {}, name), ` ${fmt(last)} (min ${fmt(y0)}, max ${fmt(y1)}, ${pts.length} report${pts.length === 1 ? '' : 's'})`), s);
}

const fmt = (v) => (Math.abs(v) >= 1000 || Number.isInteger(v) ? String(v) : v.toPrecision(4));

// ---- Logs ----

function renderLogSources(d) {
  const sel = $('log-source');
  const options = [];
  for (let r = 0; r < d.ranks; r++) options.push(['rank=' + r, 'Rank ' + r]);
  if (d.ranks > 1) options.push(['rank=all', 'All ranks']);
  for (const i of d.initializers || []) options.push(['initializer=' + i, i[0].toUpperCase() + i.slice(1) + ' initializer']);
  const want = options.map((o) => o[0]).join();
  if (sel.dataset.options !== want) {
    sel.dataset.options = want;
    sel.replaceChildren(...options.map(([v, t]) => el('option', { value: v }, t)));
    if (options.some((o) => o[0] === state.logSource)) sel.value = state.logSource;
  }
  if (!options.length) $('log-status').textContent = 'No pods to read the logs of yet.';
  else if (!state.logSource) openLogs(sel.value);
}

function closeLogs() {
  if (state.logs) state.logs.close();
  state.logs = null;
}

function openLogs(source) {
  closeLogs();
  state.logSource = source;
  const [namespace, name] = state.selected.split('/');
  const pre = $('d-logs');
  pre.replaceChildren();
  $('log-status').textContent = '';
  const follow = $('log-follow').checked;
  const es = new EventSource(`api/logs?namespace=${encodeURIComponent(namespace)}&name=${encodeURIComponent(name)}&${source}&follow=${follow}&tail=${MAX_LOG_LINES}`);
  state.logs = es;
  es.addEventListener('line', (e) => {
    const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    pre.append(JSON.parse(e.data) + '\n');
    while (pre.childNodes.length > MAX_LOG_LINES) pre.firstChild.remove();
    if (atEnd) pre.scrollTop = pre.scrollHeight;
  });
  es.addEventListener('status', (e) => { $('log-status').textContent = JSON.parse(e.data); });
  es.addEventListener('problem', (e) => { $('log-status').textContent = JSON.parse(e.data); });
  es.addEventListener('end', () => {
    es.close();
    if (!$('log-status').textContent) $('log-status').textContent = follow ? 'The log ended.' : '';
  });
  es.addEventListener('error', () => es.close());
}

// answer is a response's JSON, or its text as the error when the console's server refused the
// request itself (a stale page of a console that was restarted).
async function answer(resp) {
  const text = await resp.text();
  try { return JSON.parse(text); } catch { return { error: text.trim() }; }
}

// ---- Actions, with the user's credentials ----

function confirmAction(text) {
  return new Promise((resolve) => {
    const dialog = $('confirm');
    $('confirm-text').textContent = text;
    const done = (ok) => () => { dialog.close(); resolve(ok); };
    $('confirm-yes').onclick = done(true);
    $('confirm-no').onclick = done(false);
    dialog.showModal();
  });
}

async function act(action) {
  const key = state.selected;
  const [namespace, name] = key.split('/');
  const s = state.summary || (state.detail && state.detail.summary);
  if (!s) return;
  const words = { suspend: `Suspend ${name} in namespace ${namespace}? Its pods stop; resume starts them again.`,
    resume: `Resume ${name} in namespace ${namespace}?`,
    delete: `Delete ${name} in namespace ${namespace}? Its JobSet, pods and everything made for it go with it.` };
  if (!await confirmAction(words[action])) return;
  const resp = await fetch('api/action', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', 'X-Trainjob-Console': '1' },
    // The UID: only the TrainJob the page shows is changed, not one made again under its name.
    body: JSON.stringify({ namespace, name, uid: s.uid, action }),
  });
  const body = await answer(resp);
  const msg = $('action-message');
  msg.hidden = false;
  msg.className = resp.ok ? 'ok' : 'refused';
  msg.textContent = resp.ok ? body.message : `Refused (${resp.status}): ${body.error}`;
  if (resp.ok) refreshDetailSoon();
}

// ---- Wiring ----

document.addEventListener('DOMContentLoaded', () => {
  const again = () => { state.page = 0; connect(); };
  $('filter').addEventListener('input', again);
  $('state-filter').addEventListener('change', again);
  $('prev').addEventListener('click', () => { state.page = Math.max(0, state.page - 1); connect(); });
  $('next').addEventListener('click', () => { state.page++; connect(); });
  $('close').addEventListener('click', closeDetail);
  $('action-suspend').addEventListener('click', () => act('suspend'));
  $('action-resume').addEventListener('click', () => act('resume'));
  $('action-delete').addEventListener('click', () => act('delete'));
  $('log-source').addEventListener('change', (e) => openLogs(e.target.value));
  $('log-follow').addEventListener('change', () => state.logSource && openLogs(state.logSource));
  // The ETAs count down between reports.
  setInterval(() => {
    queueRender();
    if (state.summary) renderSummary(state.summary);
  }, 1000);
  document.addEventListener('visibilitychange', () => { if (!document.hidden) refreshDetail(); });
  // #namespace/name is a TrainJob selected; #history is the History view (history.js).
  if (location.hash.length > 1 && location.hash !== '#history') select(decodeURIComponent(location.hash.slice(1)));
  else connect();
});
