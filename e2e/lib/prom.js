'use strict';
// Prometheus scrapes for the metrics tests: the text is validated by promtool (Debian's
// prometheus package, `promtool check metrics`: syntax, HELP on every family, naming lint)
// and its samples are read into a lookup by name and labels.
const { spawnSync } = require('node:child_process');

/** Fetches url with an optional bearer token; resolves {status, text, headers}. */
async function scrape(url, token) {
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  const res = await fetch(url, { headers, signal: AbortSignal.timeout(5000) });
  return { status: res.status, text: await res.text(), headers: res.headers };
}

/** Runs `promtool check metrics` on text; returns {ok, output}. */
function promtoolCheck(text) {
  const r = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
  if (r.error) throw new Error(`promtool not runnable (install Debian's prometheus package): ${r.error.message}`);
  return { ok: r.status === 0, output: `${r.stdout}${r.stderr}` };
}

/** Parses one label set `{a="x",b="y"}` (values with \" \\ \n escapes). */
function parseLabels(s) {
  const out = {};
  const re = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
  let m;
  while ((m = re.exec(s)) !== null) out[m[1]] = m[2].replace(/\\(.)/g, (_, c) => (c === 'n' ? '\n' : c));
  return out;
}

/**
 * Parses Prometheus text format into {samples: [{name, labels, value}], help: {name: text},
 * type: {name: type}} and a get(name, labels) that returns the value of the first sample of
 * that name whose labels include every given label (undefined when none).
 */
function parse(text) {
  const samples = [];
  const help = {};
  const type = {};
  for (const line of text.split('\n')) {
    if (line.startsWith('# HELP ')) {
      const rest = line.slice('# HELP '.length);
      const sp = rest.indexOf(' ');
      help[rest.slice(0, sp)] = rest.slice(sp + 1);
      continue;
    }
    if (line.startsWith('# TYPE ')) {
      const parts = line.split(' ');
      type[parts[2]] = parts[3];
      continue;
    }
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)/.exec(line);
    if (!m) throw new Error(`unparsable sample line: ${line}`);
    samples.push({ name: m[1], labels: m[2] ? parseLabels(m[2]) : {}, value: Number(m[3]) });
  }
  const get = (name, labels = {}) => {
    const s = samples.find((x) => x.name === name && Object.entries(labels).every(([k, v]) => x.labels[k] === v));
    return s ? s.value : undefined;
  };
  return { samples, help, type, get };
}

module.exports = { scrape, promtoolCheck, parse };
