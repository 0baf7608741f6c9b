'use strict';
// Real Redis topologies (scripts/redis-topologies.sh, the same script .ci/run uses) and
// several reverbgo nodes on one of them.
const { execFile } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { startServer, freePort } = require('./server');

const SCRIPT = path.resolve(__dirname, '../../scripts/redis-topologies.sh');

function run(args) {
  return new Promise((resolve, reject) => {
    execFile('bash', [SCRIPT, ...args], { timeout: 180000 }, (err, stdout, stderr) => {
      if (err) reject(new Error(`redis-topologies.sh ${args.join(' ')} failed: ${stderr || err.message}`));
      else resolve(stdout);
    });
  });
}

/** True when the Redis binaries the topologies need are installed. */
function haveRedis(kind = 'standalone') {
  const need = kind === 'sentinel' ? ['redis-server', 'redis-sentinel', 'redis-cli'] : ['redis-server', 'redis-cli'];
  const dirs = (process.env.PATH || '').split(path.delimiter);
  return need.every((bin) => dirs.some((d) => fs.existsSync(path.join(d, bin))));
}

/**
 * startTopology('standalone' | 'sentinel' | 'cluster') → {kind, dir, vars, scaling, stop()}.
 * vars are the script's KEY=value lines; scaling is the matching `scaling:` topology key.
 */
async function startTopology(kind) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `reverbgo-redis-${kind}-`));
  let out;
  try {
    out = await run(['start', kind, dir]);
  } catch (err) {
    fs.rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  const vars = {};
  for (const line of out.split('\n')) {
    const m = /^([A-Z_]+)=(.*)$/.exec(line.trim());
    if (m) vars[m[1]] = m[2];
  }
  let scaling;
  if (kind === 'standalone') scaling = { redis_url: vars.REDIS_URL };
  if (kind === 'sentinel') scaling = { redis_sentinel: { master_name: vars.SENTINEL_MASTER, addrs: vars.SENTINEL_ADDRS.split(',') } };
  if (kind === 'cluster') scaling = { redis_cluster: { addrs: vars.CLUSTER_ADDRS.split(',') } };
  return {
    kind,
    dir,
    vars,
    scaling,
    async stop() {
      await run(['stop', dir]).catch(() => {});
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * startNodes(topology, n, {apps, scaling, extra}) → n started reverbgo binaries sharing the
 * topology (scaling.enabled, a fresh scaling.channel so runs never meet), plus stopAll().
 * extra is merged into each node's config (e.g. {metrics: {enabled: true}}).
 */
async function startNodes(topology, n, { apps, scaling = {}, channel, extra = {} } = {}) {
  const ch = channel || `e2e${Date.now().toString(36)}${Math.floor(Math.random() * 1e6)}`;
  const nodes = [];
  try {
    for (let i = 0; i < n; i++) {
      const port = await freePort();
      const cfg = { ...extra, server: { host: '127.0.0.1', port }, apps, scaling: { enabled: true, ...topology.scaling, channel: ch, ...scaling } };
      nodes.push(await startServer({ apps, server: { port }, config: cfg }));
    }
  } catch (err) {
    await Promise.all(nodes.map((s) => s.stop('SIGKILL')));
    throw err;
  }
  nodes.stopAll = () => Promise.all(nodes.map((s) => s.stop()));
  nodes.channel = ch;
  return nodes;
}

module.exports = { startTopology, startNodes, haveRedis };
