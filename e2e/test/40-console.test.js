'use strict';
// The debug console in real headless Chromium (Debian's /usr/bin/chromium driven by
// playwright-core, never a downloaded browser) against the built binary: login and refusals,
// live connections, subscriptions, API triggers, presence members, a Toolmark call from a
// simulated page, and the test-event form received by pusher-js. Screenshots of every view go
// to e2e/artifacts/console/ (git-ignored).
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { chromium } = require('playwright-core');
const { startServer, freePort, runBinary, writeConfig } = require('../lib/server');
const { sdk, pusherClient, whenConnected, subscribe, inbox, state } = require('../lib/clients');
const { startAuthApp } = require('../lib/authapp');
const { agent, toolmarkChannelPolicy, openPage, startHookReceiver } = require('../lib/toolmark');
const { uid, eventually, WAIT_MS } = require('../lib/util');

const TOKEN = `console-token-${uid()}`;
const ARTIFACTS = path.resolve(__dirname, '../artifacts/console');
const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];
const APP1 = { app_id: 'con1', key: 'con1-key', secret: 'con1-secret-never-shown', toolmark: { enabled: true, call_timeout_ms: 15000 } };
const APP2 = { app_id: 'con2', key: 'con2-key', secret: 'con2-secret' };

let server, browser, page, authApp, userDataDir, hook;
const clients = [];
const users = { tk1: { id: 'u1', conversations: new Set() } };

async function launch() {
  if (!fs.existsSync('/usr/bin/chromium')) throw new Error('these tests need Debian\'s chromium at /usr/bin/chromium (apt-get install chromium)');
  userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'reverbgo-chromium-'));
  return chromium.launchPersistentContext(userDataDir, {
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: CHROMIUM_ARGS,
    viewport: { width: 1280, height: 800 },
  });
}

async function startConsoleServer(apps) {
  const port = await freePort();
  return startServer({ server: { port }, config: { server: { host: '127.0.0.1', port }, console: { enabled: true, token: TOKEN }, apps } });
}

const shot = (name) => page.screenshot({ path: path.join(ARTIFACTS, `${name}.png`), fullPage: true });
const view = async (name) => page.click(`#tabs button[data-view="${name}"]`);
/** Waits for a row of `table` (tbody id) containing every text in `texts`. */
async function row(table, ...texts) {
  let loc = page.locator(`#${table} tr`);
  for (const t of texts) loc = loc.filter({ hasText: t });
  await loc.first().waitFor({ timeout: WAIT_MS });
  return loc.first();
}

before(async () => {
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  hook = await startHookReceiver();
  APP1.webhooks = [{ url: hook.url, event_types: ['channel_occupied'] }];
  server = await startConsoleServer([APP1, APP2]);
  authApp = await startAuthApp({ sdk: sdk(server, APP1), users, deny: toolmarkChannelPolicy });
  browser = await launch();
  page = browser.pages()[0] || (await browser.newPage());
});

after(async () => {
  for (const c of clients) c.disconnect();
  await browser?.close();
  if (userDataDir) fs.rmSync(userDataDir, { recursive: true, force: true });
  await authApp?.close();
  await server?.stop();
  await hook?.close();
});

test('refused without a session and with a wrong token; the right token logs in with a safe cookie', async () => {
  await page.goto(`${server.url}/console`);
  await page.locator('input[name="token"][type="password"]').waitFor();
  // Every data endpoint and the stream answer 401 without the session.
  const statuses = await page.evaluate(async () => Promise.all([
    fetch('/console/api/session').then((r) => r.status),
    fetch('/console/api/stream?app=con1').then((r) => r.status),
    fetch('/console/api/trigger', { method: 'POST', body: '{}' }).then((r) => r.status),
  ]));
  assert.deepEqual(statuses, [401, 401, 401]);
  await shot('login');

  await page.fill('input[name="token"]', 'wrong-token');
  await page.click('button[type="submit"]');
  await page.locator('.error', { hasText: 'Wrong token' }).waitFor();
  await page.locator('input[name="token"][type="password"]').waitFor();
  assert.equal((await browser.cookies()).filter((c) => c.name === 'reverbgo_console').length, 0);

  await page.fill('input[name="token"]', TOKEN);
  await page.click('button[type="submit"]');
  await page.locator('#picker').waitFor(); // two apps: the picker
  const [cookie] = (await browser.cookies()).filter((c) => c.name === 'reverbgo_console');
  assert.ok(cookie, 'session cookie set');
  assert.equal(cookie.httpOnly, true);
  assert.equal(cookie.sameSite, 'Strict');
  assert.equal(cookie.path, '/console');
  assert.match(cookie.value, /^[0-9a-f]{64}$/);
  assert.ok(!cookie.value.includes(TOKEN));
  assert.ok(!(await page.content()).includes(TOKEN), 'the token is not in the page');
  await shot('picker');
  await page.click('#app-list button:text-is("con1")');
  await page.locator('#live.on').waitFor();
});

test('state-changing requests need the page header and a same-origin Origin', async () => {
  const noHeader = await page.evaluate(async () => (await fetch('/console/api/trigger', {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ app: 'con1', channel: 'x', event: 'e', data: '{}' }),
  })).status);
  assert.equal(noHeader, 403);
  // The right header from another origin (a node client replaying the cookie) is refused too.
  const [cookie] = (await browser.cookies()).filter((c) => c.name === 'reverbgo_console');
  const session = await (await fetch(`${server.url}/console/api/session`, { headers: { Cookie: `reverbgo_console=${cookie.value}` } })).json();
  const evil = await fetch(`${server.url}/console/api/trigger`, {
    method: 'POST',
    headers: { Cookie: `reverbgo_console=${cookie.value}`, 'X-Console-CSRF': session.csrf, Origin: 'http://evil.example', 'Content-Type': 'application/json' },
    body: JSON.stringify({ app: 'con1', channel: 'x', event: 'e', data: '{}' }),
  });
  assert.equal(evil.status, 403);
});

let channel, client;
test('a pusher-js client connecting and subscribing shows in the event log and the channels view', async () => {
  channel = uid('orders-');
  client = pusherClient(server, { app: APP1 });
  clients.push(client);
  const socketId = await whenConnected(client);
  await subscribe(client, channel);
  await view('events');
  await row('events', 'connection_opened', socketId);
  await row('events', 'subscribed', channel);
  await view('channels');
  const r = await row('channels', channel, 'public');
  assert.match(await r.innerText(), /\b1\b/);
  // channel_occupied went to the app's webhook: the batch shows as sent.
  await hook.wait(1);
  await view('events');
  await row('events', 'webhook_sent', hook.url);
  await view('overview');
  await eventually(async () => Number(await page.textContent('#s-connections')) >= 1, { what: 'connections ≥ 1' });
  assert.equal(await page.textContent('#s-wh-sent'), '1');
});

test('the overview shows messages out and deliveries per second', async () => {
  const pusher = sdk(server, APP1);
  await view('overview');
  for (let i = 0; i < 5; i++) await pusher.trigger(channel, 'tick', { i });
  await eventually(async () => Number(await page.textContent('#s-out')) >= 1 && Number(await page.textContent('#s-deliveries')) >= 1,
    { what: 'out and deliveries per second ≥ 1' });
});

test('an API trigger appears with its event name, size and data; encrypted payloads never do', async () => {
  const pusher = sdk(server, APP1);
  await pusher.trigger(channel, 'order.shipped', { id: 42, note: 'hello-from-the-api' });
  const encrypting = sdk(server, APP1, { encryptionMasterKeyBase64: Buffer.alloc(32, 7).toString('base64') });
  await encrypting.trigger('private-encrypted-vault', 'secret.event', { payload: 'ENCRYPTED-SECRET-PAYLOAD' });
  await view('events');
  const r = await row('events', 'api_trigger', 'order.shipped');
  assert.match(await r.innerText(), /hello-from-the-api/);
  await row('events', 'private-encrypted-vault', 'not shown');
  const text = await page.innerText('body');
  assert.ok(!text.includes('ENCRYPTED-SECRET-PAYLOAD'));
  assert.ok(!text.includes(APP1.secret));
  // Clicking a channel filters the log to it.
  await view('channels');
  await (await row('channels', channel)).click();
  await page.locator('#view-events.active').waitFor();
  assert.equal(await page.inputValue('#event-filter'), channel);
  const channelsShown = await page.$$eval('#events tr', (rows) => [...new Set(rows.map((r) => r.dataset.channel))]);
  assert.deepEqual(channelsShown, [channel]);
  await shot('events');
  await page.fill('#event-filter', '');
});

test('presence members are listed with their channel', async () => {
  const room = uid('presence-room-');
  const alice = pusherClient(server, { app: APP1, user: { id: 'alice', info: { name: 'Alice' } } });
  const bob = pusherClient(server, { app: APP1, user: { id: 'bob', info: { name: 'Bob' } } });
  clients.push(alice, bob);
  await subscribe(alice, room);
  await subscribe(bob, room);
  await view('channels');
  await page.fill('#channel-search', 'presence-room');
  const r = await row('channels', room, 'presence', 'alice', 'bob');
  assert.match(await r.innerText(), /\b2\b/);
  await shot('channels');
  await page.fill('#channel-search', '');
});

test('a Toolmark call from a simulated page shows in flight, then with its status and latency', async (t) => {
  const conv = uid('c');
  users.tk1.conversations.add(conv);
  const tmPage = await openPage(server, { authApp, token: 'tk1', user: 'u1', conv, app: APP1 });
  t.after(() => tmPage.close());
  const tools = [{ name: 'notes.create', llmName: 'notes__create', description: 'Create a note', hints: { consequential: true } },
    { name: 'notes.list', llmName: 'notes__list', description: 'List notes', hints: { readOnly: true } }];
  assert.equal((await tmPage.manifest(1, tools)).status, 204);
  await view('toolmark');
  await row('tm-convs', conv, 'notes.create', 'consequential', 'notes.list', 'readOnly');

  const pending = agent(server, APP1).call({ user_id: 'u1', conversation_id: conv, tool: 'notes.create', input: { title: 'SECRET-INPUT-VALUE' } });
  const call = await tmPage.next({ type: 'call' });
  const inflight = await row('tm-inflight', 'notes.create', conv);
  assert.match(await inflight.innerText(), /\d+ s/);
  await shot('toolmark-inflight');
  assert.equal((await tmPage.result(call.id, { status: 'ok', data: { id: 7, body: 'SECRET-RESULT-VALUE' } })).status, 204);
  assert.equal((await pending).status, 200);
  const r = await row('tm-recent', 'notes.create', 'ok');
  assert.match(await r.innerText(), /\d+ ms/);
  const text = await page.innerText('body');
  assert.ok(!text.includes('SECRET-INPUT-VALUE') && !text.includes('SECRET-RESULT-VALUE'), 'no input or result values');
  await shot('toolmark');
});

test('the send form triggers an event that pusher-js receives', async () => {
  const box = inbox(client.channel(channel), 'console.test');
  await view('send');
  await page.fill('#send-form input[name="channel"]', channel);
  await page.fill('#send-form input[name="event"]', 'console.test');
  await page.fill('#send-form textarea[name="data"]', '{"from":"the console"}');
  await page.click('#send-form button[type="submit"]');
  await page.locator('#send-result', { hasText: 'Sent.' }).waitFor();
  const [data] = await box.wait(1);
  assert.deepEqual(data, { from: 'the console' });
  await shot('send');
  // A bad channel name is refused as the HTTP API refuses it.
  await page.fill('#send-form input[name="channel"]', 'bad channel!');
  await page.click('#send-form button[type="submit"]');
  await page.locator('#send-result', { hasText: 'Refused (400)' }).waitFor();
  await view('events');
  await row('events', 'console_trigger', 'console.test');
  await shot('events-all');
  await view('overview');
  await page.locator('#chart-line[points*=","]').waitFor();
  await shot('overview');
});

test('closing a client shows its close reason; logging out ends the session', async () => {
  const gone = pusherClient(server, { app: APP1 });
  const socketId = await whenConnected(gone);
  gone.disconnect();
  await state(gone, 'disconnected');
  await view('events');
  await row('events', 'connection_closed', socketId, 'client_gone');
  // A flood past the 50 events per second budget is sampled, and the header says how much.
  const pusher = sdk(server, APP1);
  await Promise.all(Array.from({ length: 120 }, (_, i) => pusher.trigger(channel, 'flood', { i })));
  await page.locator('#dropped', { hasText: /^[1-9]\d* events dropped$/ }).waitFor();
  await page.click('#logout');
  await page.locator('input[name="token"][type="password"]').waitFor();
  assert.equal(await page.evaluate(async () => (await fetch('/console/api/session')).status), 401);
});

test('with one app configured it is selected at once', async (t) => {
  const single = await startConsoleServer([APP2]);
  t.after(() => single.stop());
  const p = await browser.newPage();
  t.after(() => p.close());
  await p.goto(`${single.url}/console`);
  await p.fill('input[name="token"]', TOKEN);
  await p.click('button[type="submit"]');
  await p.locator('#live.on').waitFor();
  assert.equal(await p.isHidden('#picker'), true);
  assert.equal(await p.isVisible('#view-overview'), true);
});

test('start-up refuses an enabled console without a token, naming the key', async (t) => {
  const cfg = writeConfig({ server: { host: '127.0.0.1', port: await freePort() }, console: { enabled: true, token: '' }, apps: [APP2] });
  t.after(cfg.remove);
  const res = await runBinary(['start', '--config', cfg.file]);
  assert.equal(res.code, 1, res.stderr);
  assert.match(res.stderr, /console\.token: is required when console\.enabled is true/);
});

test('a disabled console is not served', async (t) => {
  const plain = await startServer({ apps: [APP2] });
  t.after(() => plain.stop());
  assert.equal((await fetch(`${plain.url}/console`)).status, 404);
  assert.equal((await fetch(`${plain.url}/console/api/session`)).status, 404);
});
