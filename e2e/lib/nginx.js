'use strict';
// deploy/nginx.conf run with Debian's nginx in front of test servers: only the listen port,
// the upstream addresses and this run's writable paths are substituted.
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { freePort, waitUp } = require('./server');

const CONF = path.resolve(__dirname, '../../deploy/nginx.conf');
const NGINX = ['/usr/sbin/nginx', '/usr/bin/nginx', '/usr/local/sbin/nginx'].find((p) => fs.existsSync(p));

/** deploy/nginx.conf with this run's port, upstreams (two ports) and writable paths. */
function nginxConfig(text, { port, upstreams, dir }) {
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

/**
 * startNginx(upstreams) → {port, dir, stop()}: nginx with deploy/nginx.conf in front of the
 * two upstream ports (the same port twice for a single node), up once /up answers.
 */
async function startNginx(upstreams) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'reverbgo-nginx-'));
  const port = await freePort();
  const file = path.join(dir, 'nginx.conf');
  fs.writeFileSync(file, nginxConfig(fs.readFileSync(CONF, 'utf8'), { port, upstreams, dir }));
  let out = '';
  const proc = spawn(NGINX, ['-p', dir, '-c', file, '-e', path.join(dir, 'error.log'), '-g', 'daemon off;'], { stdio: ['ignore', 'pipe', 'pipe'] });
  proc.stdout.on('data', (d) => (out += d));
  proc.stderr.on('data', (d) => (out += d));
  const exited = new Promise((resolve) => proc.on('exit', resolve));
  const stop = async () => {
    if (proc.exitCode === null) {
      proc.kill('SIGQUIT');
      await exited;
    }
    fs.rmSync(dir, { recursive: true, force: true });
  };
  try {
    await Promise.race([
      waitUp(`http://127.0.0.1:${port}/up`, 10000),
      exited.then((code) => {
        throw new Error(`nginx exited with ${code}: ${out} ${fs.existsSync(path.join(dir, 'error.log')) ? fs.readFileSync(path.join(dir, 'error.log'), 'utf8') : ''}`);
      }),
    ]);
  } catch (err) {
    await stop();
    throw err;
  }
  return { port, dir, stop };
}

module.exports = { NGINX, nginxConfig, startNginx };
