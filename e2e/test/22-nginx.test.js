'use strict';
// deploy/nginx.conf (the nginx of deploy/docker-compose.yml) in front of two built binaries
// with scaling on a real Redis, run with Debian's nginx: only the listen port, the upstream
// addresses and this run's writable paths are substituted. pusher-js connects through it,
// the `pusher` SDK triggers and queries through it, and signatures stay valid through the
// proxy (paths with escaped characters, signed query strings).
const { describe, test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { sdk, apiGet, outcome, pusherClient, whenConnected, subscribe, inbox } = require('../lib/clients');
const { startTopology, startNodes, haveRedis } = require('../lib/cluster');
const { freePort, waitUp } = require('../lib/server');
const { cleanup, uid, eventually } = require('../lib/util');

const APPS = [{ app_id: 'ngx', key: 'ngx-key', secret: 'ngx-secret', accept_client_events_from: 'members' }];
const CONF = path.resolve(__dirname, '../../deploy/nginx.conf');
const NGINX = ['/usr/sbin/nginx', '/usr/bin/nginx', '/usr/local/sbin/nginx'].find((p) => fs.existsSync(p));

/** deploy/nginx.conf with this run's port, upstreams and writable paths. */
function testConfig(text, { port, upstreams, dir }) {
  let out = text.replace(/listen 80;/, `listen 127.0.0.1:${port};`);
  out = out.replace('server reverbgo1:8080', `server 127.0.0.1:${upstreams[0]}`);
  out = out.replace('server reverbgo2:8080', `server 127.0.0.1:${upstreams[1]}`);
  out = out.replace('worker_processes auto;', 'worker_processes 1;');
  assert.ok(out.includes(`127.0.0.1:${port}`) && out.includes(`127.0.0.1:${upstreams[1]}`), 'substitutions applied');
  const paths = ['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi'].map((n) => `    ${n}_temp_path ${dir}/${n};`).join('\n');
  out = out.replace('http {', `http {\n    access_log ${dir}/access.log;\n${paths}\n`);
  const user = process.getuid && process.getuid() === 0 ? 'user root;\n' : '';
  return `${user}pid ${dir}/nginx.pid;\n${out}`;
}

describe('deploy/nginx.conf in front of two nodes', { skip: (!NGINX && 'nginx not installed') || (!haveRedis() && 'redis not installed') }, () => {
  let topo;
  let nodes;
  let nginx;
  let proxy; // what the clients see: one "server" at nginx's address
  let dir;
  before(async () => {
    topo = await startTopology('standalone');
    nodes = await startNodes(topo, 2, { apps: APPS });
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'reverbgo-nginx-'));
    const port = await freePort();
    const file = path.join(dir, 'nginx.conf');
    fs.writeFileSync(file, testConfig(fs.readFileSync(CONF, 'utf8'), { port, upstreams: nodes.map((n) => n.port), dir }));
    let out = '';
    nginx = spawn(NGINX, ['-p', dir, '-c', file, '-e', path.join(dir, 'error.log'), '-g', 'daemon off;'], { stdio: ['ignore', 'pipe', 'pipe'] });
    nginx.stdout.on('data', (d) => (out += d));
    nginx.stderr.on('data', (d) => (out += d));
    const exited = new Promise((resolve) => nginx.on('exit', resolve));
    await Promise.race([
      waitUp(`http://127.0.0.1:${port}/up`, 10000),
      exited.then((code) => {
        throw new Error(`nginx exited with ${code}: ${out} ${fs.existsSync(path.join(dir, 'error.log')) ? fs.readFileSync(path.join(dir, 'error.log'), 'utf8') : ''}`);
      }),
    ]);
    proxy = { host: '127.0.0.1', port, prefix: '', tls: false, app: APPS[0], url: `http://127.0.0.1:${port}` };
  });
  after(async () => {
    if (nginx && nginx.exitCode === null) {
      const done = new Promise((resolve) => nginx.on('exit', resolve));
      nginx.kill('SIGQUIT');
      await done;
    }
    if (nodes) await nodes.stopAll();
    if (topo) await topo.stop();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  test('pusher-js through nginx: private and presence channels, triggers through nginx reach both nodes', async (t) => {
    const bag = cleanup(t);
    const room = uid('presence-ngx.');
    const priv = uid('private-ngx.');
    const a = pusherClient(proxy, { user: { id: 'ua', info: {} } });
    const b = pusherClient(proxy, { user: { id: 'ub', info: {} } });
    bag.add(() => a.disconnect());
    bag.add(() => b.disconnect());
    await whenConnected(a);
    await whenConnected(b);
    // Whichever node nginx picked for each socket, the cluster-wide count sees both.
    await eventually(async () => (await apiGet(sdk(proxy), '/connections')).connections === 2, { what: 'two connections' });
    const { channel: aPriv } = await subscribe(a, priv);
    const { channel: bPriv } = await subscribe(b, priv);
    const { channel: aRoom } = await subscribe(a, room);
    await subscribe(b, room);
    await eventually(() => aRoom.members.count === 2, { what: 'both members seen through nginx' });
    const gotA = inbox(aPriv, 'ev');
    const gotB = inbox(bPriv, 'ev');
    const api = sdk(proxy);
    const res = await api.trigger(priv, 'ev', { via: 'nginx' });
    assert.equal(res.status, 200);
    assert.deepEqual((await gotA.wait(1))[0], { via: 'nginx' });
    assert.deepEqual((await gotB.wait(1))[0], { via: 'nginx' });
    await api.triggerBatch([{ channel: priv, name: 'ev', data: JSON.stringify({ n: 1 }) }, { channel: priv, name: 'ev', data: JSON.stringify({ n: 2 }) }]);
    assert.deepEqual((await gotB.wait(3)).slice(1), [{ n: 1 }, { n: 2 }]);
    // A client event goes through nginx and the other node to the other member.
    const whisper = inbox(bPriv, 'client-typing');
    aPriv.trigger('client-typing', { who: 'ua' });
    assert.deepEqual((await whisper.wait(1))[0], { who: 'ua' });
  });

  test('signatures stay valid through the proxy; a wrong one is still refused', async () => {
    const api = sdk(proxy);
    // Characters the SDK percent-encodes in the path (= @ , ;) and a signed query string.
    const odd = uid('presence-a=b@c,d;e.');
    const users = await outcome(api.get({ path: `/channels/${odd}/users` }));
    assert.equal(users.status, 200, JSON.stringify(users.body));
    assert.deepEqual(users.body, { users: [] });
    const list = await outcome(api.get({ path: '/channels', params: { filter_by_prefix: 'presence-', info: 'user_count' } }));
    assert.equal(list.status, 200, JSON.stringify(list.body));
    const wrong = sdk(proxy, { ...APPS[0], secret: 'not-the-secret' });
    const refused = await outcome(wrong.get({ path: '/channels' }));
    assert.equal(refused.status, 401);
  });
});
