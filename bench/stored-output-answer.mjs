// A task answer carrying a 7 MB stored output (issue #38 item 7): the CPU the event loop spends
// building it, the old way (JSON.parse of the stored text, JSON.stringify of the answer) beside the
// splice (upstream/json-text.ts: the small rest serialized, the stored text copied in), each with
// the UTF-8 encoding the response needs. Same 60,000-object output as bench/big-outputs.mjs.
//
//   node bench/stored-output-answer.mjs     (BENCH_ROUNDS, default 7; order alternated each round)
import os from "node:os";
import { distImport } from "./lib/dist.mjs";
import { median, round } from "./lib/stats.mjs";

const { JsonText, stringifyWithText } = await distImport("upstream/json-text.js");
const rounds = Number(process.env.BENCH_ROUNDS ?? 7);
const text = JSON.stringify({
  images: Array.from({ length: 60_000 }, (_, i) => ({
    url: `https://cdn.example.com/outputs/${i}/image-${i}.png`,
    width: 1024,
    height: 1024,
    seed: i,
  })),
});
const data = { id: "task_bench", status: "succeeded" };
const usage = { points_charged: 1, points_refunded: null };
/** CPU ms of one answer built and encoded. */
const cpuMs = (build) => {
  const start = process.cpuUsage();
  Buffer.from(build(), "utf8");
  const used = process.cpuUsage(start);
  return (used.user + used.system) / 1000;
};
const ways = {
  parse_stringify: () => JSON.stringify({ data, output: JSON.parse(text), usage }),
  splice: () => stringifyWithText({ data, output: new JsonText(text), usage }),
};
const loadStart = os.loadavg().map((x) => round(x, 2));
const samples = { parse_stringify: [], splice: [] };
for (let r = 0; r < rounds; r++) {
  const order = r % 2 === 0 ? ["parse_stringify", "splice"] : ["splice", "parse_stringify"];
  for (const way of order) samples[way].push(cpuMs(ways[way]));
}
console.log(
  JSON.stringify({
    output_bytes: Buffer.byteLength(text),
    rounds,
    parse_stringify_cpu_ms: round(median(samples.parse_stringify), 1),
    splice_cpu_ms: round(median(samples.splice), 1),
    load_start: loadStart,
    load_end: os.loadavg().map((x) => round(x, 2)),
  }),
);
