'use strict';
// Starts the built reverbgo binary on a free port with a generated config, exactly as a user
// would (`reverbgo start --config PATH`), and stops it after the test file.
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');

const BIN = process.env.REVERBGO_BIN || path.resolve(__dirname, '../../bin/reverbgo');

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

// The binary reads Laravel's REVERB_* / REDIS_* variables; a developer's shell must not leak
// them into a test's server, so they are dropped from the inherited environment.
function childEnv(extra = {}) {
  const env = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (!/^(REVERB_|REDIS_)/.test(k)) env[k] = v;
  }
  return { ...env, ...extra };
}

const defaultApps = () => [
  { app_id: 'app1', key: 'app1-key', secret: 'app1-secret', accept_client_events_from: 'members',
    toolmark: { enabled: true, call_timeout_ms: 30000, max_timeout_ms: 600000 } },
  { app_id: 'app2', key: 'app2-key', secret: 'app2-secret', accept_client_events_from: 'none' },
];

// yaml writes a plain JS value as YAML (JSON is valid YAML 1.2 flow style).
function yaml(obj) {
  return JSON.stringify(obj, null, 2) + '\n';
}

async function waitUp(url, ms) {
  const deadline = Date.now() + ms;
  let last;
  while (Date.now() < deadline) {
    try {
      // Each attempt is bounded: a port whose listener accepts but never answers (a
      // process at its file limit, another one on the port) must fail the wait, not hang it.
      const res = await fetch(url, { signal: AbortSignal.timeout(2000) });
      if (res.ok) return;
      last = new Error(`status ${res.status}`);
    } catch (err) {
      last = err;
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`reverbgo did not come up at ${url}: ${last}`);
}

/**
 * startServer({apps, server, args, env, port, config}) →
 *   {port, host, url, prefix, tls, wsUrl, apps, app, proc, exited, logs(), stop(signal)}
 * apps: list of app objects in config.yaml form (defaults: app1 with client events and
 * toolmark, app2 with client events off). server: extra server.* keys (path, tls, port, ...).
 * args/env: extra CLI flags and environment for the binary. port: where it is expected to
 * listen when args/env override the file's port. config: a whole config object instead.
 * url/wsUrl use https/wss when server.tls.cert is set.
 */
async function startServer(opts = {}) {
  if (twoNodes(opts)) return startTwoNodes(opts);
  return startNode(opts);
}

/**
 * E2E_NODES=2 (scripts/test.sh sets it for its second run of the Echo tests): a plain
 * startServer starts two nodes with scaling on, sharing the Redis of REVERBGO_TEST_REDIS_URL
 * under a pub/sub prefix of their own. The returned object is node A (so server.port,
 * logs(), stop() work as usual, stop() stopping both) with server.nodes = [A, B]; the client
 * helpers (clients.js, wire.js, rawapi.js) take each new client's node from pick(server),
 * alternately, so sockets, Echo clients and the HTTP API land on different nodes. Servers
 * started with their own config, CLI args, environment, port or TLS stay single.
 */
function twoNodes(opts) {
  if (process.env.E2E_NODES !== '2') return false;
  if (opts.config || opts.args || opts.env || opts.port || opts.nodes === 1) return false;
  const srv = opts.server || {};
  return !srv.tls && !srv.port;
}

async function startTwoNodes(opts) {
  const url = process.env.REVERBGO_TEST_REDIS_URL;
  if (!url) throw new Error('E2E_NODES=2 needs REVERBGO_TEST_REDIS_URL (a redis-server both nodes share)');
  const scaling = { enabled: true, redis_url: url, channel: `e2e-${process.pid}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 6)}` };
  const a = await startNode({ ...opts, scalingConfig: scaling });
  let b;
  try {
    b = await startNode({ ...opts, scalingConfig: scaling });
  } catch (err) {
    await a.stop();
    throw err;
  }
  const stopA = a.stop;
  let next = 0;
  return Object.assign(a, {
    nodes: [a, b],
    nextNode: () => [a, b][next++ % 2],
    logs: () => `--- node A\n${a.logsOf()}\n--- node B\n${b.logsOf()}`,
    async stop(signal) {
      const [ra] = await Promise.all([stopA(signal), b.stop(signal)]);
      return ra;
    },
  });
}

/**
 * pick(server): where the next client connects. The server itself, or with two nodes each
 * node in turn. Returns {host, port, url, wsUrl, prefix, tls}.
 */
function pick(server) {
  return server && server.nextNode ? server.nextNode() : server;
}

async function startNode(opts = {}) {
  // opts.port: where the server is expected to listen when args/env override the file's port.
  const filePort = (opts.server && opts.server.port) || (await freePort());
  const port = opts.port || filePort;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'reverbgo-e2e-'));
  const apps = opts.apps || defaultApps();
  const config = opts.config || { server: { host: '127.0.0.1', ...(opts.server || {}), port: filePort }, apps };
  // No drain on SIGTERM unless a test asks for one (server.drain_delay/drain_period default
  // to 5 and 10 s): every stop() would otherwise wait for it.
  config.server = { drain_delay: 0, drain_period: 0, ...(config.server || {}) };
  if (opts.scalingConfig) config.scaling = opts.scalingConfig;
  const file = path.join(dir, 'config.yaml');
  fs.writeFileSync(file, yaml(config));
  const args = ['start', '--config', file, ...(opts.args || [])];
  const proc = spawn(BIN, args, { stdio: ['ignore', 'pipe', 'pipe'], env: childEnv(opts.env) });
  let out = '';
  proc.stdout.on('data', (d) => (out += d));
  proc.stderr.on('data', (d) => (out += d));
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  const prefix = (opts.server && opts.server.path) || '';
  const tls = Boolean(config.server && config.server.tls && config.server.tls.cert);
  const url = `${tls ? 'https' : 'http'}://127.0.0.1:${port}${prefix}`;
  try {
    await Promise.race([
      waitUp(`${url}/up`, 10000),
      exited.then(({ code }) => { throw new Error(`reverbgo exited with ${code}:\n${out}`); }),
    ]);
  } catch (err) {
    proc.kill('SIGKILL');
    throw err;
  }
  return {
    port,
    host: '127.0.0.1',
    url,
    prefix,
    tls,
    wsUrl: `${tls ? 'wss' : 'ws'}://127.0.0.1:${port}${prefix}`,
    apps,
    app: apps[0],
    file, // the config file: a test may rewrite it and send SIGHUP
    proc,
    exited,
    logs: () => out,
    logsOf: () => out,
    async stop(signal = 'SIGTERM') {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill(signal);
      const timer = setTimeout(() => proc.kill('SIGKILL'), 15000);
      const res = await exited;
      clearTimeout(timer);
      fs.rmSync(dir, { recursive: true, force: true });
      return res;
    },
  };
}

/**
 * Runs the binary once with args (e.g. ['start', '--config', file]) and resolves
 * {code, signal, stdout, stderr} when it exits; kills it after ms (a config error must
 * stop start-up, so a process still running then is itself a failure the caller sees).
 */
function runBinary(args, { env = {}, ms = 10000 } = {}) {
  return new Promise((resolve) => {
    const proc = spawn(BIN, args, { stdio: ['ignore', 'pipe', 'pipe'], env: childEnv(env) });
    let stdout = '';
    let stderr = '';
    proc.stdout.on('data', (d) => (stdout += d));
    proc.stderr.on('data', (d) => (stderr += d));
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      proc.kill('SIGKILL');
    }, ms);
    proc.on('exit', (code, signal) => {
      clearTimeout(timer);
      // give the pipes a tick to drain
      setImmediate(() => resolve({ code, signal, stdout, stderr, timedOut }));
    });
  });
}

/** Writes a config file (object → YAML/JSON, or a raw YAML string) to a temp dir. */
function writeConfig(config) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'reverbgo-e2e-cfg-'));
  const file = path.join(dir, 'config.yaml');
  fs.writeFileSync(file, typeof config === 'string' ? config : yaml(config));
  return { file, dir, remove: () => fs.rmSync(dir, { recursive: true, force: true }) };
}

module.exports = { startServer, pick, freePort, runBinary, writeConfig, waitUp, childEnv, BIN };
