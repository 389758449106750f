'use strict';
// The csvbatch operator page. It talks to the control API with the bearer
// token kept in this tab's sessionStorage, uploads files straight to S3 with
// the presigned POST form, and puts every value into the page with
// textContent, never as HTML.

const TOKEN_KEY = 'csvbatch-token';
const PAGE_SIZE = 10;
const REFRESH_MS = 2000;

const $ = (selector) => document.querySelector(selector);

const state = {
  cursors: [''], // the cursor of every page visited; the last one is shown
  next: '',      // next_cursor of the page shown
  loading: false,
  timer: null,
  reuploadId: '', // the created task whose "Upload file" button was clicked
};

class APIError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
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
    throw new APIError(resp.status, e.code || 'http_' + resp.status, e.message || resp.statusText);
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

function showLogin(message) {
  clearInterval(state.timer);
  state.timer = null;
  sessionStorage.removeItem(TOKEN_KEY);
  $('#main').hidden = true;
  $('#forget').hidden = true;
  $('#login').hidden = false;
  $('#login-error').textContent = message || '';
  $('#token').focus();
}

function showMain() {
  $('#login').hidden = true;
  $('#main').hidden = false;
  $('#forget').hidden = !token();
  if (!state.timer) state.timer = setInterval(refresh, REFRESH_MS);
  refresh();
}

async function refresh() {
  if (state.loading || $('#main').hidden) return;
  state.loading = true;
  const cursor = state.cursors[state.cursors.length - 1];
  let path = '/tasks?limit=' + PAGE_SIZE;
  if (cursor) path += '&cursor=' + encodeURIComponent(cursor);
  try {
    const page = await api('GET', path);
    render(page);
    $('#list-error').hidden = true;
  } catch (e) {
    if (e.status !== 401) {
      $('#list-error').textContent = 'Could not load tasks: ' + e.message;
      $('#list-error').hidden = false;
    }
  } finally {
    state.loading = false;
  }
}

function render(page) {
  state.next = page.next_cursor || '';
  const rows = page.tasks.map(taskRow);
  for (const b of page.broken || []) {
    rows.push(el('tr', { className: 'broken' },
      el('td', { colSpan: 7, className: 'error-text', textContent: 'Unreadable record ' + b.key + ': ' + b.error })));
  }
  $('#rows').replaceChildren(...rows);
  // A later page can come back empty: the listing may offer a cursor
  // although no older task follows.
  $('#empty').textContent = state.cursors.length > 1 ? 'No older tasks.' : 'No tasks yet.';
  $('#empty').hidden = rows.length > 0;
  $('#newer').disabled = state.cursors.length === 1;
  $('#older').disabled = !state.next;
  $('#page-number').textContent = 'Page ' + state.cursors.length;
}

function taskRow(t) {
  const created = el('td', {},
    new Date(t.created_at).toLocaleString(),
    el('span', { className: 'id', textContent: t.task_id }));

  const name = el('td', {}, t.task_name || '(no name)',
    t.created_by ? el('span', { className: 'counts', textContent: 'by ' + t.created_by }) : null);

  const status = el('td', { className: 'status-cell' },
    el('span', { className: 'status status-' + t.status, textContent: t.status }));
  if (t.attempt_id > 0) {
    status.append(el('span', { className: 'counts', textContent: 'attempt ' + t.attempt_id + ' of ' + t.max_attempts }));
  }
  if (t.status === 'queued' && t.run_at && new Date(t.run_at) > new Date()) {
    status.append(el('span', { className: 'counts scheduled', textContent: 'scheduled for ' + new Date(t.run_at).toLocaleString() }));
  }
  if (t.status === 'failed' && t.retry_at) {
    status.append(el('span', { className: 'counts', textContent: 'retry at ' + new Date(t.retry_at).toLocaleTimeString() }));
  }
  if (t.status === 'running' && t.report_overdue) {
    status.append(el('span', { className: 'counts overdue', textContent: overdueText(t) }));
  }
  if (t.status === 'failed' && t.retry_note) {
    status.append(el('span', { className: 'counts retry-note', textContent: t.retry_note }));
  }

  return el('tr', { className: 'task', dataset: { id: t.task_id, status: t.status } },
    created, name, el('td', { textContent: t.task_type || '' }), status, progressCell(t),
    t.status === 'abandoned'
      ? el('td', { className: 'hint', textContent: 'cancelled' + (t.cancel_reason ? ': ' + t.cancel_reason : '') })
      : el('td', { className: 'error-text', textContent: t.last_error || '' }),
    actionsCell(t));
}

// overdueText says how long a running task's worker has not reported
// (counted by the server, whose clock the record's times follow) and when
// another worker takes the task over if it stays silent.
function overdueText(t) {
  let text = 'no report for ' + duration(t.silent_seconds || 0);
  if (t.recovers_at) {
    const at = new Date(t.recovers_at).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
    text += '; recovered at ' + at + ' if it stays silent';
  }
  return text;
}

// duration formats a number of seconds briefly: "45 s", "3 m", "2 h 5 m".
function duration(seconds) {
  if (seconds < 60) return seconds + ' s';
  const m = Math.floor(seconds / 60);
  if (m < 60) return m + ' m';
  return Math.floor(m / 60) + ' h ' + (m % 60) + ' m';
}

function progressCell(t) {
  const td = el('td', { className: 'progress-cell' });
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
  const total = t.row_count > 0 ? (t.status === 'running' ? '~' : '') + t.row_count : '?';
  td.append(bar, el('span', {
    className: 'counts',
    textContent: t.processed_count + ' / ' + total + ' rows, ' + t.success_count + ' ok, ' + t.error_count + ' bad',
  }));
  return td;
}

function actionsCell(t) {
  const td = el('td', { className: 'actions' });
  if (t.upload_reissuable) {
    td.append(el('button', {
      type: 'button', className: 'secondary', textContent: 'Upload file',
      title: 'Upload this task\'s file with a fresh upload link, then submit it',
      dataset: { action: 'upload', id: t.task_id },
    }));
  }
  if (t.retryable) {
    td.append(el('button', {
      type: 'button', className: 'secondary', textContent: 'Retry',
      dataset: { action: 'retry', id: t.task_id },
    }));
  }
  if (t.cancelable) {
    td.append(el('button', {
      type: 'button', className: 'danger', textContent: 'Cancel',
      dataset: { action: 'cancel', id: t.task_id, name: t.task_name || t.task_id },
    }));
  }
  if (t.status === 'completed') {
    td.append(el('a', {
      className: 'download', textContent: 'Download',
      href: '/tasks/' + encodeURIComponent(t.task_id) + '/output',
      dataset: { id: t.task_id },
    }));
  }
  return td;
}

async function onRowsClick(ev) {
  const target = ev.target.closest('[data-action], a.download');
  if (!target) return;
  ev.preventDefault();
  const id = encodeURIComponent(target.dataset.id);
  try {
    if (target.matches('a.download')) {
      const out = await api('GET', '/tasks/' + id + '/output');
      window.location.assign(out.url); // S3 answers with Content-Disposition: attachment
      return;
    }
    if (target.dataset.action === 'cancel') {
      if (!window.confirm('Cancel task "' + target.dataset.name + '"?')) return;
      await api('POST', '/tasks/' + id + '/cancel', { reason: 'cancelled from the operator page' });
    } else if (target.dataset.action === 'retry') {
      await api('POST', '/tasks/' + id + '/retry');
    } else if (target.dataset.action === 'upload') {
      state.reuploadId = target.dataset.id;
      $('#reupload-file').value = '';
      $('#reupload-file').click(); // its change event goes on in onReupload
      return;
    }
    $('#list-error').hidden = true;
  } catch (e) {
    $('#list-error').textContent = e.message;
    $('#list-error').hidden = false;
  }
  refresh();
}

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
  const say = (text, isError) => {
    const s = $('#row-status');
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
  refresh();
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
    refresh();
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
  $('#rows').addEventListener('click', onRowsClick);
  $('#reupload-file').addEventListener('change', onReupload);
  $('#older').addEventListener('click', () => {
    if (!state.next) return;
    state.cursors.push(state.next);
    refresh();
  });
  $('#newer').addEventListener('click', () => {
    if (state.cursors.length > 1) state.cursors.pop();
    refresh();
  });
  toggleRequired();
  showMain(); // a server without a token answers at once; otherwise a 401 shows the sign-in form
}

init();
