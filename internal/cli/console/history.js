// The History view: the runs the history keeps, past and present, read page by page through the
// console's server with the user's credentials (the history's API shows only the namespaces
// whose TrainJobs the user may read), with the filters of `kubectl trainjob history`; one run in
// detail, or 2 to 4 compared: their metric curves overlaid, their specs and failures side by side.
// It uses app.js's helpers (el, svg, human, age, fmt, answer, stateClass).
'use strict';

const RUNS_PAGE = 50;  // runs a page shows: the server's historyPageSize
const MAX_COMPARED = 4;
const FILTER_DELAY = 300; // ms a filter waits for more typing before it asks again

const runs = {
  tokens: [''],      // the continue token of each page up to the one shown
  page: 0,
  items: [],
  next: '',          // the token of the page after the one shown
  ticked: new Map(), // key -> row, the runs to compare, kept across pages and filters
  shown: [],         // keys of the runs the right pane shows
  filterTimer: null,
  loading: 0,
};

function showView(view) {
  const history = view === 'history';
  $('history-view').hidden = !history;
  $('trainjobs-view').hidden = history;
  $('tab-history').classList.toggle('active', history);
  $('tab-trainjobs').classList.toggle('active', !history);
  if (history) {
    if (location.hash !== '#history') location.hash = 'history';
    loadRuns();
  } else if (location.hash === '#history') {
    window.history.replaceState(null, '', location.pathname + (state.selected ? '#' + state.selected : ''));
  }
}

function runFilters() {
  const f = { name: $('h-name').value.trim(), state: $('h-state').value, runtime: $('h-runtime').value.trim(),
    creator: $('h-creator').value.trim(), labels: $('h-labels').value.trim(), since: $('h-since').value };
  return Object.fromEntries(Object.entries(f).filter(([, v]) => v));
}

function filtersChanged() {
  clearTimeout(runs.filterTimer);
  runs.filterTimer = setTimeout(() => { runs.tokens = ['']; runs.page = 0; loadRuns(); }, FILTER_DELAY);
}

async function loadRuns() {
  const asked = ++runs.loading;
  const params = new URLSearchParams(runFilters());
  const token = runs.tokens[runs.page];
  if (token) params.set('continue', token);
  const resp = await fetch('api/runs?' + params);
  const body = await answer(resp);
  if (asked !== runs.loading) return; // a newer request was made meanwhile
  $('h-problem').hidden = resp.ok;
  $('h-problem').textContent = resp.ok ? '' : body.error;
  if (!resp.ok && /expired|continue/i.test(body.error || '') && runs.page > 0) {
    runs.tokens = ['']; runs.page = 0; // a page token too old: the first page again
    return loadRuns();
  }
  runs.items = resp.ok ? body.items : [];
  runs.next = resp.ok ? body.continue || '' : '';
  renderRuns();
}

function renderRuns() {
  const body = el('tbody');
  for (const r of runs.items) {
    const box = el('input', { type: 'checkbox', checked: runs.ticked.has(r.key), title: 'Compare' });
    box.disabled = !box.checked && runs.ticked.size >= MAX_COMPARED;
    box.addEventListener('click', (e) => e.stopPropagation());
    box.addEventListener('change', () => tick(r, box.checked));
    const tr = el('tr', { 'data-key': r.key, class: runs.shown.includes(r.key) ? 'shown' : '' },
      el('td', {}, box),
      el('td', {}, r.namespace),
      el('td', { class: 'name' }, r.trainJob, r.deleted ? el('span', { class: 'deleted-mark', title: 'The TrainJob is gone; its run is kept' }, ' (deleted)') : ''),
      el('td', {}, r.name.slice(r.trainJob.length + 1)),
      el('td', {}, el('span', { class: stateClass(r.state) }, r.state || 'Pending'), r.reason ? ' ' + r.reason : ''),
      el('td', {}, r.runtime),
      el('td', {}, r.creator || '-'),
      el('td', {}, String(r.nodes)),
      el('td', {}, (r.gpuSeconds / 3600).toFixed(1)),
      el('td', {}, human(r.runningSeconds)),
      el('td', {}, age(r.created)));
    tr.addEventListener('click', () => showRuns([r.key]));
    body.append(tr);
  }
  $('runs').tBodies[0].replaceWith(body);
  $('runs-empty').hidden = runs.items.length > 0;
  const first = runs.page * RUNS_PAGE;
  $('h-page-info').textContent = runs.items.length ? `${first + 1}–${first + runs.items.length}${runs.next ? '' : ' of ' + (first + runs.items.length)}` : '';
  $('h-prev').disabled = runs.page === 0;
  $('h-next').disabled = !runs.next;
  renderTicked();
}

function tick(row, on) {
  if (on && runs.ticked.size < MAX_COMPARED) runs.ticked.set(row.key, row);
  else runs.ticked.delete(row.key);
  renderRuns();
}

function renderTicked() {
  const n = runs.ticked.size;
  $('compare').disabled = n < 2;
  $('compare').textContent = n >= 2 ? `Compare ${n}` : 'Compare';
  $('compare-info').textContent = n === 0 ? 'Tick 2 to 4 runs to compare them; click a run for its details.'
    : [...runs.ticked.values()].map((r) => r.name).join(', ') + (n >= MAX_COMPARED ? ' (at most 4)' : '');
}

// showRuns reads the runs of keys whole and shows them side by side: one run is its details.
async function showRuns(keys) {
  runs.shown = keys;
  renderRuns();
  const answers = await Promise.all(keys.map(async (key) => {
    const [namespace, name] = key.split('/');
    const resp = await fetch(`api/run?namespace=${encodeURIComponent(namespace)}&name=${encodeURIComponent(name)}`);
    return { key, ok: resp.ok, status: resp.status, body: await answer(resp) };
  }));
  if (runs.shown !== keys) return; // another choice was made meanwhile
  const refused = answers.filter((a) => !a.ok);
  $('r-problem').hidden = !refused.length;
  $('r-problem').textContent = refused.map((a) => `${a.key}: ${a.body.error} (${a.status})`).join('\n');
  const shown = answers.filter((a) => a.ok).map((a) => a.body);
  $('run-pane').hidden = false;
  $('r-title').textContent = keys.length === 1 ? keys[0].split('/')[1] : `${keys.length} runs compared`;
  $('r-legend').replaceChildren(...shown.map((r, i) => el('span', { 'data-run': r.metadata.name },
    el('span', { class: 'swatch run-' + i }), `${r.metadata.namespace}/${r.metadata.name}`)));
  $('r-legend').hidden = shown.length < 2;
  renderRunCharts(shown);
  sideBySide('r-specs', shown, specRows(shown));
  sideBySide('r-failures', shown, failureRows(shown));
}

function closeRuns() {
  runs.shown = [];
  $('run-pane').hidden = true;
  renderRuns();
}

// The curves of each run over its own running time, so that runs started days apart overlay.
function renderRunCharts(shown) {
  const series = new Map(); // metric -> [run index, [[seconds, value]...]]
  shown.forEach((r, i) => {
    const s = r.status || {};
    const t0 = new Date((s.firstRunningTime || r.metadata.creationTimestamp)).getTime();
    const add = (name, t, v) => {
      if (!Number.isFinite(v)) return;
      if (!series.has(name)) series.set(name, new Map());
      const runsOf = series.get(name);
      if (!runsOf.has(i)) runsOf.set(i, []);
      runsOf.get(i).push([(new Date(t).getTime() - t0) / 1000, v]);
    };
    for (const p of s.progress || []) {
      if (p.percent != null) add('progress %', p.time, p.percent);
      for (const m of p.metrics || []) add(m.name, p.time, parseFloat(m.value));
    }
  });
  const charts = [...series.entries()].map(([name, runsOf]) => overlaid(name, runsOf));
  if (!charts.length) charts.push(el('p', { class: 'none' }, 'No progress was reported: a trainer reports progress and metrics as docs/progress.md says.'));
  $('r-charts').replaceChildren(...charts);
}

function overlaid(name, runsOf) {
  const W = 300, H = 120, pad = 6;
  const all = [...runsOf.values()].flat();
  const xs = all.map((p) => p[0]), ys = all.map((p) => p[1]);
  const x0 = Math.min(0, ...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
  const sx = (x) => pad + (x1 === x0 ? (W - 2 * pad) / 2 : (x - x0) / (x1 - x0) * (W - 2 * pad));
  const sy = (y) => H - pad - (y1 === y0 ? (H - 2 * pad) / 2 : (y - y0) / (y1 - y0) * (H - 2 * pad));
  const s = svg('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart-svg', role: 'img', 'aria-label': name });
  const lasts = [];
  for (const [i, pts] of runsOf) {
    s.append(svg('polyline', { points: pts.map((p) => sx(p[0]) + ',' + sy(p[1])).join(' '), class: 'run-' + i, 'data-run': i }));
    for (const p of pts) s.append(svg('circle', { cx: sx(p[0]), cy: sy(p[1]), r: 2, class: 'run-' + i }));
    lasts.push(fmt(pts[pts.length - 1][1]));
  }
  return el('figure', { class: 'chart', 'data-metric': name, 'data-runs': String(runsOf.size) },
    el('figcaption', {}, el('strong', {}, name), ` last ${lasts.join(' / ')} over ${human(x1)} of running`), s);
}

const when = (t) => (t ? new Date(t).toLocaleString() : '');

function specRows(shown) {
  const rows = [
    ['Namespace', (r) => r.metadata.namespace],
    ['TrainJob', (r) => r.spec.trainJobName + (r.status.deletedTime ? ' (deleted)' : '')],
    ['UID', (r) => r.metadata.uid],
    ['State', (r) => [r.status.state, r.status.reason].filter(Boolean).join(' ')],
    ['Message', (r) => r.status.message],
    ['Creator', (r) => r.spec.creator],
    ['Runtime', (r) => `${r.spec.runtime.kind}/${r.spec.runtime.name}`],
    ['Runtime digest', (r) => r.spec.runtime.digest],
    ['Framework', (r) => r.spec.framework],
    ['Image', (r) => r.spec.image],
    ['Nodes', (r) => String(r.spec.nodes)],
    ['GPUs per node', (r) => String(r.spec.gpusPerNode)],
    ['Processes per node', (r) => r.spec.procsPerNode],
    ['Queue', (r) => r.spec.queue],
    ['Created', (r) => when(r.metadata.creationTimestamp)],
    ['Admitted', (r) => when(r.status.admittedTime)],
    ['First running', (r) => when(r.status.firstRunningTime)],
    ['Finished', (r) => when(r.status.finishedTime)],
    ['Deleted', (r) => when(r.status.deletedTime)],
    ['Ran', (r) => human(r.status.runningSeconds || 0)],
    ['GPU-hours', (r) => ((r.status.gpuSeconds || 0) / 3600).toFixed(1)],
    ['Node-hours', (r) => ((r.status.nodeSeconds || 0) / 3600).toFixed(1)],
  ];
  const metrics = [...new Set(shown.flatMap((r) => (r.status.finalMetrics || []).map((m) => m.name)))];
  for (const name of metrics) {
    rows.push(['Final ' + name, (r) => ((r.status.finalMetrics || []).find((m) => m.name === name) || {}).value]);
  }
  return rows;
}

function failureRows(shown) {
  const failure = (f) => (f ? `pod ${f.pod}${f.rank != null ? ' (rank ' + f.rank + ')' : ''} on ${f.node || 'no node'}: ${f.reason}` +
    (f.exitCode != null ? `, exit code ${f.exitCode}` : '') + (f.nodeCaused ? ', caused by the node' : '') + (f.message ? '\n' + f.message : '') : '');
  const rows = [
    ['Failure', (r) => failure(r.status.failure)],
    ['Restarts', (r) => String(r.status.restarts || 0)],
    ['Stalls', (r) => String(r.status.stalls || 0)],
  ];
  const most = Math.max(0, ...shown.map((r) => (r.status.restartCauses || []).length));
  for (let k = 0; k < most; k++) {
    rows.push([`Restart ${k + 1}`, (r) => {
      const c = (r.status.restartCauses || [])[k];
      return c ? `${when(c.time)}: ${c.reason}${c.node ? ' on ' + c.node : ''}${c.exitCode != null ? ', exit code ' + c.exitCode : ''}${c.message ? '\n' + c.message : ''}` : '';
    }]);
  }
  return rows;
}

// Fields that differ from run to run by nature: a difference there says nothing.
const ALWAYS_DIFFER = new Set(['TrainJob', 'UID', 'Message', 'Created', 'Admitted', 'First running', 'Finished', 'Deleted']);

// sideBySide fills a table with a column per run and a row per field; where the runs differ in
// what they ran or how it went, the row is marked.
function sideBySide(id, shown, rows) {
  const table = $(id);
  table.tHead.replaceChildren(el('tr', {}, el('th', {}, ''), ...shown.map((r, i) => el('th', {}, el('span', { class: 'swatch run-' + i }), r.metadata.name))));
  const body = el('tbody');
  for (const [label, value] of rows) {
    const values = shown.map((r) => value(r) || '');
    if (values.every((v) => !v || v === '0' || v === '0s' || v === '0.0') && !['State', 'Ran', 'GPU-hours', 'Restarts'].includes(label)) continue;
    const differs = shown.length > 1 && !ALWAYS_DIFFER.has(label) && new Set(values).size > 1;
    body.append(el('tr', { class: differs ? 'differs' : '', 'data-field': label }, el('td', {}, label), ...values.map((v) => el('td', {}, v || '-'))));
  }
  table.tBodies[0].replaceWith(body);
}

document.addEventListener('DOMContentLoaded', () => {
  $('tab-history').addEventListener('click', () => showView('history'));
  $('tab-trainjobs').addEventListener('click', () => showView('trainjobs'));
  for (const id of ['h-name', 'h-runtime', 'h-creator', 'h-labels']) $(id).addEventListener('input', filtersChanged);
  for (const id of ['h-state', 'h-since']) $(id).addEventListener('change', filtersChanged);
  $('h-prev').addEventListener('click', () => { runs.page = Math.max(0, runs.page - 1); loadRuns(); });
  $('h-next').addEventListener('click', () => {
    if (!runs.next) return;
    runs.tokens[runs.page + 1] = runs.next;
    runs.page++;
    loadRuns();
  });
  $('compare').addEventListener('click', () => showRuns([...runs.ticked.keys()]));
  $('r-close').addEventListener('click', closeRuns);
  if (location.hash === '#history') showView('history');
});
