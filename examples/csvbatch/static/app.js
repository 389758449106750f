'use strict';
// The csvbatch operator page. It talks to the control API with the bearer
// token kept in this tab's sessionStorage, uploads files straight to S3 with
// the presigned POST form, and puts every value into the page with
// textContent (or as an SVG attribute), never as HTML.
//
// Views, by the URL's fragment:
//   #/                 the overview: counts, oldest task, failures, charts
//   #/tasks?status=&type=   the tasks, by state and type
//   #/tasks/{id}       one task with every field and its actions
//   #/workers          the workers that announce themselves
//   #/periodic         the periodic tasks: when each runs next, its latest run
//
// A list of tasks has a checkbox per row for the bulk actions (POST
// /tasks/bulk): each runs first as a dry run, whose outcome a dialog
// shows, and acts only on Confirm, on the tasks that dry run found.

const TOKEN_KEY = 'csvbatch-token';
const PAGE_SIZE = 10;
const TICK_MS = 2000;
// How often each view reloads while it is shown. A state view scans up to
// STATE_MAX_SCAN records (one GET each) to fill a page, and the overview
// reads up to 1,000 (GET /stats), so they reload less often than the
// plain list and a task.
const RELOAD_MS = { tasks: 2000, filtered: 10000, task: 2000, workers: 5000, periodic: 10000, overview: 30000 };
const STATE_MAX_SCAN = 500;
// The most tasks "Retry all dead tasks of this type" acts on at once: a
// bulk call shares the API's S3 deadline, and a retry costs some 7
// requests.
const BULK_ALL_LIMIT = 50;
// The reason the page's cancels leave in the record.
const CANCEL_REASON = 'cancelled from the operator page';

const $ = (selector) => document.querySelector(selector);

// The state views: the status= value of GET /tasks, and what the page
// calls it.
const STATES = {
  created: 'waiting for input',
  queued: 'queued',
  scheduled: 'scheduled',
  running: 'running',
  retrying: 'retrying',
  dead: 'dead',
  completed: 'completed',
  abandoned: 'cancelled',
};

// What the empty list of each state view says it lacks.
const STATE_TASKS = {
  created: 'tasks waiting for input',
  queued: 'queued tasks',
  scheduled: 'scheduled tasks',
  running: 'running tasks',
  retrying: 'tasks waiting for a retry',
  dead: 'dead tasks',
  completed: 'completed tasks',
  abandoned: 'cancelled tasks',
};

// What the failure categories mean, for the overview's table.
const CATEGORIES = {
  bad_input: 'the file cannot be processed as it is; final',
  input_unavailable: 'the input was missing, replaced or too large; final',
  io: 'reading or storing failed, most likely S3; retried',
  transient: 'a plain error; retried while attempts are left',
  permanent: 'a permanent error; final',
  panic: 'the handler panicked',
  lease_expired: 'its worker stopped renewing the lease',
  shutdown: 'its worker shut down mid-attempt',
  bad_payload: 'the payload does not decode; final',
  unknown_type: 'no handler for the type; final',
  input_changed: 'the input was replaced after submit; final',
  unknown: 'no category recorded',
};

const state = {
  route: { view: 'overview' },
  cursors: [''], // the cursor of every page visited; the last one is shown
  next: '',      // next_cursor of the page shown
  loading: false,
  timer: null,
  loadedAt: 0,    // when the shown view last loaded (Date.now())
  force: false,   // reload at the next tick, whatever the view's pace
  reuploadId: '', // the created task whose "Upload file" button was clicked
  selected: new Map(), // the tasks ticked in the list shown: ID -> name
};

class APIError extends Error {
  constructor(status, code, message, data) {
    super(message);
    this.status = status;
    this.code = code;
    this.data = data; // the whole answer, which may say more than the error
  }
}

function token() {
  return sessionStorage.getItem(TOKEN_KEY) || '';
}

// api calls the control API and returns the decoded JSON, or throws an
// APIError carrying the server's error code and message.
async function api(method, path, body) {
  const headers = { Accept: 'application/json' };
  if (token()) headers.Authorization = 'Bearer ' + token();
  const init = { method, headers };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const resp = await fetch(path, init);
  let data = null;
  try {
    data = await resp.json();
  } catch (_) {
    // not JSON; the status says enough
  }
  if (!resp.ok) {
    const e = (data && data.error) || {};
    if (resp.status === 401) {
      // The API's own words name headers; say what to do instead.
      showLogin(token() ? 'That token was not accepted. Check it and try again.' : 'Enter the access token to sign in.');
    }
    throw new APIError(resp.status, e.code || 'http_' + resp.status, e.message || resp.statusText, data);
  }
  return data;
}

// el makes an element with the given properties (a "dataset" property
// fills data-* attributes) and children (strings become text nodes).
function el(tag, props, ...children) {
  const node = document.createElement(tag);
  const { dataset, ...rest } = props || {};
  Object.assign(node, rest);
  Object.assign(node.dataset, dataset || {});
  for (const c of children) {
    if (c !== null && c !== undefined) node.append(c);
  }
  return node;
}

const SVG_NS = 'http://www.w3.org/2000/svg';

// svg makes an SVG element with the given attributes and children.
function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  for (const c of children) {
    if (c !== null && c !== undefined) node.append(c);
  }
  return node;
}

// taskLink links to a task's detail view.
function taskLink(id, text) {
  return el('a', { href: '#/tasks/' + encodeURIComponent(id), className: 'task-link', textContent: text || id });
}

// cell is a table cell with the label a phone shows above its value.
function cell(label, props, ...children) {
  return el('td', { ...props, dataset: { ...(props && props.dataset), label } }, ...children);
}

function showError(selector, text) {
  const p = $(selector);
  p.textContent = text || '';
  p.hidden = !text;
}

// ---- sign-in and the views ----

function showLogin(message) {
  clearInterval(state.timer);
  state.timer = null;
  sessionStorage.removeItem(TOKEN_KEY);
  $('#main').hidden = true;
  $('#nav').hidden = true;
  $('#forget').hidden = true;
  $('#login').hidden = false;
  $('#login-error').textContent = message || '';
  $('#token').focus();
}

function showMain() {
  $('#login').hidden = true;
  $('#main').hidden = false;
  $('#nav').hidden = false;
  $('#forget').hidden = !token();
  if (!state.timer) state.timer = setInterval(tick, TICK_MS);
  route();
}

// parseRoute reads the view from the URL's fragment.
function parseRoute() {
  const [path, query] = (location.hash.replace(/^#/, '') || '/').split('?');
  const params = new URLSearchParams(query || '');
  if (path === '/tasks') {
    const status = params.get('status') || '';
    return { view: 'tasks', status: status in STATES ? status : '', type: params.get('type') || '' };
  }
  const m = path.match(/^\/tasks\/([^/]+)$/);
  if (m) {
    let id = m[1];
    try {
      id = decodeURIComponent(id);
    } catch (_) {
      // shown as it is; the API refuses it
    }
    return { view: 'task', id };
  }
  if (path === '/workers') return { view: 'workers' };
  if (path === '/periodic') return { view: 'periodic' };
  return { view: 'overview' };
}

// route shows the view the fragment names and loads it.
function route() {
  const prev = state.route;
  const r = parseRoute();
  state.route = r;
  if (r.view !== 'tasks' || prev.view !== 'tasks' || prev.status !== r.status || prev.type !== r.type) {
    state.cursors = [''];
    state.next = '';
    state.selected.clear();
  }
  for (const v of ['overview', 'tasks', 'task', 'workers', 'periodic']) {
    $('#' + v + '-view').hidden = v !== r.view;
  }
  for (const a of document.querySelectorAll('#nav a')) {
    const current = a.dataset.view === r.view || (a.dataset.view === 'tasks' && r.view === 'task');
    if (current) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  if (r.view === 'tasks') showTaskFilters(r);
  $('#create').hidden = r.view !== 'tasks' || r.status !== '' || r.type !== ''; // on All only
  if (r.view === 'task' && prev.view === 'task' && prev.id !== r.id) $('#detail').replaceChildren();
  if (r.view !== prev.view || r.view === 'task') {
    showError('#detail-error', '');
    $('#detail-status').textContent = '';
  }
  reload();
}

// reload loads the shown view now.
function reload() {
  state.force = true;
  tick();
}

// tick reloads the shown view when its pace says so.
async function tick() {
  if (state.loading || $('#main').hidden) return;
  const r = state.route;
  const pace = r.view === 'tasks' && (r.status || r.type) ? RELOAD_MS.filtered : RELOAD_MS[r.view];
  if (!state.force && Date.now() - state.loadedAt < pace) return;
  state.force = false;
  state.loading = true;
  try {
    if (r.view === 'overview') await loadOverview();
    else if (r.view === 'tasks') await loadTasks(r);
    else if (r.view === 'task') await loadTask(r.id);
    else if (r.view === 'workers') await loadWorkers();
    else if (r.view === 'periodic') await loadPeriodics();
  } finally {
    state.loadedAt = Date.now();
    state.loading = false;
    // What was loaded last, and how many loads so far: something to wait
    // for, for a test that changes the view.
    document.body.dataset.loaded = r.view;
    document.body.dataset.loads = String(Number(document.body.dataset.loads || 0) + 1);
  }
  if (state.force) tick(); // the route changed while it loaded
}

// ---- the overview ----

async function loadOverview() {
  let st, paused;
  try {
    [st, paused] = await Promise.all([
      api('GET', '/stats?span=' + encodeURIComponent($('#span').value)),
      api('GET', '/paused'),
    ]);
  } catch (e) {
    if (e.status !== 401) showError('#stats-error', 'Could not load the overview: ' + e.message);
    return;
  }
  showError('#stats-error', '');
  renderOverview(st, paused);
}

// onPauseAction pauses or resumes the type of the button clicked in the
// overview's table of types, after a confirmation for a pause.
async function onPauseAction(ev) {
  const target = ev.target.closest('button[data-action]');
  if (!target) return;
  const typ = target.dataset.type;
  const pause = target.dataset.action === 'pause-type';
  const name = typ || '(no type)';
  if (pause && !window.confirm('Pause ' + name + '? Workers stop claiming its tasks; running attempts finish.')) return;
  target.disabled = true;
  try {
    await api('POST', '/paused', { type: typ, paused: pause });
    showError('#pause-error', '');
  } catch (e) {
    showError('#pause-error', 'Could not ' + (pause ? 'pause ' : 'resume ') + name + ': ' + e.message);
  }
  reload();
}

// SPANS says what each span of GET /stats covers.
const SPANS = { '1h': 'the last hour', '24h': 'the last 24 hours', '7d': 'the last 7 days', '30d': 'the last 30 days' };

function renderOverview(st, paused) {
  let scope = st.tasks + ' task' + (st.tasks === 1 ? '' : 's') + ' created in ' + (SPANS[st.span] || st.span) +
    ', as of ' + new Date(st.read_at).toLocaleTimeString() + '; ' + st.unfinished + ' unfinished.';
  if (st.truncated) scope += ' Only the newest ' + st.max_tasks + ' were read: the counts cover them alone.';
  if (st.broken > 0) scope += ' ' + st.broken + ' record' + (st.broken === 1 ? '' : 's') + ' could not be read.';
  $('#stats-scope').textContent = scope;

  const counts = {
    created: st.by_status.created, queued: st.by_status.queued, scheduled: st.scheduled, running: st.by_status.running,
    retrying: st.waiting_retry, dead: st.dead, completed: st.by_status.completed, abandoned: st.by_status.abandoned,
  };
  $('#state-counts').replaceChildren(...Object.entries(counts).map(([s, n]) => el('a', {
    className: 'count-card state-' + s, href: '#/tasks?status=' + s, dataset: { state: s },
  }, el('span', { className: 'count', textContent: String(n) }), el('span', { className: 'label', textContent: STATES[s] }))));

  // The oldest waiting task counts from when it fell due, the oldest
  // unfinished one from its creation: a task scheduled for tomorrow is
  // unfinished but waits for no worker.
  const w = st.oldest_waiting;
  $('#oldest-waiting').replaceChildren(...(w ? [
    taskLink(w.task_id, w.task_name || w.task_id),
    el('span', { className: 'counts', textContent: w.status + (w.task_type ? ', ' + w.task_type : '') +
      '; due ' + duration(st.oldest_waiting_age_seconds) + ' ago' }),
  ] : ['Nothing is waiting for a worker.']));
  const o = st.oldest_unfinished;
  $('#oldest').replaceChildren(...(o ? [
    taskLink(o.task_id, o.task_name || o.task_id),
    el('span', { className: 'counts', textContent: o.status + (o.task_type ? ', ' + o.task_type : '') +
      '; created ' + duration(st.oldest_unfinished_age_seconds) + ' ago' }),
  ] : ['Nothing is unfinished.']));

  const failures = Object.entries(st.failures).sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));
  $('#failure-rows').replaceChildren(...failures.map(([cat, n]) => el('tr', { dataset: { category: cat } },
    el('td', {}, el('span', { className: 'category', textContent: cat }),
      CATEGORIES[cat] ? el('span', { className: 'counts', textContent: CATEGORIES[cat] }) : null),
    el('td', { className: 'num', textContent: String(n) }))));
  $('#failures').hidden = failures.length === 0;
  $('#no-failures').hidden = failures.length > 0;

  const per = st.interval_seconds >= 86400 ? 'day' : st.interval_seconds >= 3600 ? 'hour' : duration(st.interval_seconds);
  drawChart($('#chart-completed'), st, 'completed', 'Completed', per);
  drawChart($('#chart-failed'), st, 'failed', 'Failed for good', per);

  // Every type with tasks in the span, every type the service runs, and
  // every type paused, so that a paused type can always be resumed here.
  // The API pauses only the types this service runs (any paused type may
  // be resumed), so only those rows offer a Pause.
  const isPaused = new Set(paused.paused);
  const served = new Set(paused.types);
  const types = [...new Set([...Object.keys(st.by_type), ...paused.types, ...paused.paused])].sort();
  const none = Object.fromEntries(Object.keys(st.by_status).map((s) => [s, 0]));
  $('#type-rows').replaceChildren(...types.map((typ) => {
    const c = st.by_type[typ] || none;
    const on = isPaused.has(typ);
    const link = (s, label) => el('a', {
      href: '#/tasks?status=' + s + '&type=' + encodeURIComponent(typ), textContent: String(c[s]), title: label,
    });
    return el('tr', { dataset: { type: typ } },
      cell('Type', { className: 'type-name', textContent: typ || '(no type)' }),
      cell('Waiting for input', { className: 'num' }, link('created', 'waiting for input')),
      cell('Queued', { className: 'num' }, link('queued', 'queued')),
      cell('Running', { className: 'num' }, link('running', 'running')),
      cell('Failed', { className: 'num' }, link('failed', 'failed')),
      cell('Completed', { className: 'num' }, link('completed', 'completed')),
      cell('Cancelled', { className: 'num' }, link('abandoned', 'cancelled')),
      cell('Unfinished', { className: 'num', textContent: String(st.unfinished_by_type[typ] || 0) }),
      cell('Longest wait', { className: 'num', textContent: typ in st.wait_by_type ? duration(st.wait_by_type[typ]) : '—' }),
      cell('Workers', { className: 'pause-cell' },
        el('span', { className: on ? 'paused-badge' : 'claiming', textContent: on ? 'paused' : (served.has(typ) ? 'claiming' : 'not run here') }), ' ',
        on || served.has(typ) ? el('button', {
          type: 'button', className: on ? '' : 'danger',
          dataset: { action: on ? 'resume-type' : 'pause-type', type: typ },
          textContent: on ? 'Resume' : 'Pause',
        }) : null));
  }));
  $('#types').hidden = types.length === 0;
}

// drawChart draws one series of the timeline (st.timeline[].key) as bars
// in an SVG the page builds itself, with its caption and time axis in
// HTML, so that text keeps its size when the plot stretches.
function drawChart(fig, st, key, title, per) {
  const buckets = st.timeline;
  const values = buckets.map((b) => b[key]);
  const total = values.reduce((a, b) => a + b, 0);
  const top = niceMax(Math.max(0, ...values));
  fig.querySelector('figcaption').replaceChildren(
    el('strong', { textContent: title }),
    ' ' + total + ' in the span; scale up to ' + top + ' per ' + per);

  const W = 600, H = 150;
  const step = W / Math.max(buckets.length, 1);
  const gap = Math.min(3, step * 0.2);
  const plot = svg('svg', {
    viewBox: '0 0 ' + W + ' ' + H, preserveAspectRatio: 'none', role: 'img', class: 'bars bars-' + key,
    'aria-label': title + ': ' + total + ' in ' + buckets.length + ' intervals',
  });
  for (const y of [0, H / 2]) {
    plot.append(svg('line', { x1: 0, x2: W, y1: y + 0.5, y2: y + 0.5, class: 'grid', 'vector-effect': 'non-scaling-stroke' }));
  }
  buckets.forEach((b, i) => {
    const h = top > 0 ? (b[key] / top) * (H - 4) : 0;
    plot.append(svg('rect', {
      x: i * step + gap / 2, y: H - h, width: Math.max(step - gap, 1), height: h, class: 'bar', 'data-value': b[key],
    }, svg('title', {}, bucketLabel(b.start, st.interval_seconds) + ': ' + b[key] + ' ' + title.toLowerCase())));
  });
  plot.append(svg('line', { x1: 0, x2: W, y1: H - 0.5, y2: H - 0.5, class: 'baseline', 'vector-effect': 'non-scaling-stroke' }));
  fig.querySelector('.plot').replaceChildren(plot);

  const ticks = buckets.length > 0 ? [0, Math.floor((buckets.length - 1) / 2), buckets.length - 1] : [];
  fig.querySelector('.axis').replaceChildren(...[...new Set(ticks)].map((i) =>
    el('span', { textContent: bucketLabel(buckets[i].start, st.interval_seconds) })));
}

// niceMax rounds a chart's largest value up to 1, 2 or 5 times a power of
// ten, so that the scale reads easily; at least 1.
function niceMax(n) {
  if (n <= 1) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(n)));
  for (const m of [1, 2, 5, 10]) {
    if (n <= m * p) return m * p;
  }
  return 10 * p;
}

// bucketLabel names a bucket by its start: a time of day, or a date for
// buckets of a day (UTC days, as the API cuts them).
function bucketLabel(start, intervalSeconds) {
  const d = new Date(start);
  if (intervalSeconds >= 86400) return d.toLocaleDateString([], { month: 'short', day: 'numeric', timeZone: 'UTC' });
  return d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
}

// ---- the tasks, by state ----

function showTaskFilters(r) {
  $('#type-filter').value = r.type;
  for (const a of document.querySelectorAll('#state-tabs a')) {
    const params = new URLSearchParams();
    if (a.dataset.state) params.set('status', a.dataset.state);
    if (r.type) params.set('type', r.type);
    const q = params.toString();
    a.href = '#/tasks' + (q ? '?' + q : '');
    if (a.dataset.state === r.status) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  const hints = {
    scheduled: 'Queued to start at a time still to come. "Run now" makes one due at once.',
    retrying: 'Failed, with a retry due at the time shown.',
    dead: 'Failed for good: no retry left or wanted. Retry runs one again, where it can help.',
    running: 'Held by a worker. A task whose worker stopped reporting is flagged, and taken over at the time shown.',
    created: 'Created, waiting for their file to be uploaded and submitted.',
    queued: 'Waiting for a worker, or for the time they are scheduled for.',
  };
  $('#state-hint').textContent = hints[r.status] || '';
  const all = $('#bulk-retry-all');
  all.hidden = !(r.status === 'dead' && r.type);
  all.textContent = 'Retry all dead ' + r.type + ' tasks';
}

async function loadTasks(r) {
  const cursor = state.cursors[state.cursors.length - 1];
  const params = new URLSearchParams({ limit: String(PAGE_SIZE) });
  if (r.status) params.set('status', r.status);
  if (r.type) params.set('type', r.type);
  if (r.status || r.type) params.set('max_scan', String(STATE_MAX_SCAN));
  if (cursor) params.set('cursor', cursor);
  let page;
  try {
    page = await api('GET', '/tasks?' + params.toString());
  } catch (e) {
    if (e.status !== 401) showError('#list-error', 'Could not load tasks: ' + e.message);
    return;
  }
  if (state.route !== r) return; // the view changed meanwhile
  showError('#list-error', '');
  renderTasks(page, r);
}

function renderTasks(page, r) {
  state.next = page.next_cursor || '';
  const rows = page.tasks.map(taskRow);
  for (const b of page.broken || []) {
    rows.push(el('tr', { className: 'broken' },
      el('td', { colSpan: 8, className: 'error-text', textContent: 'Unreadable record ' + b.key + ': ' + b.error })));
  }
  // A ticked task that left the page (it changed state, or the page
  // moved) is no longer selected: the count shows what the buttons act on.
  const shown = new Set(page.tasks.map((t) => t.task_id));
  for (const id of [...state.selected.keys()]) {
    if (!shown.has(id)) state.selected.delete(id);
  }
  $('#rows').replaceChildren(...rows);
  updateBulkBar();
  // A later page can come back empty: the listing may offer a cursor
  // although no older task follows.
  const what = (r.status ? STATE_TASKS[r.status] : 'tasks') + (r.type ? ' of type ' + r.type : '');
  $('#empty').textContent = state.cursors.length > 1 ? 'No older ' + what + '.' : 'No ' + what + (r.status || r.type ? '.' : ' yet.');
  $('#empty').hidden = rows.length > 0;
  $('#scan-note').textContent = page.scan_limited
    ? 'This page stopped after looking through ' + page.scanned + ' tasks; "Older" looks further.' : '';
  $('#scan-note').hidden = !page.scan_limited;
  $('#newer').disabled = state.cursors.length === 1;
  $('#older').disabled = !state.next;
  $('#page-number').textContent = 'Page ' + state.cursors.length;
}

function taskRow(t) {
  const select = el('td', { className: 'select-cell' }, el('label', { className: 'check' },
    el('input', {
      type: 'checkbox', className: 'row-select', checked: state.selected.has(t.task_id),
      title: 'Select this task for a bulk action', dataset: { id: t.task_id, name: t.task_name || t.task_id },
    }),
    el('span', { className: 'check-text', textContent: 'Select' })));

  const created = cell('Created', {},
    new Date(t.created_at).toLocaleString(),
    el('span', { className: 'id', textContent: t.task_id }));

  const name = cell('Name', { className: 'name-cell' }, taskLink(t.task_id, t.task_name || '(no name)'),
    t.created_by ? el('span', { className: 'counts', textContent: 'by ' + t.created_by }) : null);

  return el('tr', { className: 'task', dataset: { id: t.task_id, status: t.status } },
    select, created, name, cell('Type', { textContent: t.task_type || '' }), statusCell(t), progressCell(t),
    t.status === 'abandoned'
      ? cell('Cancelled', { className: 'hint', textContent: 'cancelled' + (t.cancel_reason ? ': ' + t.cancel_reason : '') })
      : cell('Last error', { className: 'error-text', textContent: t.last_error || '' }),
    cell('Actions', { className: 'actions' }, ...actions(t)));
}

// statusCell shows a task's status with what an operator needs beside
// it: attempts, a start or retry ahead, a failure's finality and
// category, a silent worker.
function statusCell(t) {
  const td = cell('Status', { className: 'status-cell' },
    el('span', { className: 'status status-' + t.status, textContent: t.status }));
  for (const note of statusNotes(t)) td.append(note);
  return td;
}

function statusNotes(t) {
  const notes = [];
  if (t.attempt_id > 0) {
    notes.push(el('span', { className: 'counts', textContent: 'attempt ' + t.attempt_id + ' of ' + t.max_attempts }));
  }
  if (t.status === 'queued' && isScheduled(t)) {
    notes.push(el('span', { className: 'counts scheduled', textContent: 'scheduled for ' + new Date(t.run_at).toLocaleString() }));
  }
  if (t.status === 'failed') {
    notes.push(el('span', { className: 'counts failure' },
      t.terminal ? el('span', { className: 'final', textContent: 'final' })
        : el('span', { className: 'retry-at', textContent: 'retry at ' + new Date(t.retry_at).toLocaleTimeString() }),
      t.error_category ? el('span', { className: 'category', textContent: t.error_category }) : null));
  }
  if (t.status === 'running' && t.report_overdue) {
    notes.push(el('span', { className: 'counts overdue', textContent: overdueText(t) }));
  }
  if (t.status === 'failed' && t.retry_note) {
    notes.push(el('span', { className: 'counts retry-note', textContent: t.retry_note }));
  }
  return notes;
}

// isScheduled says a queued task waits for a run_at still to come, by
// this browser's clock.
function isScheduled(t) {
  return t.status === 'queued' && t.run_at && new Date(t.run_at) > new Date();
}

// overdueText says how long a running task's worker has not reported
// (counted by the server, whose clock the record's times follow) and when
// another worker takes the task over if it stays silent; once that time
// is past (lease_lapsed, judged by the server), that no worker has yet,
// never a recovery time already gone.
function overdueText(t) {
  let text = 'no report for ' + duration(t.silent_seconds || 0);
  if (t.recovers_at) {
    const at = new Date(t.recovers_at).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
    if (t.lease_lapsed) {
      text += '; its lease ran out at ' + at + ' and no worker has taken it over: a running worker of its type does at its next poll (see Workers)';
    } else {
      text += '; recovered at ' + at + ' if it stays silent';
    }
  }
  return text;
}

// duration formats a number of seconds briefly: "45 s", "3 m", "2 h 5 m",
// "3 d 4 h".
function duration(seconds) {
  seconds = Math.max(0, Math.floor(seconds));
  if (seconds < 60) return seconds + ' s';
  const m = Math.floor(seconds / 60);
  if (m < 60) return m + ' m';
  const h = Math.floor(m / 60);
  if (h < 48) return h + ' h ' + (m % 60) + ' m';
  return Math.floor(h / 24) + ' d ' + (h % 24) + ' h';
}

function progressCell(t) {
  const td = cell('Progress', { className: 'progress-cell' });
  const started = t.attempt_id > 0;
  if (!started) {
    td.textContent = t.status === 'queued' ? 'waiting for a worker' : '';
    return td;
  }
  const bar = el('progress', {});
  if (t.row_count > 0) {
    bar.max = t.row_count;
    bar.value = t.status === 'completed' ? t.row_count : Math.min(t.processed_count, t.row_count);
  } else if (t.status === 'completed') {
    bar.max = 1;
    bar.value = 1;
  } else if (t.status !== 'running') {
    bar.max = 1;
    bar.value = 0;
  } // else: running with no estimate yet: an indeterminate bar
  td.append(bar, el('span', { className: 'counts', textContent: progressText(t) }));
  return td;
}

function progressText(t) {
  const total = t.row_count > 0 ? (t.status === 'running' ? '~' : '') + t.row_count : '?';
  return t.processed_count + ' / ' + total + ' rows, ' + t.success_count + ' ok, ' + t.error_count + ' bad';
}

// actions returns the buttons and links of what can be done to t now.
function actions(t) {
  const out = [];
  const button = (label, action, cls, extra) => el('button', {
    type: 'button', className: cls, textContent: label, ...extra,
    dataset: { action, id: t.task_id, name: t.task_name || t.task_id },
  });
  if (t.upload_reissuable) {
    out.push(button('Upload file', 'upload', 'secondary',
      { title: 'Upload this task\'s file with a fresh upload link, then submit it' }));
  }
  if (isScheduled(t)) {
    out.push(button('Run now', 'run-now', 'secondary', { title: 'Start it as soon as a worker is free' }));
  }
  if (t.retryable) {
    out.push(button(t.terminal ? 'Retry' : 'Retry now', 'retry', 'secondary'));
  }
  if (t.cancelable) out.push(button('Cancel', 'cancel', 'danger'));
  if (t.status === 'completed') {
    out.push(el('a', {
      className: 'download', textContent: 'Download',
      href: '/tasks/' + encodeURIComponent(t.task_id) + '/output',
      dataset: { id: t.task_id },
    }));
  }
  return out;
}

// onAction runs the action of a button or download link of a task, in
// the list or the detail view.
async function onAction(ev) {
  const target = ev.target.closest('[data-action], a.download');
  if (!target) return;
  ev.preventDefault();
  const id = encodeURIComponent(target.dataset.id);
  const errorAt = state.route.view === 'task' ? '#detail-error' : '#list-error';
  try {
    if (target.matches('a.download')) {
      const out = await api('GET', '/tasks/' + id + '/output');
      window.location.assign(out.url); // S3 answers with Content-Disposition: attachment
      return;
    }
    switch (target.dataset.action) {
      case 'cancel':
        if (!window.confirm('Cancel task "' + target.dataset.name + '"?')) return;
        await api('POST', '/tasks/' + id + '/cancel', { reason: CANCEL_REASON });
        break;
      case 'retry':
        await api('POST', '/tasks/' + id + '/retry');
        break;
      case 'run-now':
        await api('POST', '/tasks/' + id + '/schedule');
        break;
      case 'upload':
        state.reuploadId = target.dataset.id;
        $('#reupload-file').value = '';
        $('#reupload-file').click(); // its change event goes on in onReupload
        return;
      default:
        return;
    }
    showError(errorAt, '');
  } catch (e) {
    showError(errorAt, e.message);
  }
  reload();
}

// ---- bulk actions ----

// What the page says of each bulk action.
const BULK_WORDS = {
  retry: { verb: 'Retry', would: 'would be retried', did: 'retried', confirm: (n) => 'Retry ' + plural(n, 'task') },
  cancel: { verb: 'Cancel', would: 'would be cancelled', did: 'cancelled', confirm: (n) => 'Cancel ' + plural(n, 'task') },
  purge: {
    verb: 'Purge', would: 'would be deleted for good', did: 'deleted for good',
    confirm: (n) => 'Delete ' + plural(n, 'task') + ' for good',
  },
};

// The bulk action the dialog shows: its action, its dry run's answer and
// the tasks that found (which Confirm acts on), the names the page knows
// them by, and a number that tells a stale answer from the current one.
const bulk = { action: '', dry: null, ids: [], names: new Map(), seq: 0 };

function plural(n, word) {
  return n + ' ' + word + (n === 1 ? '' : 's');
}

// updateBulkBar shows how many tasks are ticked, and enables the buttons
// that act on them.
function updateBulkBar() {
  const n = state.selected.size;
  $('#bulk-count').textContent = n === 0 ? 'none selected' : n + ' selected';
  for (const b of ['#bulk-retry', '#bulk-cancel', '#bulk-purge']) $(b).disabled = n === 0;
  const boxes = [...document.querySelectorAll('#rows .row-select')];
  const ticked = boxes.filter((b) => b.checked).length;
  const all = $('#select-page');
  all.disabled = boxes.length === 0;
  all.checked = boxes.length > 0 && ticked === boxes.length;
  all.indeterminate = ticked > 0 && ticked < boxes.length;
}

function onSelect(ev) {
  const box = ev.target.closest('.row-select');
  if (!box) return;
  if (box.checked) state.selected.set(box.dataset.id, box.dataset.name);
  else state.selected.delete(box.dataset.id);
  updateBulkBar();
}

function onSelectPage() {
  const on = $('#select-page').checked;
  for (const box of document.querySelectorAll('#rows .row-select')) {
    box.checked = on;
    if (on) state.selected.set(box.dataset.id, box.dataset.name);
    else state.selected.delete(box.dataset.id);
  }
  updateBulkBar();
}

// startBulk opens the dialog for action over selection ({ids} or
// {filter, limit}), described as what, and runs it as a dry run: the
// dialog then says what would be done, and Confirm does it.
async function startBulk(action, selection, what) {
  const words = BULK_WORDS[action];
  const seq = ++bulk.seq;
  bulk.action = action;
  bulk.dry = null;
  bulk.ids = [];
  bulk.names = new Map(state.selected);
  const dialog = $('#bulk-dialog');
  dialog.dataset.phase = 'checking';
  dialog.dataset.action = action;
  $('#bulk-title').textContent = words.verb + ' ' + what + '?';
  $('#bulk-summary').textContent = 'Checking what would be done (a dry run: nothing changes yet)...';
  $('#bulk-warning').hidden = action !== 'purge';
  showError('#bulk-error', '');
  $('#bulk-results').replaceChildren();
  const confirm = $('#bulk-confirm');
  confirm.hidden = false;
  confirm.disabled = true;
  confirm.className = action === 'retry' ? '' : 'danger';
  confirm.textContent = words.verb;
  $('#bulk-close').textContent = 'Go back';
  if (!dialog.open) dialog.showModal();

  const body = { action, dry_run: true, ...selection };
  if (action === 'cancel') body.reason = CANCEL_REASON;
  let rep;
  try {
    rep = await api('POST', '/tasks/bulk', body);
  } catch (e) {
    if (seq !== bulk.seq) return;
    $('#bulk-summary').textContent = '';
    showError('#bulk-error', 'Could not check what would be done: ' + e.message);
    dialog.dataset.phase = 'error';
    return;
  }
  if (seq !== bulk.seq) return;
  bulk.dry = rep;
  bulk.ids = rep.results.filter((r) => r.outcome === 'would_do').map((r) => r.task_id);
  let summary = bulkSummary(rep, words.would);
  if (rep.next_cursor) {
    summary += rep.scan_limited
      ? ' The check stopped after looking through ' + rep.scanned + ' tasks; more may follow: run it again once these are done.'
      : ' These are the first ' + bulk.ids.length + ' found; more may follow: run it again once these are done.';
  }
  $('#bulk-summary').textContent = summary;
  renderBulkResults(rep, words.would);
  confirm.disabled = bulk.ids.length === 0;
  confirm.textContent = bulk.ids.length > 0 ? words.confirm(bulk.ids.length) : 'Nothing to do';
  dialog.dataset.phase = 'confirm';
  dialog.dataset.count = String(bulk.ids.length);
}

// confirmBulk acts on the tasks the dry run found, by ID, and shows what
// was done with each.
async function confirmBulk() {
  const words = BULK_WORDS[bulk.action];
  if (!words || bulk.ids.length === 0) return;
  const seq = ++bulk.seq;
  const dialog = $('#bulk-dialog');
  dialog.dataset.phase = 'working';
  $('#bulk-confirm').disabled = true;
  $('#bulk-close').disabled = true; // the answer says what was done: wait for it
  $('#bulk-summary').textContent = 'Working on ' + plural(bulk.ids.length, 'task') + '...';
  const body = { action: bulk.action, ids: bulk.ids, limit: bulk.ids.length };
  if (bulk.action === 'cancel') body.reason = CANCEL_REASON;
  let rep = null;
  try {
    rep = await api('POST', '/tasks/bulk', body);
  } catch (e) {
    // A call cut short still says what it did.
    if (e.data && Array.isArray(e.data.results)) rep = e.data;
    showError('#bulk-error', (rep ? 'Stopped part way: ' : 'Failed: ') + e.message);
  }
  if (seq !== bulk.seq) return;
  if (rep) {
    const outcome = withDryRun(bulk.dry, rep);
    $('#bulk-summary').textContent = bulkSummary(outcome, words.did);
    renderBulkResults(outcome, words.did);
  } else {
    $('#bulk-summary').textContent = '';
  }
  $('#bulk-confirm').hidden = true;
  $('#bulk-close').disabled = false;
  $('#bulk-close').textContent = 'Close';
  dialog.dataset.phase = 'done';
  state.selected.clear();
  reload();
}

// withDryRun is the outcome of a run over the whole selection its dry run
// judged, in the dry run's order: what the run did with each task it
// acted on, what the dry run said of the others (skipped or failed), and
// "not_reached" for a task a run cut short never came to.
function withDryRun(dry, run) {
  const done = new Map(run.results.map((r) => [r.task_id, r]));
  const results = dry.results.map((r) => {
    if (r.outcome !== 'would_do') return r;
    return done.get(r.task_id) || { ...r, outcome: 'not_reached', reason: 'the action stopped before it came to this task' };
  });
  const count = (o) => results.filter((r) => r.outcome === o).length;
  return { results, acted: count('done'), skipped: count('skipped'), failed: count('failed'), not_reached: count('not_reached') };
}

// bulkSummary counts a bulk answer in words: "3 tasks would be retried,
// 1 skipped."
function bulkSummary(rep, verb) {
  let text = plural(rep.acted, 'task') + ' ' + verb;
  if (rep.skipped) text += ', ' + rep.skipped + ' skipped';
  if (rep.failed) text += ', ' + rep.failed + ' failed';
  if (rep.not_reached) text += ', ' + rep.not_reached + ' not reached';
  return text + '.';
}

// renderBulkResults lists what a bulk answer did, or would do, with each
// task.
function renderBulkResults(rep, verb) {
  $('#bulk-results').replaceChildren(...rep.results.map((r) => {
    let what = verb;
    if (r.outcome === 'skipped') what = 'skipped: ' + (r.reason || r.code);
    if (r.outcome === 'failed') what = 'failed: ' + (r.reason || r.code);
    if (r.outcome === 'not_reached') what = 'not done: ' + r.reason;
    const name = r.task_name || bulk.names.get(r.task_id) || '';
    return el('li', { dataset: { id: r.task_id, outcome: r.outcome } },
      name ? el('strong', { textContent: name }) : null,
      el('span', { className: 'id', textContent: r.task_id }),
      el('span', { className: 'outcome-text', textContent: what }));
  }));
}

function onBulkButton(action) {
  const ids = [...state.selected.keys()];
  if (ids.length === 0) return;
  startBulk(action, { ids }, plural(ids.length, 'selected task'));
}

// ---- one task ----

async function loadTask(id) {
  let t;
  try {
    t = await api('GET', '/tasks/' + encodeURIComponent(id));
  } catch (e) {
    if (e.status === 401 || state.route.id !== id) return;
    showError('#detail-error', e.status === 404 ? 'There is no task ' + id + '.' : 'Could not load the task: ' + e.message);
    $('#detail').replaceChildren();
    return;
  }
  if (state.route.id !== id) return;
  showError('#detail-error', '');
  renderDetail(t);
}

// renderDetail shows every field of a task an operator needs, in groups,
// with its actions above them. Each group is a block of its own: more
// (such as the task's attempts) go below as further blocks.
function renderDetail(t) {
  const time = (v) => (v ? new Date(v).toLocaleString() : null);
  const groups = [
    ['Task', [
      ['ID', el('span', { className: 'mono', textContent: t.task_id })],
      ['Name', t.task_name || '(no name)'],
      ['Type', t.task_type || '(no type)'],
      ['Status', [...statusCell(t).childNodes].filter((n) => !n.classList.contains('retry-note'))], // the note is below
      ['Created by', t.created_by],
      ['Idempotency key', t.idempotency_key],
      ['Payload', t.payload !== undefined ? el('pre', { textContent: JSON.stringify(t.payload, null, 2) }) : null],
    ]],
    ['Attempts', [
      ['Attempts used', t.attempt_id > 0 ? (t.attempt_id - (t.released_attempts || 0)) + ' of ' + t.max_attempts : 'none yet, of ' + t.max_attempts],
      ['Given back at shutdown', t.released_attempts ? String(t.released_attempts) : null],
      ['Worker', t.worker_id ? el('a', { href: '#/workers', className: 'mono', textContent: t.worker_id }) : null],
      ['Lease expires', t.status === 'running' ? time(t.lease_expires_at) : null],
      ['Last report', t.last_report_at ? time(t.last_report_at) + ' (' + duration(t.silent_seconds || 0) + ' ago)' +
        (t.report_overdue ? ': overdue, the worker may have died' : '') : null],
      ['Taken over at', !t.recovers_at ? null : t.lease_lapsed
        ? 'from ' + time(t.recovers_at) + ' on, by any running worker of its type at its next poll; none has yet (see Workers)'
        : time(t.recovers_at) + ', if its worker stays silent'],
    ]],
    ['Times', [
      ['Created', time(t.created_at)],
      ['Submitted', time(t.submitted_at)],
      ['Runs no earlier than', time(t.run_at)],
      ['Latest attempt started', time(t.started_at)],
      ['Retry at', t.status === 'failed' ? time(t.retry_at) : null],
      ['Next due', !t.terminal ? time(t.due_at) : null],
      ['Last written', time(t.updated_at)],
    ]],
    ['Failure', [
      ['Last error', t.last_error ? el('pre', { className: 'error-text', textContent: t.last_error }) : null],
      ['Category', t.error_category ? el('span', { className: 'category', textContent: t.error_category }) : null],
      ['Final', t.status === 'failed' ? (t.terminal ? 'yes: no retry is due' : 'no: a retry is due at ' + time(t.retry_at)) : null],
      ['Retry', t.status === 'failed' && t.retry_note ? t.retry_note : null],
      ['Cancel reason', t.cancel_reason],
    ]],
    ['Input and output', [
      ['Input', t.input_object_path ? el('span', { className: 'mono', textContent: t.input_object_path }) : null],
      ['Input size', t.input_size ? bytes(t.input_size) : null],
      ['Output', t.output_object_path ? el('span', { className: 'mono', textContent: t.output_object_path }) : null],
    ]],
    ['Progress', [
      ['Rows', t.attempt_id > 0 ? progressText(t) : null],
      ...Object.entries(t.counters || {}).sort().map(([k, v]) => [k, String(v)]),
    ]],
    ['Metadata', Object.entries(t.metadata || {}).sort().map(([k, v]) => [k, v])],
    ['Record', [
      ['Revision', t.revision ? el('span', { className: 'mono', textContent: t.revision }) : null],
      ['Schema version', String(t.schema_version)],
    ]],
  ];
  const blocks = [
    el('h2', { className: 'detail-title', textContent: t.task_name || t.task_id }),
    el('div', { className: 'actions detail-actions' }, ...actions(t)),
  ];
  for (const [title, fields] of groups) {
    const shown = fields.filter(([, v]) => v !== null && v !== undefined && v !== '');
    if (shown.length === 0) continue;
    blocks.push(el('div', { className: 'detail-group', dataset: { group: title } },
      el('h3', { textContent: title }),
      el('dl', {}, ...shown.flatMap(([k, v]) => [
        el('dt', { textContent: k }),
        el('dd', {}, ...(Array.isArray(v) ? v : [v])),
      ]))));
  }
  const history = historyBlock(t.attempt_history || []);
  if (history) blocks.push(history);
  $('#detail').replaceChildren(...blocks);
  $('#detail').dataset.id = t.task_id;
  $('#detail').dataset.status = t.status;
}

// historyBlock lists the task's latest attempts, newest first, from the
// record's attempt_history: who ran each, when, for how long, how it ended
// and why; null for a task never claimed.
function historyBlock(attempts) {
  if (attempts.length === 0) return null;
  const items = [...attempts].reverse().map((a) => {
    const start = a.started_at ? new Date(a.started_at) : null;
    const end = a.ended_at ? new Date(a.ended_at) : null;
    const took = start && end ? ', ' + duration(Math.max(0, (end - start) / 1000)) : '';
    const summary = el('p', {},
      el('strong', { textContent: 'Attempt ' + a.attempt }),
      ' ',
      el('span', { className: 'outcome outcome-' + a.outcome, textContent: a.outcome.replace('_', ' ') }),
      a.error_category ? el('span', { className: 'category', textContent: a.error_category }) : '',
      el('br'),
      el('span', { className: 'mono', textContent: a.worker_id || '?' }),
      start ? ' from ' + start.toLocaleString() + took : '');
    const li = el('li', { dataset: { attempt: String(a.attempt), outcome: a.outcome } }, summary);
    if (a.error) li.append(el('pre', { className: 'error-text', textContent: a.error }));
    return li;
  });
  return el('div', { className: 'detail-group history', dataset: { group: 'History' } },
    el('h3', { textContent: 'Attempts, newest first' }),
    el('ol', { className: 'history-list' }, ...items));
}

// bytes formats a size: "812 B", "4.2 KiB", "13.0 MiB".
function bytes(n) {
  if (n < 1024) return n + ' B';
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let v = n / 1024;
  let i = 0;
  for (; v >= 1024 && i < units.length - 1; i++) v /= 1024;
  return v.toFixed(1) + ' ' + units[i] + ' (' + n + ' bytes)';
}

// ---- the workers ----

async function loadWorkers() {
  let list;
  try {
    list = await api('GET', '/workers');
  } catch (e) {
    if (e.status !== 401) showError('#workers-error', 'Could not load the workers: ' + e.message);
    return;
  }
  showError('#workers-error', '');
  renderWorkers(list);
}

function renderWorkers(list) {
  const now = new Date(list.read_at); // S3's clock, by which live was judged
  const ago = (v) => (v ? duration((now - new Date(v)) / 1000) + ' ago' : 'never');
  let summary = list.workers.length + ' worker' + (list.workers.length === 1 ? '' : 's') + ' listed, ' + list.live + ' live.';
  if (list.truncated) summary += ' More than 1,000 announce themselves: only the first 1,000 were read.';
  if (list.workers.length) {
    summary += ' Busy, Running and Last poll are each worker\'s word as of its last report (Last seen);'
      + ' one that stops reporting, killed or cut off, stays live until two of its report intervals and its clock margin have passed.';
  }
  $('#workers-summary').textContent = summary;
  $('#worker-rows').replaceChildren(...list.workers.map((w) => {
    let types = 'every type';
    if (w.types && w.types.length === 0) types = 'none';
    else if (w.types) types = w.types.map((t) => t || '(no type)').join(', ');
    const running = w.running.length
      ? w.running.flatMap((id, i) => (i ? [' ', taskLink(id)] : [taskLink(id)]))
      : ['nothing'];
    return el('tr', { className: 'worker' + (w.live ? '' : ' gone'), dataset: { id: w.worker_id, live: String(w.live) } },
      cell('Worker', {}, el('span', { className: 'mono', textContent: w.worker_id }),
        el('span', { className: 'counts', textContent: w.host ? 'on ' + w.host : 'host unknown' })),
      cell('Live', {}, el('span', { className: 'status ' + (w.live ? 'live' : 'not-live'), textContent: w.live ? 'live' : 'not live' }),
        w.live && w.live_until ? el('span', { className: 'counts live-until', textContent: 'until ' + new Date(w.live_until).toLocaleTimeString() + ' unless it reports' }) : null),
      cell('Busy', { className: 'busy', textContent: w.running.length + ' of ' + w.concurrency }),
      cell('Types', { textContent: types }),
      cell('Running', { className: 'running-cell' }, ...running),
      cell('Last poll', { textContent: ago(w.last_poll_at) }),
      cell('Last seen', { textContent: ago(w.last_seen) }),
      cell('Started', { textContent: new Date(w.started_at).toLocaleString() }),
      cell('Version', { textContent: w.library_version || '(not recorded)' }));
  }));
  $('#workers-empty').hidden = list.workers.length > 0;
  $('#workers-broken').replaceChildren(...list.broken.map((b) => el('li', {
    textContent: 'Unreadable presence object ' + b.key + ': ' + b.error,
  })));
}

// ---- the periodic tasks ----

async function loadPeriodics() {
  let list;
  try {
    list = await api('GET', '/periodics');
  } catch (e) {
    if (e.status !== 401) showError('#periodic-error', 'Could not load the periodic tasks: ' + e.message);
    return;
  }
  showError('#periodic-error', '');
  renderPeriodics(list);
}

// RUN_STATUS says what a latest run's status means when it is not a
// task's.
const RUN_STATUS = {
  purged: 'purged: made, then purged',
  unrecorded: 'being made (its task has no record yet)',
  unreadable: 'unreadable',
};

function renderPeriodics(list) {
  const now = new Date(list.read_at); // S3's clock, by which the periods were told
  const n = list.periodics.length;
  $('#periodic-summary').textContent = n + ' periodic task' + (n === 1 ? '' : 's') +
    ', as of ' + now.toLocaleString() + ' by S3\'s clock. The latest run is looked for in the latest period and the one before.';
  $('#periodic-rows').replaceChildren(...list.periodics.map((p) => {
    const next = new Date(p.next_run_at);
    const run = p.last_run;
    let latest = [el('span', { className: 'status', textContent: 'none yet' })];
    let task = ['—'];
    if (run) {
      latest = [
        el('span', { className: 'status status-' + run.status, textContent: RUN_STATUS[run.status] || STATES[run.status] || run.status }),
        el('span', { className: 'counts', textContent: 'of ' + new Date(run.period).toLocaleString() }),
      ];
      if (run.error) latest.push(el('span', { className: 'counts error', textContent: run.error }));
      if (run.task) task = [taskLink(run.task_id, run.task.task_name || run.task_id)];
      else if (run.task_id) task = [el('span', { className: 'mono', textContent: run.task_id })];
    }
    return el('tr', { className: 'periodic', dataset: { name: p.name, run: run ? run.status : 'none' } },
      cell('Periodic task', {}, el('span', { className: 'mono', textContent: p.name }),
        el('span', { className: 'counts', textContent: p.task_type + ' tasks' })),
      cell('Schedule', {}, p.schedule, el('span', { className: 'counts', textContent: 'missed runs: ' + p.missed })),
      cell('Next run', {}, next.toLocaleString(), el('span', { className: 'counts', textContent: 'in ' + duration((next - now) / 1000) })),
      cell('Latest run', {}, ...latest),
      cell('Its task', { className: 'running-cell' }, ...task));
  }));
  $('#periodic-empty').hidden = n > 0;
}

// ---- creating a task, uploading its file ----

function setStatus(text, isError) {
  const s = $('#create-status');
  s.textContent = text;
  s.className = isError ? 'error' : '';
}

// uploadAndSubmit uploads file to S3 with the presigned POST form post
// (every field first, the file last), then submits the task.
async function uploadAndSubmit(id, post, file, say) {
  if (file.size > post.max_size) {
    throw new Error('the file is ' + file.size + ' bytes; the limit is ' + post.max_size);
  }
  say('Uploading ' + file.name + ' to S3...');
  const form = new FormData();
  for (const [k, v] of Object.entries(post.fields)) form.append(k, v);
  form.append(post.file_field, file);
  const submit = () => api('POST', '/tasks/' + encodeURIComponent(id) + '/submit');
  let up;
  try {
    up = await fetch(post.url, { method: 'POST', body: form });
  } catch (err) {
    // The browser could not read S3's answer: the network failed, or the
    // bucket has no CORS rule for this page, in which case S3 may have
    // taken the file all the same. Submitting tells which.
    say('Could not read the answer of S3; checking whether the file arrived...');
    try {
      return await submit();
    } catch (e) {
      if (e.code !== 'input_missing') throw e;
      throw new Error('the file did not reach S3 (' + err.message + '; the bucket may need a CORS rule for this page). ' +
        'The task waits for its file: use "Upload file" on its row to try again, or cancel it.');
    }
  }
  if (!up.ok) {
    throw new Error('the upload to S3 failed with HTTP ' + up.status +
      '. The task waits for its file: use "Upload file" on its row to try again, or cancel it.');
  }
  say('Submitting...');
  return submit();
}

// onReupload gets a fresh upload link for the created task whose button
// was clicked (its first one may have expired), uploads the chosen file
// and submits the task.
async function onReupload() {
  const file = $('#reupload-file').files[0];
  const id = state.reuploadId;
  if (!file || !id) return;
  const s = state.route.view === 'task' ? $('#detail-status') : $('#row-status');
  const say = (text, isError) => {
    s.textContent = text;
    s.className = isError ? 'error' : 'hint';
  };
  try {
    say('Asking for a fresh upload link...');
    const issued = await api('POST', '/tasks/' + encodeURIComponent(id) + '/upload');
    const t = await uploadAndSubmit(id, issued.upload.post, file, say);
    say('Task ' + t.task_id + ' is ' + t.status + '.');
  } catch (e) {
    say('Upload failed: ' + e.message, true);
  } finally {
    state.reuploadId = '';
  }
  reload();
}

// onCreate creates the task, uploads the file straight to S3 with the
// presigned POST form (every field first, the file last), then submits.
async function onCreate(ev) {
  ev.preventDefault();
  const file = $('#file').files[0];
  if (!file) return;
  const type = $('#type').value;
  let payload;
  if (type === 'csv_enrich') {
    const required = $('#required').value.split(',').map((s) => s.trim()).filter(Boolean);
    payload = required.length ? { required } : {};
  }
  const button = $('#create-button');
  button.disabled = true;
  try {
    setStatus('Creating the task...');
    const created = await api('POST', '/tasks', { name: $('#name').value, type, payload });
    const id = created.task.task_id;
    const post = created.upload.post;
    if (file.size > post.max_size) {
      await api('POST', '/tasks/' + encodeURIComponent(id) + '/cancel', { reason: 'file too large' });
      throw new Error('the file is ' + file.size + ' bytes; the limit is ' + post.max_size);
    }
    const t = await uploadAndSubmit(id, post, file, setStatus);
    setStatus('Task ' + t.task_id + ' is ' + t.status + '.');
    $('#create-form').reset();
    toggleRequired();
    state.cursors = [''];
    reload();
  } catch (e) {
    setStatus('Failed: ' + e.message, true);
  } finally {
    button.disabled = false;
  }
}

function toggleRequired() {
  $('#required-label').hidden = $('#type').value !== 'csv_enrich';
}

function init() {
  $('#login-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $('#token').value.trim());
    $('#token').value = '';
    showMain();
  });
  $('#forget').addEventListener('click', () => showLogin('Token forgotten.'));
  $('#create-form').addEventListener('submit', onCreate);
  $('#type').addEventListener('change', toggleRequired);
  $('#rows').addEventListener('click', onAction);
  $('#rows').addEventListener('change', onSelect);
  $('#select-page').addEventListener('change', onSelectPage);
  $('#bulk-retry').addEventListener('click', () => onBulkButton('retry'));
  $('#bulk-cancel').addEventListener('click', () => onBulkButton('cancel'));
  $('#bulk-purge').addEventListener('click', () => onBulkButton('purge'));
  $('#bulk-retry-all').addEventListener('click', () => {
    const type = state.route.type;
    startBulk('retry', { filter: { status: 'dead', type }, limit: BULK_ALL_LIMIT }, 'all dead ' + type + ' tasks');
  });
  $('#bulk-confirm').addEventListener('click', confirmBulk);
  $('#bulk-close').addEventListener('click', () => $('#bulk-dialog').close());
  $('#bulk-dialog').addEventListener('cancel', (ev) => {
    if ($('#bulk-dialog').dataset.phase === 'working') ev.preventDefault();
  });
  $('#bulk-dialog').addEventListener('close', () => {
    bulk.seq++; // a dry run's answer still on its way is not shown
    reload();
  });
  $('#detail').addEventListener('click', onAction);
  $('#reupload-file').addEventListener('change', onReupload);
  $('#older').addEventListener('click', () => {
    if (!state.next) return;
    state.cursors.push(state.next);
    state.selected.clear();
    reload();
  });
  $('#newer').addEventListener('click', () => {
    if (state.cursors.length > 1) state.cursors.pop();
    state.selected.clear();
    reload();
  });
  $('#type-filter').addEventListener('change', () => {
    const params = new URLSearchParams();
    if (state.route.status) params.set('status', state.route.status);
    if ($('#type-filter').value) params.set('type', $('#type-filter').value);
    const q = params.toString();
    location.hash = '#/tasks' + (q ? '?' + q : '');
  });
  $('#jump-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const id = $('#jump-id').value.trim();
    if (!id) return;
    $('#jump-id').value = '';
    location.hash = '#/tasks/' + encodeURIComponent(id);
  });
  $('#span').addEventListener('change', reload);
  $('#stats-refresh').addEventListener('click', reload);
  $('#type-rows').addEventListener('click', onPauseAction);
  window.addEventListener('hashchange', route);
  toggleRequired();
  showMain(); // a server without a token answers at once; otherwise a 401 shows the sign-in form
}

init();
