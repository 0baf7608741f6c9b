// index.d.ts type-checks against pusher-js's and laravel-echo's own types, as an app uses it
// (test/types/usage.ts, compiled with the pinned TypeScript, nothing emitted).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const tsc = fileURLToPath(new URL('../node_modules/typescript/bin/tsc', import.meta.url));
const project = fileURLToPath(new URL('./types/tsconfig.json', import.meta.url));

test('index.d.ts: an app using enableRecovery with pusher-js and Echo compiles, a wrong argument does not', async () => {
  const { code, out } = await new Promise((resolve) => {
    execFile(process.execPath, [tsc, '-p', project], (err, stdout, stderr) => resolve({ code: err ? err.code : 0, out: stdout + stderr }));
  });
  assert.equal(code, 0, out);
});
