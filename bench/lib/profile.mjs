// Summarises a V8 .cpuprofile (node --cpu-prof): self time by function and by package.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { round } from "./stats.mjs";

function shortUrl(url) {
  if (!url) return "";
  const nm = url.lastIndexOf("/node_modules/");
  if (nm >= 0) return url.slice(nm + "/node_modules/".length);
  const dist = url.lastIndexOf("/dist/");
  if (dist >= 0) return url.slice(dist + 1);
  return url.replace(/^file:\/\//, "");
}

function category(frame) {
  const { url, functionName } = frame;
  if (!url) {
    if (/^\((garbage collector|idle|program|root)\)$/.test(functionName)) return functionName;
    return "(native: V8 builtins and C++ bindings, e.g. SQLite, crypto)";
  }
  if (url.startsWith("node:")) {
    const m = /^node:(?:internal\/)?([\w]+)/.exec(url);
    return `node:${m?.[1] ?? url}`;
  }
  const nm = url.lastIndexOf("/node_modules/");
  if (nm >= 0) {
    const rest = url.slice(nm + "/node_modules/".length).split("/");
    return rest[0].startsWith("@") ? `${rest[0]}/${rest[1]}` : rest[0];
  }
  const dist = url.lastIndexOf("/dist/");
  if (dist >= 0) {
    const parts = url.slice(dist + "/dist/".length).split("/");
    return `genrelay ${parts.length > 1 ? `${parts[0]}/` : parts[0]}`;
  }
  return url;
}

export function summariseProfile(path, top = 15) {
  const profile = JSON.parse(readFileSync(path, "utf8"));
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const self = new Map();
  const { samples, timeDeltas } = profile;
  for (let i = 0; i < samples.length; i++) {
    const dt = timeDeltas[i + 1] ?? 0;
    self.set(samples[i], (self.get(samples[i]) ?? 0) + dt);
  }
  let total = 0;
  let idle = 0;
  const fns = new Map();
  const cats = new Map();
  for (const [id, us] of self) {
    const node = byId.get(id);
    if (!node) continue;
    total += us;
    const f = node.callFrame;
    if (f.functionName === "(idle)") idle += us;
    const key = `${f.functionName || "(anonymous)"} ${shortUrl(f.url)}${f.url ? `:${f.lineNumber + 1}` : ""}`;
    fns.set(key, (fns.get(key) ?? 0) + us);
    const c = category(f);
    cats.set(c, (cats.get(c) ?? 0) + us);
  }
  const busy = total - idle;
  // Inclusive time of the relay's own functions (dist/), each counted once per stack.
  const inclusive = new Map();
  const parent = new Map();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  for (const [id, us] of self) {
    const seen = new Set();
    for (let cur = id; cur !== undefined; cur = parent.get(cur)) {
      const f = byId.get(cur)?.callFrame;
      if (!f?.url.includes("/dist/") || f.url.includes("/node_modules/")) continue;
      const key = `${f.functionName || "(anonymous)"} ${shortUrl(f.url)}:${f.lineNumber + 1}`;
      if (seen.has(key)) continue;
      seen.add(key);
      inclusive.set(key, (inclusive.get(key) ?? 0) + us);
    }
  }
  const pct = (us) => round((100 * us) / Math.max(1, busy), 1);
  const sorted = (m) => [...m].filter(([k]) => !k.startsWith("(idle)")).sort((a, b) => b[1] - a[1]);
  return {
    file: path,
    sampled_ms: round(total / 1000),
    busy_ms: round(busy / 1000),
    busy_share: round(busy / Math.max(1, total), 3),
    top_functions: sorted(fns)
      .slice(0, top)
      .map(([name, us]) => ({ name, self_ms: round(us / 1000), self_pct: pct(us) })),
    relay_functions_inclusive: sorted(inclusive)
      .slice(0, top)
      .map(([name, us]) => ({ name, total_ms: round(us / 1000), total_pct: pct(us) })),
    by_package: sorted(cats)
      .slice(0, top)
      .map(([name, us]) => ({ name, self_ms: round(us / 1000), self_pct: pct(us) })),
  };
}

export function findProfile(dir) {
  const file = readdirSync(dir).find((f) => f.endsWith(".cpuprofile"));
  return file ? join(dir, file) : null;
}
