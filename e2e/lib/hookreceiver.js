'use strict';
// A local webhook receiver for the e2e tests: records every POST per path with the status it
// answered. A path can be made to fail its first N POSTs (failFirst) or every POST while it
// is down (setDown), to exercise retries and outboxes that must survive a node.
const http = require('node:http');

async function startHookReceiver() {
  const posts = [];
  const failures = new Map(); // path -> POSTs still to refuse with 500
  const down = new Set(); // paths answering 503
  const srv = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const rawBody = Buffer.concat(chunks).toString('utf8');
      const path = req.url;
      let status = 200;
      if (down.has(path)) status = 503;
      else if ((failures.get(path) || 0) > 0) {
        failures.set(path, failures.get(path) - 1);
        status = 500;
      }
      let body = null;
      try {
        body = JSON.parse(rawBody);
      } catch {
        /* recorded as is */
      }
      posts.push({ path, method: req.method, headers: req.headers, rawBody, body, status, at: Date.now() });
      res.writeHead(status);
      res.end(status === 200 ? 'ok' : 'try again');
    });
  });
  await new Promise((resolve) => srv.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${srv.address().port}`,
    posts,
    failFirst: (path, n) => failures.set(path, n),
    setDown: (path, isDown) => (isDown ? down.add(path) : down.delete(path)),
    /** POSTs to path (all, or only those answered 2xx when accepted is true). */
    postsTo: (path, accepted = false) => posts.filter((p) => p.path === path && (!accepted || p.status === 200)),
    /** Every event the receiver ACCEPTED (2xx) on path, flattened, each with its POST. */
    events: (path) =>
      posts.filter((p) => p.path === path && p.status === 200).flatMap((p) => p.body.events.map((e) => ({ ...e, post: p }))),
    close: () =>
      new Promise((resolve) => {
        srv.closeAllConnections();
        srv.close(() => resolve());
      }),
  };
}

module.exports = { startHookReceiver };
