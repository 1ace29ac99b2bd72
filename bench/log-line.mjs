// The request log line, two ways (issue #43): written by hand (src/logger.ts, requestLines: the same
// bytes as pino's line built as a template string and written to pino's stream directly), and
// through pino on a child without redaction (fixedFieldsLogger), which is what requestLines would
// be without it. Each run is its own process writing 200,000 lines, 32 per event-loop turn, to a
// file through pino's asynchronous destination; CPU is the process's user + system time (every
// thread: the writes are off the loop). Order alternates; medians of the rounds; the load before
// and after.
//   node bench/log-line.mjs [rounds=5]
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { loadAverage } from "./lib/load-gate.mjs";
import { median } from "./lib/stats.mjs";

const LINES = 200_000;
const PER_TURN = 32;

async function child(way, file) {
  const { distImport } = await import("./lib/dist.mjs");
  const { pino } = await import("pino");
  const { createLogger, fixedFieldsLogger, requestLines } = await distImport("logger.js");
  const dest = pino.destination({ dest: file, sync: false });
  const logger = createLogger("info", dest);
  const lean = fixedFieldsLogger(logger);
  const write = way === "hand" ? requestLines(logger) : (level, line) => lean[level](line, "request");
  const line = (i) => ({
    request_id: "req_AbCdEfGhIjKlMnOp",
    method: "POST",
    path: "/openapi/v1/images/generations",
    status: 201,
    ms: 1.3 + (i % 7),
    client_id: "cli_01jf3y8k2m9q7r5t3v1w0x6z4a",
  });
  const before = process.cpuUsage();
  let i = 0;
  await new Promise((done) => {
    const turn = () => {
      for (let k = 0; k < PER_TURN; k++) write("info", line(i++));
      if (i < LINES) setImmediate(turn);
      else done();
    };
    turn();
  });
  await new Promise((resolve) => dest.flush(resolve));
  const used = process.cpuUsage(before);
  process.stdout.write(`${((used.user + used.system) / LINES).toFixed(3)}\n`);
}

if (process.argv[2] === "--child") {
  await child(process.argv[3], process.argv[4]);
} else {
  const rounds = Number(process.argv[2] ?? 5);
  const tmp = mkdtempSync(join(os.tmpdir(), "genrelay-log-line-"));
  const us = { pino: [], hand: [] };
  const loads = [loadAverage()[0]];
  for (let r = 1; r <= rounds; r++) {
    for (const way of r % 2 === 1 ? ["pino", "hand"] : ["hand", "pino"]) {
      const file = join(tmp, `${way}-${r}.log`);
      const out = execFileSync(process.execPath, [fileURLToPath(import.meta.url), "--child", way, file]);
      us[way].push(Number(String(out).trim()));
    }
  }
  loads.push(loadAverage()[0]);
  rmSync(tmp, { recursive: true, force: true });
  const m = { pino: median(us.pino), hand: median(us.hand) };
  console.log(
    JSON.stringify({
      lines: LINES,
      rounds,
      us_per_line: m,
      hand_vs_pino: Number((m.hand / m.pino).toFixed(3)),
      all: us,
      load_1m: loads,
    }),
  );
}
