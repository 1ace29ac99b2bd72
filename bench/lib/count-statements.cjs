// Preloaded (`node --require bench/lib/count-statements.cjs`) into a relay or a prototype by
// `node bench/prototypes.mjs end_to_end --statements`: counts every run/get/all/iterate of a prepared
// better-sqlite3 statement and every `exec`, by its text (the first 100 characters), on the main
// thread. SIGUSR2 starts the count again (the bench sends it when its measured window opens); at exit
// the counts are written as JSON to BENCH_STATEMENTS_FILE. BENCH_STATEMENTS_CALLERS=<regex>: the
// statements whose text matches are counted apart by their callers too (the relay's frames of the stack).
const { isMainThread } = require("node:worker_threads");
const { writeFileSync } = require("node:fs");

const file = process.env.BENCH_STATEMENTS_FILE;
if (isMainThread && file) {
  const Database = require("better-sqlite3");
  const probe = new Database(":memory:");
  const statement = Object.getPrototypeOf(probe.prepare("SELECT 1"));
  probe.close();
  let counts = new Map();
  const callers = process.env.BENCH_STATEMENTS_CALLERS ? new RegExp(process.env.BENCH_STATEMENTS_CALLERS, "i") : null;
  Error.stackTraceLimit = Math.max(Error.stackTraceLimit, 40);
  const frames = () =>
    (new Error().stack ?? "")
      .split("\n")
      .filter((line) => /\/dist\//.test(line) && !/count-statements|node_modules/.test(line))
      .slice(0, 5)
      .map((line) =>
        line
          .trim()
          .replace(/^at /, "")
          .replace(/\(.*\/dist\//, "(")
          .replace(/^file:.*\/dist\//, ""),
      )
      .join(" < ");
  const add = (source) => {
    let key = source.replace(/\s+/g, " ").trim().slice(0, 100);
    if (callers?.test(key)) key = `${key.slice(0, 40)} @ ${frames()}`;
    counts.set(key, (counts.get(key) ?? 0) + 1);
  };
  for (const m of ["run", "get", "all", "iterate"]) {
    const native = statement[m];
    statement[m] = function counted(...args) {
      add(this.source);
      return native.apply(this, args);
    };
  }
  const exec = Database.prototype.exec;
  Database.prototype.exec = function counted(source) {
    add(source);
    return exec.call(this, source);
  };
  process.on("SIGUSR2", () => {
    counts = new Map();
  });
  process.on("exit", () => {
    writeFileSync(file, JSON.stringify(Object.fromEntries(counts)));
  });
}
