'use strict';
// metrics: {enabled, listen, token}. The scrape is checked by promtool (valid Prometheus text,
// HELP on every family) and its counters must move with real traffic: pusher-js connections,
// subscriptions and presence members, SDK triggers and their deliveries, HTTP statuses, client
// events over the rate limit, closes by reason. The token guards the endpoint (401 otherwise),
// and metrics.listen moves it to a listener of its own.
const { describe, test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const http = require('node:http');
const { startServer, freePort } = require('../lib/server');
const { sdk, outcome, pusherClient, whenConnected, subscribe, inbox } = require('../lib/clients');
const { rawApi } = require('../lib/rawapi');
const { Wire } = require('../lib/wire');
const { scrape, promtoolCheck, parse } = require('../lib/prom');
const { cleanup, uid, eventually } = require('../lib/util');

const TOKEN = 'scrape-token-123';
const APP = { app_id: 'met', key: 'met-key', secret: 'met-secret', accept_client_events_from: 'members', client_event_rate_limit: 2 };

/** Starts reverbgo with APP, the given top-level config keys and server.* keys. */
async function startWith(extra, serverKeys = {}) {
  const server = { host: '127.0.0.1', port: await freePort(), ...serverKeys };
  return startServer({ server, apps: [APP], config: { server, apps: [APP], ...extra } });
}

describe('metrics on the main listener with a token', () => {
  let server;
  let url;
  before(async () => {
    server = await startWith({ metrics: { enabled: true, token: TOKEN } }, { path: '/ws' });
    url = `${server.url}/metrics`;
  });
  after(() => server.stop());
  const metrics = async () => {
    const r = await scrape(url, TOKEN);
    assert.equal(r.status, 200, r.text);
    return parse(r.text);
  };

  test('no token, a wrong token or another scheme get 401; the token gets Prometheus text that promtool accepts', async () => {
    for (const token of [undefined, 'wrong', `${TOKEN}x`, TOKEN.slice(0, -1)]) {
      const r = await scrape(url, token);
      assert.equal(r.status, 401, `token ${token}`);
      assert.doesNotMatch(r.text, /reverbgo_/);
    }
    const basic = await fetch(url, { headers: { Authorization: `Basic ${TOKEN}` } });
    assert.equal(basic.status, 401);
    const ok = await scrape(url, TOKEN);
    assert.equal(ok.status, 200);
    assert.match(ok.headers.get('content-type'), /^text\/plain; version=0\.0\.4/);
    const check = promtoolCheck(ok.text);
    assert.ok(check.ok, `promtool check metrics:\n${check.output}`);
    const m = parse(ok.text);
    for (const family of [
      'reverbgo_connections', 'reverbgo_connections_opened_total', 'reverbgo_connections_closed_total',
      'reverbgo_connections_refused_total', 'reverbgo_slow_consumer_disconnects_total', 'reverbgo_client_messages_received_total',
      'reverbgo_rate_limit_refusals_total', 'reverbgo_messages_published_total', 'reverbgo_deliveries_total',
      'reverbgo_delivery_bytes_total', 'reverbgo_channels', 'reverbgo_subscriptions', 'reverbgo_presence_members',
      'reverbgo_http_requests_total', 'reverbgo_webhook_deliveries_total', 'reverbgo_webhook_outbox_size',
      'reverbgo_socket_writes_total', 'reverbgo_frames_written_total', 'reverbgo_flusher_rounds_total',
      'reverbgo_build_info', 'go_goroutines', 'process_resident_memory_bytes',
    ]) {
      assert.ok(m.help[family], `family ${family} has a HELP line`);
    }
    // The 401s above were counted too, under the route, not the raw path.
    assert.ok(m.get('reverbgo_http_requests_total', { endpoint: '/metrics', code: '401' }) >= 5);
  });

  test('counters move with pusher-js traffic, SDK triggers and HTTP statuses', async (t) => {
    const bag = cleanup(t);
    const before = await metrics();
    const c0 = (name, labels) => before.get(name, labels) || 0;
    const app = { app: APP.app_id };

    const a = pusherClient(server, { user: { id: 'u-1' } });
    const b = pusherClient(server, { user: { id: 'u-2' } });
    bag.add(() => b.disconnect());
    await whenConnected(a);
    await whenConnected(b);
    const news = uid('news-');
    const room = uid('presence-room-');
    const [{ channel: na }, { channel: nb }] = await Promise.all([subscribe(a, news), subscribe(b, news)]);
    await Promise.all([subscribe(a, room), subscribe(b, room)]);
    const gotA = inbox(na, 'ping');
    const gotB = inbox(nb, 'ping');
    const payload = { text: 'x'.repeat(100) };
    for (let i = 0; i < 3; i++) assert.equal((await outcome(sdk(server).trigger(news, 'ping', payload))).status, 200);
    await gotA.wait(3);
    await gotB.wait(3);
    const unsigned = await fetch(`${server.url}/apps/${APP.app_id}/events`, { method: 'POST', body: '{}', headers: { 'content-type': 'application/json' } });
    assert.equal(unsigned.status, 401);
    const missing = await rawApi(server, { path: '/channels/' + news });
    assert.equal(missing.status, 200);

    const m = await metrics();
    assert.ok(m.get('reverbgo_connections', app) >= 2);
    assert.ok(m.get('reverbgo_connections_opened_total', app) >= c0('reverbgo_connections_opened_total', app) + 2);
    assert.equal(m.get('reverbgo_subscriptions', { ...app, type: 'public' }) - c0('reverbgo_subscriptions', { ...app, type: 'public' }), 2);
    assert.equal(m.get('reverbgo_channels', { ...app, type: 'presence' }) - c0('reverbgo_channels', { ...app, type: 'presence' }), 1);
    assert.equal(m.get('reverbgo_presence_members', app) - c0('reverbgo_presence_members', app), 2);
    assert.equal(m.get('reverbgo_messages_published_total', app) - c0('reverbgo_messages_published_total', app), 3);
    // 3 events x 2 subscribers, plus member_added frames: at least 6 deliveries of >100 bytes.
    assert.ok(m.get('reverbgo_deliveries_total') - c0('reverbgo_deliveries_total') >= 6);
    assert.ok(m.get('reverbgo_delivery_bytes_total') - c0('reverbgo_delivery_bytes_total') >= 6 * 100);
    const ev200 = { app: APP.app_id, endpoint: '/apps/:app_id/events', code: '200' };
    assert.equal(m.get('reverbgo_http_requests_total', ev200) - c0('reverbgo_http_requests_total', ev200), 3);
    assert.ok(m.get('reverbgo_http_requests_total', { endpoint: '/apps/:app_id/events', code: '401' }) >= 1);
    assert.ok(m.get('reverbgo_http_requests_total', { endpoint: '/apps/:app_id/channels/:channel', code: '200' }) >= 1);
    // Labels stay bounded: no channel names or user ids anywhere in the scrape.
    for (const s of m.samples) {
      for (const v of Object.values(s.labels)) {
        assert.ok(!v.includes(news) && !v.includes(room) && !v.includes('u-1'), `${s.name} carries ${v}`);
      }
    }

    const closed = { ...app, reason: 'client_gone' };
    a.disconnect();
    await eventually(async () => (await metrics()).get('reverbgo_connections_closed_total', closed) >= c0('reverbgo_connections_closed_total', closed) + 1, { what: 'close counted as client_gone' });
    await eventually(async () => (await metrics()).get('reverbgo_presence_members', app) - c0('reverbgo_presence_members', app) === 1, { what: 'presence member gone' });
  });

  test('client messages, rate-limit refusals and refused connections are counted', async (t) => {
    const bag = cleanup(t);
    const before = await metrics();
    const app = { app: APP.app_id };
    const w = await Wire.connect(server);
    bag.add(() => w.close());
    const ch = uid('private-rl-');
    w.send({ event: 'pusher:subscribe', data: { channel: ch, auth: sdk(server).authorizeChannel(w.socketId, ch).auth } });
    await w.next({ event: 'pusher_internal:subscription_succeeded' });
    for (let i = 0; i < 4; i++) w.send({ event: 'client-x', channel: ch, data: {} });
    await w.next({ event: 'pusher:error' });
    const unknown = await Wire.open(server, { key: 'no-such-key' });
    bag.add(() => unknown.ws.close());
    await unknown.closed;

    await eventually(async () => {
      const m = await metrics();
      return m.get('reverbgo_client_messages_received_total', app) - (before.get('reverbgo_client_messages_received_total', app) || 0) >= 5 &&
        m.get('reverbgo_rate_limit_refusals_total', { ...app, limit: 'client_events' }) - (before.get('reverbgo_rate_limit_refusals_total', { ...app, limit: 'client_events' }) || 0) === 2 &&
        m.get('reverbgo_connections_refused_total', { app: '', reason: 'app_not_found' }) >= 1;
    }, { what: 'client messages, 2 rate-limit refusals and an app_not_found refusal' });
  });
});

describe('metrics off by default, and on a listener of its own', () => {
  test('without metrics.enabled there is no /metrics', async (t) => {
    const server = await startWith({});
    cleanup(t).add(() => server.stop());
    assert.equal((await fetch(`${server.url}/metrics`)).status, 404);
  });

  test('metrics.listen serves /metrics there (token still required), not on the main listener', async (t) => {
    const mport = await freePort();
    const server = await startWith({ metrics: { enabled: true, listen: `127.0.0.1:${mport}`, token: TOKEN } });
    cleanup(t).add(() => server.stop());
    assert.equal((await fetch(`${server.url}/metrics`)).status, 404);
    const murl = `http://127.0.0.1:${mport}/metrics`;
    assert.equal((await scrape(murl)).status, 401);
    const p = pusherClient(server);
    cleanup(t).add(() => p.disconnect());
    await whenConnected(p);
    const r = await scrape(murl, TOKEN);
    assert.equal(r.status, 200);
    assert.ok(promtoolCheck(r.text).ok);
    assert.ok(parse(r.text).get('reverbgo_connections', { app: APP.app_id }) >= 1);
  });

  test('without a token the endpoint is open', async (t) => {
    const mport = await freePort();
    const server = await startWith({ metrics: { enabled: true, listen: `127.0.0.1:${mport}` } });
    cleanup(t).add(() => server.stop());
    const r = await scrape(`http://127.0.0.1:${mport}/metrics`);
    assert.equal(r.status, 200);
    assert.ok(parse(r.text).get('reverbgo_build_info') === 1);
  });
});

test('webhook deliveries move: a receiver that fails once counts failed, retried, then delivered', async (t) => {
  const bag = cleanup(t);
  let calls = 0;
  const receiver = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      calls++;
      res.writeHead(calls === 1 ? 500 : 200).end();
    });
  });
  await new Promise((resolve) => receiver.listen(0, '127.0.0.1', resolve));
  bag.add(() => new Promise((resolve) => receiver.close(resolve)));
  const hookApp = { ...APP, webhooks: [{ url: `http://127.0.0.1:${receiver.address().port}/hook`, event_types: ['channel_occupied'] }] };
  const port = await freePort();
  const serverKeys = { host: '127.0.0.1', port };
  const server = await startServer({ server: serverKeys, apps: [hookApp], config: { server: serverKeys, apps: [hookApp], metrics: { enabled: true } } });
  bag.add(() => server.stop());
  const w = await Wire.connect(server);
  bag.add(() => w.close());
  w.send({ event: 'pusher:subscribe', data: { channel: uid('hooked-') } });
  await w.next({ event: 'pusher_internal:subscription_succeeded' });
  const m = await eventually(async () => {
    const p = parse((await scrape(`${server.url}/metrics`)).text);
    return p.get('reverbgo_webhook_deliveries_total', { result: 'delivered' }) === 1 ? p : null;
  }, { ms: 15000, what: 'the webhook delivered after one retry' });
  assert.equal(m.get('reverbgo_webhook_deliveries_total', { result: 'failed' }), 1);
  assert.equal(m.get('reverbgo_webhook_deliveries_total', { result: 'retried' }), 1);
  assert.equal(m.get('reverbgo_webhook_deliveries_total', { result: 'dropped' }), 0);
  assert.equal(m.get('reverbgo_webhook_outbox_size'), 0);
  assert.equal(calls, 2);
});
