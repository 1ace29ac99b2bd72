// The creation's preparation pieces of issue #43 in isolation, old build beside new, in one process:
// canonical JSON of the body, the price key, a new task id (µs per call, medians of rounds).
//   node bench/intake-prep-micro.mjs OLD_DIST [NEW_DIST=dist] [rounds=7]
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { median } from "./lib/stats.mjs";

const [oldDist, newDist = "dist", roundsArg = "7"] = process.argv.slice(2);
const load = async (dist, file) => import(pathToFileURL(resolve(dist, file)).href);
const sides = {};
for (const [name, dist] of [
  ["old", oldDist],
  ["new", newDist],
]) {
  const crypto = await load(dist, "crypto.js");
  const pricing = await load(dist, "core/pricing.js");
  const ids = await load(dist, "ids.js");
  sides[name] = { crypto, pricing, ids };
}
// The bench's creation body (bench/lib: a p-image request with a callback and metadata).
const body = {
  model: "p-image",
  prompt: "a lighthouse on a cliff at dusk, oil painting, dramatic clouds, warm light",
  size: "1024x1024",
  quality: "standard",
  callback_url: "http://127.0.0.1:9/hook",
  metadata: { order: "A-1042", user: "u_77" },
};
const upstream = { model: body.model, prompt: body.prompt, size: body.size, quality: body.quality };
const N = 200_000;
const pieces = {
  canonical: (s) => () => s.crypto.canonicalJson(body),
  price_key: (s) => () => s.pricing.priceKey("image", upstream),
  new_id: (s) => {
    let t = 1_800_000_000_000;
    let i = 0;
    return () => s.ids.newId("task", (i++ & 31) === 0 ? ++t : t);
  },
};
for (const [piece, make] of Object.entries(pieces)) {
  const out = { old: [], new: [] };
  for (let r = 0; r < Number(roundsArg); r++) {
    for (const name of r % 2 === 0 ? ["old", "new"] : ["new", "old"]) {
      const fn = make(sides[name]);
      for (let i = 0; i < 20_000; i++) fn();
      const started = process.cpuUsage();
      for (let i = 0; i < N; i++) fn();
      const used = process.cpuUsage(started);
      out[name].push((used.user + used.system) / N);
    }
  }
  const o = median(out.old),
    n = median(out.new);
  console.log(`${piece.padEnd(10)} old ${o.toFixed(3)} µs  new ${n.toFixed(3)} µs  ×${(n / o).toFixed(2)}`);
}
