// Ends a detached process group when the process that started it exits, however it exits.
//   node scripts/watch-group.cjs <pgid> <dir>     (stdin: a pipe only the starter holds)
//
// A broker started in a process group of its own (detached, so that stopping it can signal the whole
// group) outlives a starter that ends without its teardown: Ctrl-C or SIGTERM to vitest (which skips
// globalSetup's teardown and the files' afterAll), SIGKILL, a crash. The starter spawns this watcher,
// in a group of its own too, with a pipe on its stdin; the kernel closes the starter's end when the
// starter exits, and the watcher then ends the group (SIGCONT and SIGTERM, SIGKILL after 10 s) and
// removes its directory. It exits by itself once the group is gone (a broker stopped on purpose).
// Used by test/helpers/brokers.ts and bench/lib/brokers.mjs.
"use strict";
const { rmSync } = require("node:fs");

const pgid = Number(process.argv[2]);
const dir = process.argv[3];
const gone = () => {
  try {
    process.kill(-pgid, 0);
    return false;
  } catch {
    return true;
  }
};
const poll = setInterval(() => {
  if (gone()) process.exit(0);
}, 1000);
let ending = false;
const end = () => {
  if (ending) return;
  ending = true;
  clearInterval(poll);
  const done = () => {
    if (dir) rmSync(dir, { recursive: true, force: true });
    process.exit(0);
  };
  try {
    process.kill(-pgid, "SIGCONT");
    process.kill(-pgid, "SIGTERM");
  } catch {}
  setTimeout(() => {
    try {
      process.kill(-pgid, "SIGKILL");
    } catch {}
  }, 10_000);
  setTimeout(done, 12_000);
  setInterval(() => {
    if (gone()) done();
  }, 100);
};
process.stdin.on("end", end).on("error", end).resume();
