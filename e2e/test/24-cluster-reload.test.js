'use strict';
// Issue 20 fault 2 end to end: a Toolmark page reloading on node A (its old socket leaves
// private-toolmark.{user}.{conv} while the new one subscribes) must stay visible to node B:
// B's HTTP API counts it and B's bridge calls it instead of answering "No page is connected".
// Before the fix, the older of the two written-through counts could land last in Redis and
// stay there (the page subscribed, the cluster's count 0) until the channel changed again.
const { describe, test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { sdk, apiGet, pusherClient, whenConnected, subscribe, inbox } = require('../lib/clients');
const { startTopology, startNodes, haveRedis } = require('../lib/cluster');
const { startAuthApp } = require('../lib/authapp');
const { agent, toolmarkChannelPolicy, openPage } = require('../lib/toolmark');
const { Wire } = require('../lib/wire');
const { uid, eventually, quiet } = require('../lib/util');

const APP = { app_id: 'rl', key: 'rl-key', secret: 'rl-secret', toolmark: { enabled: true, call_timeout_ms: 8000 } };
const TOOLS = [{ name: 'notes.list', llmName: 'notes__list', description: 'List notes', hints: { readOnly: true } }];
const ROUNDS = 200;

describe('a page reload across two nodes', { skip: !haveRedis('standalone') && 'Redis binaries not installed' }, () => {
  let topo, nodes, authApp;
  const users = { t1: { id: 'u1', conversations: new Set() } };
  before(async () => {
    topo = await startTopology('standalone');
    nodes = await startNodes(topo, 2, { apps: [APP] });
    authApp = await startAuthApp({ sdk: sdk(nodes[0], APP), users, deny: toolmarkChannelPolicy });
  });
  after(async () => {
    await authApp?.close();
    if (nodes) await nodes.stopAll();
    if (topo) await topo.stop();
  });

  test(`${ROUNDS} reloads on node A: node B always sees the page, and its bridge calls it`, async () => {
    const [a, b] = nodes;
    const conv = uid('c');
    users.t1.conversations.add(conv);
    const channel = `private-toolmark.u1.${conv}`;
    const page = await openPage(a, { authApp, token: 't1', user: 'u1', conv, app: APP });
    assert.equal((await page.manifest(1, TOOLS)).status, 204);
    const fromB = sdk(b, APP);
    const countOnB = async () => (await apiGet(fromB, `/channels/${channel}`, { info: 'subscription_count' })).subscription_count;
    // The reloads run on raw sockets so that the old socket's leave and the new one's
    // subscribe reach node A in the same instant, as a browser's reload does at worst.
    let cur = await Wire.connect(a, { app: APP });
    assert.equal((await cur.authSubscribe(channel)).event, 'pusher_internal:subscription_succeeded');
    page.close();
    await eventually(async () => (await countOnB()) === 1, { ms: 3000, what: 'node B counting one socket' });
    for (let r = 0; r < ROUNDS; r++) {
      const old = cur;
      cur = await Wire.connect(a, { app: APP });
      const signed = cur.authSubscribe(channel);
      old.send({ event: 'pusher:unsubscribe', data: { channel } });
      assert.equal((await signed).event, 'pusher_internal:subscription_succeeded');
      await old.roundTrip(); // the unsubscribe was handled
      old.close();
      await eventually(async () => (await countOnB()) === 1, { ms: 3000, what: `round ${r}: node B counting the one page` });
    }
    // Node B's bridge sends the call to the page on node A (which does not answer: a timeout,
    // never "No page is connected").
    const res = await agent(b, APP).call({ user_id: 'u1', conversation_id: conv, tool: 'notes.list', input: null, timeout_ms: 300 });
    assert.notDeepEqual(res.body?.result, { status: 'error', message: 'No page is connected' }, res.text);
    const frame = await cur.next({ event: 'toolmark.message' });
    assert.equal(frame.data.message.type, 'call');
    cur.close();
  });
});

describe('a node paused past node_timeout', { skip: !haveRedis('standalone') && 'Redis binaries not installed' }, () => {
  const PRES = [{ app_id: 'ps', key: 'ps-key', secret: 'ps-secret' }];
  let topo, nodes;
  before(async () => {
    topo = await startTopology('standalone');
    nodes = await startNodes(topo, 2, { apps: PRES, scaling: { node_timeout: 2 } });
  });
  after(async () => {
    if (nodes) await nodes.stopAll();
    if (topo) await topo.stop();
  });

  // Issue 20 fault 7: the survivor reaps the paused node (member_removed); when it wakes, its
  // memberships are joined again and the user is announced back (member_added, once), so the
  // survivor's clients and the HTTP API agree with Redis again.
  test('is reaped (member_removed), then announces its users back (member_added)', async (t) => {
    const [a, b] = nodes;
    const room = uid('presence-pause.');
    const pa = pusherClient(a, { user: { id: 'u1', info: { name: 'u1' } } });
    const pb = pusherClient(b, { user: { id: 'u2', info: { name: 'u2' } } });
    t.after(() => { pa.disconnect(); pb.disconnect(); });
    await whenConnected(pa);
    await whenConnected(pb);
    await subscribe(pa, room);
    const { channel: bRoom } = await subscribe(pb, room);
    await eventually(() => Object.keys(bRoom.members.members).length === 2, { what: 'b sees u1 and u2' });
    const removed = inbox(bRoom, 'pusher:member_removed');
    const added = inbox(bRoom, 'pusher:member_added');
    process.kill(a.proc.pid, 'SIGSTOP');
    try {
      await removed.wait(1, 10000);
    } finally {
      process.kill(a.proc.pid, 'SIGCONT');
    }
    await added.wait(1, 10000);
    assert.deepEqual(added.got.map((m) => m.id), ['u1']);
    await eventually(async () => {
      const body = await apiGet(sdk(b, PRES[0]), `/channels/${room}/users`);
      return body.users.map((u) => u.id).sort().join() === 'u1,u2';
    }, { what: 'the API lists u1 again' });
    await quiet(1000);
    assert.equal(added.got.length, 1, 'member_added once');
    assert.deepEqual(Object.keys(bRoom.members.members).sort(), ['u1', 'u2']);
  });
});
