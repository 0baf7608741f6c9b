'use strict';
// Small timing helpers shared by every e2e test. Tests wait for things to happen with a
// deadline (never a fixed sleep); `quiet()` is the one fixed window, used only to assert that
// something does NOT happen.
const crypto = require('node:crypto');

const WAIT_MS = Number(process.env.E2E_WAIT_MS || 5000); // an expected event
const QUIET_MS = Number(process.env.E2E_QUIET_MS || 400); // "nothing arrives" window

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** A fresh channel-name-safe id, so tests never share channels. */
function uid(prefix = '') {
  return `${prefix}${crypto.randomBytes(6).toString('hex')}`;
}

/** Settles like `promise`, or rejects with "timed out ... waiting for <what>" after ms. */
function deadline(promise, ms, what) {
  let timer;
  const expired = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${typeof what === 'function' ? what() : what}`)), ms);
  });
  return Promise.race([promise, expired]).finally(() => clearTimeout(timer));
}

/** Polls fn() (sync or async) until it returns a truthy value, which is returned. */
async function eventually(fn, { ms = WAIT_MS, every = 25, what = 'condition' } = {}) {
  const end = Date.now() + ms;
  let last;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
      last = v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > end) {
      throw new Error(`timed out after ${ms} ms waiting for ${what} (last: ${last instanceof Error ? last.message : JSON.stringify(last)})`);
    }
    await sleep(every);
  }
}

/** The short window used to assert that something does not arrive. */
const quiet = (ms = QUIET_MS) => sleep(ms);

/**
 * Collects cleanups (close a socket, stop a client) and runs them in reverse order.
 * Usage: const bag = cleanup(t); bag.add(() => client.disconnect());
 */
function cleanup(t) {
  const fns = [];
  t.after(async () => {
    for (const fn of fns.reverse()) {
      try {
        await fn();
      } catch {
        /* best effort */
      }
    }
  });
  return {
    add(fn) {
      fns.push(fn);
      return fn;
    },
  };
}

module.exports = { WAIT_MS, QUIET_MS, sleep, uid, deadline, eventually, quiet, cleanup };
