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

function token() { return sessionStorage.getItem(tokenKey) || ''; }

async function api(path, method) {
  const res = await fetch(path, { method: method || 'GET', headers: { Authorization: 'Bearer ' + token() } });
  const body = await res.json().catch(() => ({}));
  if (!res.ok) {
    const err = new Error(body.description || res.statusText);
    err.status = res.status;
    throw err;
  }
  return body;
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

function addEvent(ev) {
  const li = document.createElement('li');
  li.dataset.kind = ev.kind;
  const time = new Date(ev.time_ms).toLocaleTimeString();
  const kind = document.createElement('span');
  kind.className = 'kind kind-' + ev.kind;
  kind.textContent = ev.kind;
  li.append(time + ' ', kind, ' ' + describe(ev));
  const list = $('events');
  list.prepend(li);
  while (list.children.length > 500) list.lastChild.remove();
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
  $('events').textContent = '';
  refreshLive(appID);
  liveTimer = setInterval(() => refreshLive(appID), 1000);
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
      body.appendChild(row);
    }
  } catch (e) {
    $('status').textContent = 'publishes unavailable: ' + e.message;
  }
}

// The publishes of the selected instance, refreshed every 3 s.
function selectInstance(instanceID) {
  clearInterval(publishesTimer);
  $('publishes').tBodies[0].textContent = '';
  if (!instanceID) return;
  sessionStorage.setItem('herald.instance', instanceID);
  refreshPublishes(instanceID);
  publishesTimer = setInterval(() => refreshPublishes(instanceID), 3000);
}

$('login').addEventListener('submit', (e) => { e.preventDefault(); login($('token').value); });
$('logout').addEventListener('click', logout);
$('app').addEventListener('change', (e) => selectApp(e.target.value));
$('instance').addEventListener('change', (e) => selectInstance(e.target.value));
$('clear').addEventListener('click', () => { $('events').textContent = ''; });
if (token()) login(token());
