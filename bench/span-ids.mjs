// CPU per attempt span id (telemetry/trace-context.ts, randomSpanId) of one build, in-process:
//   node bench/span-ids.mjs DIST   (an absolute path or one relative to the working directory)
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";

const dist = resolve(process.argv[2] ?? "dist");
const { randomSpanId } = await import(pathToFileURL(`${dist}/telemetry/trace-context.js`).href);
for (let i = 0; i < 20_000; i++) randomSpanId();
const start = process.cpuUsage();
for (let i = 0; i < 200_000; i++) randomSpanId();
const used = process.cpuUsage(start);
console.log(`${((used.user + used.system) / 200_000).toFixed(3)} CPU-µs per span id (${dist})`);
