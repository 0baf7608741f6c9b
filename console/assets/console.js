// reverbgo console: one EventSource per selected app; every view is rendered from what the
// server streams (no polling). All values go in with textContent, never as HTML.
'use strict';
(() => {
  const base = document.body.dataset.base;
  const $ = (id) => document.getElementById(id);
  const MAX_LOG = 500;
  let csrf = '';
  let source = null;
  let app = '';
  let channels = [];
  let logEntries = [];
  let paused = false;

  const el = (tag, text, cls) => {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  };
  const row = (cells, cls) => {
    const tr = el('tr', null, cls);
    for (const c of cells) tr.append(c instanceof Node ? c : el('td', c));
    return tr;
  };
  const time = (ms) => new Date(ms).toLocaleTimeString(undefined, { hour12: false }) + '.' + String(ms % 1000).padStart(3, '0');

  async function api(path, body) {
    const opts = body === undefined ? {} : {
      method: 'POST', body: JSON.stringify(body),
      headers: { 'Content-Type': 'application/json', 'X-Console-CSRF': csrf },
    };
    const res = await fetch(base + '/api/' + path, { credentials: 'same-origin', ...opts });
    if (res.status === 401) { location.reload(); throw new Error('logged out'); }
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : {} };
  }

  // ---- views and tabs
  function show(view) {
    for (const b of document.querySelectorAll('#tabs button')) b.classList.toggle('active', b.dataset.view === view);
    for (const v of document.querySelectorAll('.view')) v.classList.toggle('active', v.id === 'view-' + view);
  }
  for (const b of document.querySelectorAll('#tabs button')) b.addEventListener('click', () => show(b.dataset.view));

  // ---- overview
  function renderStats(s) {
    $('s-connections').textContent = s.connections;
    $('s-in').textContent = s.in;
    $('s-out').textContent = s.out;
    $('s-deliveries').textContent = s.deliveries;
    $('dropped').textContent = s.dropped + ' events dropped';
    $('dropped').classList.toggle('warn', s.dropped > 0);
    if (s.webhooks) {
      $('s-wh-queued').textContent = s.webhooks.queued;
      $('s-wh-failed').textContent = s.webhooks.failed;
      $('s-wh-sent').textContent = s.webhooks.sent;
    }
    $('card-redis').hidden = s.redis === undefined;
    if (s.redis !== undefined) $('s-redis').textContent = s.redis;
    connHistory.push(s.connections);
    if (connHistory.length > 600) connHistory.splice(0, connHistory.length - 600);
    drawChart();
  }
  let connHistory = [];
  function drawChart() {
    const maxV = Math.max(1, ...connHistory);
    const pts = connHistory.map((v, i) => `${600 - connHistory.length + i},${(58 - (v / maxV) * 54).toFixed(1)}`);
    $('chart-line').setAttribute('points', pts.join(' '));
  }

  // ---- channels
  function renderChannels() {
    const q = $('channel-search').value.trim().toLowerCase();
    const body = $('channels');
    body.replaceChildren();
    const shown = channels.filter((c) => !q || c.name.toLowerCase().includes(q));
    for (const c of shown) {
      const members = el('td');
      for (const m of c.members || []) {
        const span = el('span', m.id, 'member');
        if (m.info) span.title = m.info;
        members.append(span);
      }
      if (c.member_count > (c.members || []).length) members.append(el('span', `+${c.member_count - c.members.length} more`, 'muted'));
      const tr = row([c.name, c.type, c.subscriptions, members], 'clickable');
      tr.dataset.channel = c.name;
      tr.title = 'Show this channel in the event log';
      tr.addEventListener('click', () => { $('event-filter').value = c.name; renderLog(); show('events'); });
      body.append(tr);
    }
    if (!shown.length) body.append(row([el('td', q ? 'No channel matches.' : 'No occupied channel.', 'muted')]));
  }
  $('channel-search').addEventListener('input', renderChannels);

  // ---- event log
  function logRow(e) {
    let detail = e.data || '';
    if (e.kind === 'connection_opened' || e.kind === 'connection_closed' || e.kind === 'subscribed' || e.kind === 'unsubscribed') {
      detail = 'socket ' + (e.socket || '') + (e.reason ? ` · ${e.reason} (${e.code})` : '');
    } else if (e.kind.startsWith('webhook')) {
      detail = `${e.events} event(s) → ${e.data}` + (e.reason ? ` · ${e.reason}` : '');
    }
    const tr = row([time(e.t), el('td', e.kind, 'kind kind-' + e.kind), e.channel || '', e.event || '',
      e.size === undefined ? '' : e.size, el('td', detail, 'data')]);
    tr.dataset.channel = e.channel || '';
    return tr;
  }
  function matches(e) {
    const f = $('event-filter').value.trim();
    return !f || e.channel === f;
  }
  function renderLog() {
    const body = $('events');
    body.replaceChildren(...logEntries.filter(matches).slice(-MAX_LOG).reverse().map(logRow));
  }
  function addEntry(e) {
    logEntries.push(e);
    if (logEntries.length > MAX_LOG) logEntries.splice(0, logEntries.length - MAX_LOG);
    if (paused || !matches(e)) return;
    const body = $('events');
    body.prepend(logRow(e));
    while (body.rows.length > MAX_LOG) body.deleteRow(-1);
  }
  $('event-filter').addEventListener('input', renderLog);
  $('event-clear').addEventListener('click', () => { logEntries = []; renderLog(); });
  $('event-pause').addEventListener('change', (ev) => { paused = ev.target.checked; if (!paused) renderLog(); });

  // ---- toolmark
  const hintText = (h) => Object.entries(h || {}).filter(([, v]) => v !== undefined).map(([k, v]) => (v ? k : '!' + k)).join(', ');
  function renderToolmark(t) {
    $('tm-convs').replaceChildren(...t.conversations.map((c) => {
      const tools = el('td');
      for (const tool of c.tools) {
        const hints = hintText(tool.hints);
        tools.append(el('span', tool.name + (hints ? ` (${hints})` : ''), 'member'));
      }
      if (!c.tools.length) tools.append(el('span', 'no manifest yet', 'muted'));
      return row([c.user, c.conversation, c.client_id ? `${c.client_id} rev ${c.rev}` : '—', tools]);
    }));
    if (!t.conversations.length) $('tm-convs').append(row([el('td', 'No page connected.', 'muted')]));
    $('tm-inflight').replaceChildren(...t.inflight.map((c) => row([c.tool, c.kind, `${c.user} / ${c.conversation}`, Math.round((c.age_ms || 0) / 1000) + ' s'])));
    if (!t.inflight.length) $('tm-inflight').append(row([el('td', 'None.', 'muted')]));
    $('tm-recent').replaceChildren(...t.recent.map((c) => row([c.tool, c.kind, `${c.user} / ${c.conversation}`,
      el('td', c.status + (c.reason ? ` (${c.reason})` : ''), 'status-' + c.status), c.latency_ms + ' ms'])));
    if (!t.recent.length) $('tm-recent').append(row([el('td', 'None yet.', 'muted')]));
  }

  // ---- send form
  $('send-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const f = new FormData(ev.target);
    const out = $('send-result');
    out.className = '';
    out.textContent = 'sending…';
    try {
      const res = await api('trigger', { app, channel: f.get('channel'), event: f.get('event'), data: f.get('data') });
      out.textContent = res.status === 200 ? 'Sent.' : `Refused (${res.status}): ${res.body.error}`;
      out.className = res.status === 200 ? '' : 'error';
    } catch (err) {
      out.textContent = String(err);
      out.className = 'error';
    }
  });

  $('logout').addEventListener('click', async () => { await api('logout', {}); location.reload(); });

  // ---- stream
  function open(id) {
    app = id;
    connHistory = [];
    logEntries = [];
    channels = [];
    if (source) source.close();
    $('picker').hidden = true;
    $('tabs').hidden = false;
    $('views').hidden = false;
    $('app').value = id;
    location.hash = 'app=' + encodeURIComponent(id);
    source = new EventSource(base + '/api/stream?app=' + encodeURIComponent(id));
    source.addEventListener('open', () => { $('live').textContent = 'live'; $('live').className = 'badge on'; });
    source.addEventListener('error', () => { $('live').textContent = 'reconnecting…'; $('live').className = 'badge off'; });
    source.addEventListener('hello', (m) => {
      const h = JSON.parse(m.data);
      connHistory = h.history.slice(-600);
      $('node').textContent = h.clustered ? `node ${h.node} · cluster-wide channel counts` : 'single node';
      logEntries = [];
      renderLog();
    });
    source.addEventListener('event', (m) => addEntry(JSON.parse(m.data)));
    source.addEventListener('stats', (m) => renderStats(JSON.parse(m.data)));
    source.addEventListener('channels', (m) => { const d = JSON.parse(m.data); channels = d.channels; $('channels-note').textContent = d.truncated ? 'Showing the first 500 channels.' : ''; renderChannels(); });
    source.addEventListener('toolmark', (m) => renderToolmark(JSON.parse(m.data)));
  }

  async function start() {
    const { body: s } = await api('session');
    csrf = s.csrf;
    const select = $('app');
    for (const id of s.apps) select.append(new Option(id, id));
    select.addEventListener('change', () => open(select.value));
    const wanted = decodeURIComponent((location.hash.match(/app=([^&]+)/) || [])[1] || '');
    if (s.apps.length > 1) select.closest('label').hidden = false;
    if (s.apps.includes(wanted)) return open(wanted);
    if (s.apps.length === 1) return open(s.apps[0]);
    $('picker').hidden = false;
    $('app-list').replaceChildren(...s.apps.map((id) => {
      const li = el('li');
      const b = el('button', id);
      b.type = 'button';
      b.addEventListener('click', () => open(id));
      li.append(b);
      return li;
    }));
  }
  start();
})();
