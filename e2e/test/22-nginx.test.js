'use strict';
// deploy/nginx.conf (the nginx of deploy/docker-compose.yml) in front of two built binaries
// with scaling on a real Redis, run with Debian's nginx: only the listen port, the upstream
// addresses and this run's writable paths are substituted. pusher-js connects through it,
// the `pusher` SDK triggers and queries through it, and signatures stay valid through the
// proxy (paths with escaped characters, signed query strings).
const { describe, test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { sdk, apiGet, outcome, pusherClient, whenConnected, subscribe, inbox } = require('../lib/clients');
const { startTopology, startNodes, haveRedis } = require('../lib/cluster');
const { NGINX, startNginx } = require('../lib/nginx');
const { cleanup, uid, eventually } = require('../lib/util');

const APPS = [{ app_id: 'ngx', key: 'ngx-key', secret: 'ngx-secret', accept_client_events_from: 'members' }];

describe('deploy/nginx.conf in front of two nodes', { skip: (!NGINX && 'nginx not installed') || (!haveRedis() && 'redis not installed') }, () => {
  let topo;
  let nodes;
  let nginx;
  let proxy; // what the clients see: one "server" at nginx's address
  before(async () => {
    topo = await startTopology('standalone');
    nodes = await startNodes(topo, 2, { apps: APPS });
    nginx = await startNginx(nodes.map((n) => n.port));
    proxy = { host: '127.0.0.1', port: nginx.port, prefix: '', tls: false, app: APPS[0], url: `http://127.0.0.1:${nginx.port}` };
  });
  after(async () => {
    if (nginx) await nginx.stop();
    if (nodes) await nodes.stopAll();
    if (topo) await topo.stop();
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
