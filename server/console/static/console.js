// Herald debug console: reads the admin API with the token kept in
// sessionStorage and follows /console/events (Server-Sent Events).
'use strict';

const tokenKey = 'herald.adminToken';
const $ = (id) => document.getElementById(id);
let stream = null;
let streamApp = null; // the app the stream follows; null once stopped
let reconnectTimer = null;
let liveTimer = null;
let publishesTimer = null;
let historyTimer = null;
let instanceHistoryTimer = null;
// The current history polls (pollHistory): a new selection starts a new one
// and the old one stops at its next step.
let appPoll = null;
let instancePoll = null;

function token() { return sessionStorage.getItem(tokenKey) || ''; }

async function api(path, method, body) {
  const headers = { Authorization: 'Bearer ' + token() };
  const init = { method: method || 'GET', headers };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const res = await fetch(path, init);
  const answer = await res.json().catch(() => ({}));
  if (!res.ok) {
    const err = new Error(answer.description || res.statusText);
    err.status = res.status;
    err.kind = answer.error;
    throw err;
  }
  return answer;
}

function cell(row, text) {
  const td = document.createElement('td');
  td.textContent = text;
  row.appendChild(td);
}

async function login(t) {
  sessionStorage.setItem(tokenKey, t);
  try {
    const { apps } = await api('/admin/v1/apps');
    $('login').hidden = true;
    $('main').hidden = false;
    $('logout').hidden = false;
    const sel = $('app');
    sel.textContent = '';
    for (const a of apps) {
      const o = document.createElement('option');
      o.value = a.id;
      o.textContent = a.id + ' (key ' + a.key + (a.enabled ? '' : ', disabled') + ')';
      sel.appendChild(o);
    }
    const saved = sessionStorage.getItem('herald.app');
    if (saved && apps.some((a) => a.id === saved)) sel.value = saved;
    selectApp(sel.value);
    loadInstances();
  } catch (e) {
    sessionStorage.removeItem(tokenKey);
    $('login-error').textContent = e.status === 401 ? 'Wrong token.' : 'Cannot reach the admin API: ' + e.message;
  }
}

function logout() {
  sessionStorage.removeItem(tokenKey);
  stopStream();
  clearInterval(liveTimer);
  clearInterval(publishesTimer);
  clearTimeout(historyTimer);
  clearTimeout(instanceHistoryTimer);
  location.reload();
}

async function refreshLive(appID) {
  try {
    const live = await api('/admin/v1/apps/' + encodeURIComponent(appID) + '/live');
    if (appID !== $('app').value) return;
    $('connections').textContent = live.connections;
    $('channel-count').textContent = live.channels.length;
    $('subscription-count').textContent = live.channels.reduce((n, c) => n + c.subscriptions, 0);
    const body = $('channels').tBodies[0];
    body.textContent = '';
    for (const ch of live.channels) {
      const row = document.createElement('tr');
      row.dataset.channel = ch.name;
      cell(row, ch.name);
      cell(row, ch.subscriptions);
      cell(row, ch.members ? ch.members.join(', ') + (ch.users > ch.members.length ? ' …' : '') : '');
      body.appendChild(row);
    }
  } catch (e) {
    $('status').textContent = 'live state unavailable: ' + e.message;
  }
}

function describe(ev) {
  const parts = [];
  if (ev.channel) parts.push(ev.channel);
  if (ev.event) parts.push(ev.event);
  if (ev.user_id) parts.push('user ' + ev.user_id);
  if (ev.count !== undefined) parts.push('count ' + ev.count);
  if (ev.url) parts.push(ev.url + ' → ' + (ev.error ? 'failed: ' + ev.error : ev.status));
  if (ev.data) parts.push(ev.data);
  return parts.join('  ');
}

// The live list keeps the last maxRows events in `events` (newest first)
// and shows those the filters let through, shownCount of them; while
// paused, events are kept but the list is not redrawn.
let events = [];
let shownCount = 0;
let paused = false;

// The filters and the row limit, read from their inputs when they change
// (readFilters), not for every event.
const filter = { prefix: '', name: '', kind: '' };
let maxRows = 500;

function readFilters() {
  filter.prefix = $('filter-channel').value.trim();
  filter.name = $('filter-event').value.trim();
  filter.kind = $('filter-kind').value;
  const n = parseInt($('max-rows').value, 10);
  maxRows = Number.isFinite(n) ? Math.min(Math.max(n, 10), 5000) : 500;
}

// Kinds the "subscribe" filter covers: what subscribing and leaving cause.
const subscribeKinds = new Set(['channel_occupied', 'channel_vacated', 'member_added', 'member_removed', 'subscription_count', 'cache_miss']);

function shown(ev) {
  if (filter.prefix && !(ev.channel || '').startsWith(filter.prefix)) return false;
  if (filter.name && ev.event !== filter.name) return false;
  if (filter.kind === 'subscribe') return subscribeKinds.has(ev.kind);
  return !filter.kind || ev.kind === filter.kind;
}

function showCount() {
  $('events-count').textContent = shownCount + ' of ' + events.length + ' kept' + (paused ? ', paused' : '');
}

// trimEvents drops the oldest events past maxRows, keeping shownCount.
function trimEvents() {
  while (events.length > maxRows) {
    if (shown(events.pop())) shownCount--;
  }
}

function eventRow(ev) {
  const li = document.createElement('li');
  li.dataset.kind = ev.kind;
  if (ev.channel) li.dataset.channel = ev.channel;
  const time = new Date(ev.time_ms).toLocaleTimeString();
  const kind = document.createElement('span');
  kind.className = 'kind kind-' + ev.kind;
  kind.textContent = ev.kind;
  li.append(time + ' ');
  // In a cluster each event names the node that saw it.
  if (ev.node) {
    li.dataset.node = ev.node;
    const node = document.createElement('span');
    node.className = 'node';
    node.textContent = ev.node;
    li.append(node, ' ');
  }
  li.append(kind, ' ' + describe(ev));
  return li;
}

function renderEvents() {
  const list = $('events');
  list.textContent = '';
  const rows = events.filter(shown);
  for (const ev of rows) list.appendChild(eventRow(ev));
  shownCount = rows.length;
  showCount();
}

function addEvent(ev) {
  events.unshift(ev);
  const show = shown(ev);
  if (show) shownCount++;
  trimEvents();
  if (!paused) {
    const list = $('events');
    if (show) list.prepend(eventRow(ev));
    while (list.children.length > shownCount) list.lastChild.remove();
  }
  showCount();
}

function clearEvents() {
  events = [];
  renderEvents();
}

function stopStream() {
  streamApp = null;
  clearTimeout(reconnectTimer);
  if (stream) stream.close();
  stream = null;
}

// openStream follows appID's events. EventSource cannot send headers and the
// token must not go in a URL (access logs record URLs), so each stream opens
// with a fresh single-use ticket from POST /console/tickets. A ticket does not
// survive EventSource's own reconnect, so on any error the stream is closed
// and opened again with a new ticket.
async function openStream(appID) {
  let ticket;
  try {
    ({ ticket } = await api('/console/tickets', 'POST'));
  } catch (e) {
    if (streamApp !== appID) return;
    if (e.status === 401) {
      $('status').textContent = 'stream refused: ' + e.message;
      return;
    }
    $('status').textContent = 'reconnecting… (' + e.message + ')';
    reconnectTimer = setTimeout(() => openStream(appID), 2000);
    return;
  }
  if (streamApp !== appID) return; // another app was picked meanwhile
  const es = new EventSource('/console/events?app=' + encodeURIComponent(appID) + '&ticket=' + encodeURIComponent(ticket));
  stream = es;
  es.onopen = () => { $('status').textContent = 'live'; };
  es.onerror = () => {
    es.close();
    if (stream !== es || streamApp !== appID) return;
    $('status').textContent = 'reconnecting…';
    reconnectTimer = setTimeout(() => openStream(appID), 1000);
  };
  es.onmessage = (m) => {
    const ev = JSON.parse(m.data);
    addEvent(ev);
    if (ev.kind !== 'trigger' && ev.kind !== 'client_event' && ev.kind !== 'webhook') refreshLive(appID);
  };
  es.addEventListener('dropped', (m) => addEvent({ time_ms: Date.now(), kind: 'dropped', data: m.data + ' events not shown (the page fell behind)' }));
}

function selectApp(appID) {
  if (!appID) return;
  sessionStorage.setItem('herald.app', appID);
  stopStream();
  clearInterval(liveTimer);
  // Not "live" until this app's stream is open: events before that are
  // not shown.
  $('status').textContent = 'connecting…';
  clearEvents();
  refreshLive(appID);
  liveTimer = setInterval(() => refreshLive(appID), 1000);
  clearTimeout(historyTimer);
  const poll = appPoll = {};
  pollHistory(appID, refreshAppHistory, () => poll === appPoll, (t) => { historyTimer = t; });
  streamApp = appID;
  openStream(appID);
}

async function loadInstances() {
  try {
    const { instances } = await api('/admin/v1/instances');
    const body = $('instances').tBodies[0];
    body.textContent = '';
    for (const inst of instances) {
      const row = document.createElement('tr');
      cell(row, inst.id);
      cell(row, inst.enabled ? 'yes' : 'no');
      cell(row, inst.devices);
      const gw = [];
      if (inst.apns.keyConfigured) gw.push('APNs');
      if (inst.fcm.serviceAccountConfigured) gw.push('FCM');
      if (inst.vapid.publicKey) gw.push('Web Push');
      cell(row, gw.join(', '));
      body.appendChild(row);
    }
    const sel = $('instance');
    const current = sel.value || sessionStorage.getItem('herald.instance');
    sel.textContent = '';
    for (const inst of instances) {
      const o = document.createElement('option');
      o.value = inst.id;
      o.textContent = inst.id;
      sel.appendChild(o);
    }
    if (current && instances.some((i) => i.id === current)) sel.value = current;
    selectInstance(sel.value);
  } catch (e) {
    $('status').textContent = 'instances unavailable: ' + e.message;
  }
}

async function refreshPublishes(instanceID) {
  try {
    const { publishes } = await api('/admin/v1/instances/' + encodeURIComponent(instanceID) + '/publishes?limit=20');
    if (instanceID !== $('instance').value) return;
    const body = $('publishes').tBodies[0];
    body.textContent = '';
    for (const p of publishes) {
      const row = document.createElement('tr');
      row.dataset.publish = p.publishId;
      row.dataset.state = p.state;
      cell(row, p.publishId);
      cell(row, p.targets + ' ' + p.targetKind);
      cell(row, p.state);
      for (const n of [p.targeted, p.sent, p.failed, p.delivered, p.opened]) cell(row, n);
      cell(row, new Date(p.createdAt).toLocaleTimeString());
      cell(row, nodeShares(p));
      body.appendChild(row);
    }
  } catch (e) {
    $('status').textContent = 'publishes unavailable: ' + e.message;
  }
}

// nodeShares says which node sent how much of a publish: each node's share
// of the targets of the pages recorded, as "node-a 58 % (7 pages)".
function nodeShares(p) {
  const nodes = p.nodes || [];
  const total = nodes.reduce((sum, n) => sum + n.targeted, 0);
  const share = (n) => (total ? Math.round((100 * n.targeted) / total) : 0);
  return nodes.map((n) => n.node + ' ' + share(n) + ' % (' + n.pages + (n.pages === 1 ? ' page)' : ' pages)')).join(', ');
}

// The publishes of the selected instance, refreshed every 3 s, and its
// deliveries chart, once per the history's interval.
function selectInstance(instanceID) {
  clearInterval(publishesTimer);
  clearTimeout(instanceHistoryTimer);
  instancePoll = null;
  $('publishes').tBodies[0].textContent = '';
  if (!instanceID) return;
  sessionStorage.setItem('herald.instance', instanceID);
  refreshPublishes(instanceID);
  publishesTimer = setInterval(() => refreshPublishes(instanceID), 3000);
  const poll = instancePoll = {};
  pollHistory(instanceID, refreshInstanceHistory, () => poll === instancePoll, (t) => { instanceHistoryTimer = t; });
}

// Charts: the history endpoints give one point per intervalSeconds for the
// last hour; each chart is an SVG polyline per series drawn here, no
// library, redrawn once per interval.
let historyInterval = 5; // seconds, until the API has said

// pollHistory refreshes the history of id with refresh (which returns the
// API's answer, or null) now and then once per the API's interval, while
// current() holds (the poll is the selection's latest); setTimer keeps the
// pending timer, for clearTimeout.
async function pollHistory(id, refresh, current, setTimer) {
  const h = await refresh(id);
  if (h && h.intervalSeconds > 0) historyInterval = h.intervalSeconds;
  if (!current() || !token()) return;
  setTimer(setTimeout(() => pollHistory(id, refresh, current, setTimer), historyInterval * 1000));
}
const palette = { connections: '#0b6bcb', triggered: '#0b6bcb', delivered: '#1a7f37', webhooksSent: '#1a7f37', webhooksFailed: '#cf222e',
  failed: '#cf222e', retried: '#b25e00', deadToken: '#8a3ffc' };
const svgNS = 'http://www.w3.org/2000/svg';

function formatValue(v, unit) {
  if (unit === 'count') return String(Math.round(v));
  return (v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2)) + '/s';
}

// drawChart draws the named series of history h in the figure with id.
function drawChart(id, h, names) {
  const fig = $(id);
  const svg = fig.querySelector('svg');
  const legend = fig.querySelector('.legend');
  svg.textContent = '';
  legend.textContent = '';
  const W = 400;
  const H = 120;
  const series = h.series.filter((s) => names.includes(s.name));
  const n = h.times.length;
  let peak = 0;
  for (const s of series) for (const v of s.values) peak = Math.max(peak, v);
  const top = peak > 0 ? peak * 1.1 : 1;
  // The x axis is the last hour (its number of intervals) whatever the
  // number of points so far, so a young node's chart fills from the right.
  const span = Math.max(2, Math.round(3600 / (h.intervalSeconds || historyInterval)));
  for (const s of series) {
    if (n === 0) break;
    const pts = s.values.map((v, i) => {
      const x = W - ((n - 1 - i) / (span - 1)) * W;
      const y = H - 2 - (v / top) * (H - 4);
      return x.toFixed(1) + ',' + y.toFixed(1);
    });
    const line = document.createElementNS(svgNS, 'polyline');
    line.setAttribute('points', pts.join(' '));
    line.setAttribute('fill', 'none');
    line.setAttribute('stroke', palette[s.name] || '#5b6577');
    line.setAttribute('stroke-width', '1.5');
    line.setAttribute('vector-effect', 'non-scaling-stroke');
    line.dataset.series = s.name;
    svg.appendChild(line);
  }
  const axis = document.createElementNS(svgNS, 'text');
  axis.setAttribute('x', '2');
  axis.setAttribute('y', '10');
  axis.setAttribute('class', 'axis');
  axis.textContent = 'max ' + formatValue(peak, series[0] ? series[0].unit : 'count');
  svg.appendChild(axis);
  for (const s of series) {
    const last = s.values.length ? s.values[s.values.length - 1] : 0;
    const max = s.values.reduce((m, v) => Math.max(m, v), 0);
    const item = document.createElement('span');
    item.className = 'legend-item';
    item.dataset.series = s.name;
    item.dataset.last = String(last);
    item.dataset.peak = String(max);
    item.style.borderColor = palette[s.name] || '#5b6577';
    item.textContent = s.name + ' ' + formatValue(last, s.unit) + ' (peak ' + formatValue(max, s.unit) + ')';
    legend.appendChild(item);
  }
}

function scopeText(h) {
  return '(this node' + (h.node ? ' ' + h.node : '') + ', one point per ' + h.intervalSeconds + ' s' + (h.tracked ? '' : '; not tracked: the node tracks its maximum of apps and instances') + ')';
}

async function refreshAppHistory(appID) {
  try {
    const h = await api('/admin/v1/apps/' + encodeURIComponent(appID) + '/history');
    if (appID !== $('app').value) return;
    $('history-scope').textContent = scopeText(h);
    // In a cluster the stream carries every node's events, each naming
    // its node (README: Admin API and debug console).
    $('events-scope').textContent = h.node ? '(every node; this page is on node ' + h.node + ')' : '';
    drawChart('chart-connections', h, ['connections']);
    drawChart('chart-messages', h, ['triggered', 'delivered']);
    drawChart('chart-webhooks', h, ['webhooksSent', 'webhooksFailed']);
    return h;
  } catch (e) {
    $('history-scope').textContent = '(history unavailable: ' + e.message + ')';
    return null;
  }
}

async function refreshInstanceHistory(instanceID) {
  try {
    const h = await api('/admin/v1/instances/' + encodeURIComponent(instanceID) + '/history');
    if (instanceID !== $('instance').value) return;
    $('push-history-status').textContent = '';
    drawChart('chart-push', h, ['delivered', 'failed', 'retried', 'deadToken']);
    return h;
  } catch (e) {
    $('push-history-status').textContent = '(history unavailable: ' + e.message + ')';
    return null;
  }
}

// The channel history form reads the app's kept events of one channel
// through the admin API, newest first; Older follows next_cursor.
let historyCursor = null;
async function showChannelHistory(more) {
  const out = $('history-result');
  const body = $('history-events').tBodies[0];
  out.className = 'muted';
  if (!more) {
    body.textContent = '';
    historyCursor = null;
  }
  const appID = $('app').value;
  const channel = $('history-channel').value.trim();
  let path = '/admin/v1/apps/' + encodeURIComponent(appID) + '/channels/' + encodeURIComponent(channel) + '/events?limit=50';
  if (more && historyCursor) path += '&cursor=' + encodeURIComponent(historyCursor);
  try {
    const page = await api(path);
    for (const ev of page.events) {
      const row = document.createElement('tr');
      cell(row, new Date(ev.timestamp).toLocaleTimeString());
      cell(row, ev.id);
      cell(row, ev.event);
      cell(row, ev.data);
      body.appendChild(row);
    }
    historyCursor = page.next_cursor || null;
    $('history-older').hidden = !historyCursor;
    out.textContent = body.rows.length + ' event' + (body.rows.length === 1 ? '' : 's') + ' of ' + channel + (historyCursor ? ', older ones kept' : '') + '.';
  } catch (err) {
    $('history-older').hidden = true;
    out.className = 'error';
    out.textContent = (err.kind ? err.kind + ': ' : '') + err.message;
  }
}

// The event creator triggers through the admin API, which takes the
// Channels API's own path: its limits answer with their error body.
async function sendEvent(e) {
  e.preventDefault();
  const out = $('creator-result');
  out.className = '';
  const channels = $('creator-channels').value.split(',').map((c) => c.trim()).filter((c) => c);
  const data = $('creator-data').value;
  try {
    JSON.parse(data);
  } catch (err) {
    out.className = 'error';
    out.textContent = 'The data is not JSON: ' + err.message;
    return;
  }
  try {
    const appID = $('app').value;
    await api('/admin/v1/apps/' + encodeURIComponent(appID) + '/events', 'POST', { name: $('creator-event').value.trim(), channels, data });
    out.textContent = 'Sent to ' + channels.join(', ') + '.';
  } catch (err) {
    out.className = 'error';
    out.textContent = (err.kind ? err.kind + ': ' : '') + err.message;
  }
}

$('login').addEventListener('submit', (e) => { e.preventDefault(); login($('token').value); });
$('logout').addEventListener('click', logout);
$('app').addEventListener('change', (e) => selectApp(e.target.value));
$('instance').addEventListener('change', (e) => selectInstance(e.target.value));
$('clear').addEventListener('click', clearEvents);
$('pause').addEventListener('click', () => {
  paused = !paused;
  $('pause').textContent = paused ? 'Resume' : 'Pause';
  renderEvents();
});
for (const id of ['filter-channel', 'filter-event', 'filter-kind', 'max-rows']) $(id).addEventListener('input', () => {
  readFilters();
  if (events.length > maxRows) events.length = maxRows;
  renderEvents();
});
readFilters();
$('filters').addEventListener('submit', (e) => e.preventDefault());
$('creator').addEventListener('submit', sendEvent);
$('channel-history').addEventListener('submit', (e) => { e.preventDefault(); showChannelHistory(false); });
$('history-older').addEventListener('click', () => showChannelHistory(true));
$('channels').addEventListener('click', (e) => {
  const row = e.target.closest('tr');
  if (!row || !row.dataset.channel) return;
  $('history-channel').value = row.dataset.channel;
  showChannelHistory(false);
});
if (token()) login(token());
