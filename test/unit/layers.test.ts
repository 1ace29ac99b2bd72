import { readdirSync, readFileSync } from "node:fs";
import { join, posix, relative, sep } from "node:path";
import { describe, expect, it } from "vitest";

/**
 * The layering of docs/architecture.md ("Layers: who may import whom"), held by reading the imports
 * of every file in src/. A rule broken by a new import fails here with the file and the import.
 */
function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((d) =>
    d.isDirectory()
      ? sourceFiles(join(dir, d.name))
      : d.name.endsWith(".ts")
        ? [join(dir, d.name).split(sep).join("/")]
        : [],
  );
}

/** Every module a file imports (static `import`/`export … from` and dynamic `import()`), resolved to `src/…` for relative ones. */
function importsOf(file: string, source: string): string[] {
  const specs = [
    ...source.matchAll(/(?:^|\n)\s*(?:import|export)[^;]*?from\s+"([^"]+)"|import\(\s*"([^"]+)"\s*\)/g),
  ].map((m) => m[1] ?? m[2]!);
  return specs.map((spec) =>
    spec.startsWith(".") ? posix.normalize(posix.join(posix.dirname(file), spec)).replace(/\.js$/, ".ts") : spec,
  );
}

interface Rule {
  name: string;
  files: (file: string) => boolean;
  forbidden: (target: string) => boolean;
}

const under = (dir: string) => (path: string) => path.startsWith(`src/${dir}/`);
const oneOf =
  (...dirs: string[]) =>
  (path: string) =>
    dirs.some((d) => path === `src/${d}` || path.startsWith(`src/${d}/`));

const RULES: Rule[] = [
  {
    name: "no SQL outside src/db/",
    files: (f) => !under("db")(f),
    forbidden: (t) => t === "drizzle-orm" || t.startsWith("drizzle-orm/") || t === "better-sqlite3",
  },
  {
    name: "db/ implements the store: it imports no rules, services or delivery code",
    files: under("db"),
    forbidden: oneOf("webhooks", "services", "core", "workers", "http", "relay.ts"),
  },
  {
    name: "upstream/ is a leaf: no storage",
    files: under("upstream"),
    forbidden: oneOf("db", "store", "core", "services", "workers", "relay.ts"),
  },
  {
    name: "the simulator does not import the relay",
    files: under("simulator"),
    forbidden: oneOf("db", "store", "core", "services", "workers", "http", "webhooks", "relay.ts"),
  },
  {
    name: "workers and services reach storage only through the Store",
    files: (f) => oneOf("workers", "services", "core", "http")(f),
    forbidden: oneOf("db"),
  },
  {
    name: "store/ is the contract: it owns its row types and imports no driver",
    files: under("store"),
    forbidden: oneOf("db", "services", "workers", "http", "core", "relay.ts"),
  },
  {
    name: "core/ holds the rules: it imports no services, workers or HTTP",
    files: under("core"),
    forbidden: oneOf("services", "workers", "http", "relay.ts"),
  },
  {
    name: "webhooks/ signs and delivers: it imports no services (secrets and header rules are its own or crypto.ts)",
    files: under("webhooks"),
    forbidden: oneOf("services"),
  },
  {
    name: "destinations/ carry a signed message: no storage, rules, services or workers",
    files: under("destinations"),
    forbidden: oneOf("db", "store", "core", "services", "workers", "http", "relay.ts"),
  },
  {
    name: "workers/ call the rules directly: they import no services (credit policy is core/credits.ts)",
    files: under("workers"),
    forbidden: oneOf("services"),
  },
  {
    name: "nothing in the product imports the benchmark harness",
    files: (f) => !under("bench")(f),
    forbidden: oneOf("bench"),
  },
  {
    name: "the SQLite driver imports only db/kit/, store/, its own folder and leaf utilities",
    files: under("db/sqlite"),
    forbidden: (t) => t.startsWith("src/") && !driverMayImport("db/sqlite", t),
  },
  {
    name: "the PostgreSQL driver imports only db/kit/, store/, its own folder and leaf utilities",
    files: under("db/pg"),
    forbidden: (t) => t.startsWith("src/") && !driverMayImport("db/pg", t),
  },
  {
    name: "db/kit/ is shared by both drivers: it imports no dialect's folder",
    files: under("db/kit"),
    forbidden: oneOf("db/sqlite", "db/pg"),
  },
];

/** Leaf utilities a driver may import beside db/kit/, store/ and its own folder (they import nothing of the relay). */
const DRIVER_LEAVES = [
  "statuses.ts",
  "upstream/json-text.ts",
  "upstream/output-pieces.ts",
  "next-turn.ts",
  "background-thread.ts",
];
const driverMayImport = (own: string, target: string) => oneOf(own, "db/kit", "store", ...DRIVER_LEAVES)(target);

/** The import circles among `files` (each as its files in order), found by a depth-first walk. */
function circles(files: Array<{ file: string; source: string }>): string[][] {
  const known = new Set(files.map((f) => f.file));
  const edges = new Map(files.map((f) => [f.file, importsOf(f.file, f.source).filter((t) => known.has(t))]));
  const found: string[][] = [];
  const state = new Map<string, "open" | "done">();
  const path: string[] = [];
  const visit = (file: string) => {
    state.set(file, "open");
    path.push(file);
    for (const next of edges.get(file) ?? []) {
      if (state.get(next) === "open") found.push(path.slice(path.indexOf(next)));
      else if (!state.has(next)) visit(next);
    }
    path.pop();
    state.set(file, "done");
  };
  for (const file of [...known].sort()) if (!state.has(file)) visit(file);
  return found;
}

function violations(files: Array<{ file: string; source: string }>): string[] {
  return files.flatMap(({ file, source }) =>
    RULES.filter((r) => r.files(file)).flatMap((r) =>
      importsOf(file, source)
        .filter((target) => r.forbidden(target))
        .map((target) => `${file} imports ${target}: ${r.name}`),
    ),
  );
}

/** Where a file takes the whole Store (`store: Store`) instead of a Pick<> of the areas it uses. */
function wholeStores(source: string): string[] {
  return [...source.matchAll(/\b\w+\??:\s*Store\b(?![\w["])/g)].map((m) => m[0]);
}

/** Hand-built status patches and lease releases, which belong to the lifecycle verbs (src/core/). */
function handBuiltChanges(source: string): string[] {
  return [
    ...source.matchAll(
      /\b(claimToken|claimedUntil):\s*null|\bstatus:\s*"(queued|processing|succeeded|failed|canceled)"|\bdeliveryStatus:\s*"/g,
    ),
  ].map((m) => m[0]);
}

describe("layers", () => {
  const files = sourceFiles("src").map((file) => ({
    file: relative(".", file).split(sep).join("/"),
    source: readFileSync(file, "utf8"),
  }));

  it("every import in src/ follows the layering rules", () => {
    expect(files.length).toBeGreaterThan(50);
    expect(violations(files)).toEqual([]);
  });

  it("the leaf utilities a driver may import are leaves: they import nothing of the relay", () => {
    const leaves = DRIVER_LEAVES.map((leaf) => files.find((f) => f.file === `src/${leaf}`));
    expect(leaves.every((f) => f !== undefined)).toBe(true);
    expect(leaves.flatMap((f) => importsOf(f!.file, f!.source).filter((t) => t.startsWith("src/")))).toEqual([]);
  });

  it("src/db/ has no import circles", () => {
    expect(circles(files.filter((f) => f.file.startsWith("src/db/")))).toEqual([]);
  });

  it("src/db/ is one folder per dialect and db/kit/: no query file at its root", () => {
    const db = files.filter((f) => f.file.startsWith("src/db/"));
    expect(db.length).toBeGreaterThan(20);
    expect(
      db.filter((f) => !(under("db/sqlite")(f.file) || under("db/pg")(f.file) || under("db/kit")(f.file))),
    ).toEqual([]);
  });

  it("the driver rules and the circle finder recognise what they forbid", () => {
    expect(violations([{ file: "src/db/sqlite/x.ts", source: 'import { PgStore } from "../pg/store.js";' }])).toEqual([
      "src/db/sqlite/x.ts imports src/db/pg/store.ts: the SQLite driver imports only db/kit/, store/, its own folder and leaf utilities",
    ]);
    expect(
      violations([{ file: "src/db/pg/x.ts", source: 'import { SqliteStore } from "../sqlite/store.js";' }]),
    ).toEqual([
      "src/db/pg/x.ts imports src/db/sqlite/store.ts: the PostgreSQL driver imports only db/kit/, store/, its own folder and leaf utilities",
    ]);
    expect(violations([{ file: "src/db/pg/x.ts", source: 'import { x } from "../../services/clients.js";' }])).toEqual(
      expect.arrayContaining([
        "src/db/pg/x.ts imports src/services/clients.ts: the PostgreSQL driver imports only db/kit/, store/, its own folder and leaf utilities",
      ]),
    );
    expect(violations([{ file: "src/db/kit/x.ts", source: 'import { tasks } from "../sqlite/schema.js";' }])).toEqual([
      "src/db/kit/x.ts imports src/db/sqlite/schema.ts: db/kit/ is shared by both drivers: it imports no dialect's folder",
    ]);
    const allowed = [
      'import type { Store } from "../../store/store.js";',
      'import { x } from "../kit/values.js";',
      'import { TASK_STATUSES } from "../../statuses.js";',
      'import { y } from "./schema.js";',
      'import pg from "pg";',
    ].join("\n");
    expect(violations([{ file: "src/db/pg/x.ts", source: allowed }])).toEqual([]);
    expect(violations([{ file: "src/db/sqlite/x.ts", source: allowed }])).toEqual([]);
    expect(
      circles([
        { file: "src/db/a.ts", source: 'import type { B } from "./b.js";' },
        { file: "src/db/b.ts", source: 'import { c } from "./c.js";' },
        { file: "src/db/c.ts", source: 'import { a } from "./a.js";' },
        { file: "src/db/d.ts", source: 'import { a } from "./a.js";' },
      ]),
    ).toEqual([["src/db/a.ts", "src/db/b.ts", "src/db/c.ts"]]);
    expect(circles([{ file: "src/db/a.ts", source: 'import { b } from "./b.js";' }])).toEqual([]);
  });

  it("workers build no status patch and release no lease by hand: they call a verb", () => {
    const offenders = files
      .filter((f) => f.file.startsWith("src/workers/"))
      .flatMap((f) => handBuiltChanges(f.source).map((m) => `${f.file}: ${m}`));
    expect(offenders).toEqual([]);
  });

  it("every worker takes a narrow port of the Store (a Pick<> declared beside it), never the whole Store", () => {
    const offenders = files
      .filter((f) => f.file.startsWith("src/workers/"))
      .flatMap((f) => wholeStores(f.source).map((m) => `${f.file}: ${m}`));
    expect(offenders).toEqual([]);
    expect(wholeStores("export interface X {\n  store: Store;\n}")).toEqual(["store: Store"]);
    expect(wholeStores("constructor(private readonly store: Store, clock: Clock) {}")).toEqual(["store: Store"]);
    expect(wholeStores('store: Pick<Store, "events">; tasks: Store["tasks"]; s?: StoreLike')).toEqual([]);
  });

  it("the checks recognise what they forbid", () => {
    expect(
      importsOf(
        "src/workers/x.ts",
        'import { a } from "../db/tasks.js";\nexport { b } from "./y.js";\nawait import("drizzle-orm");',
      ),
    ).toEqual(["src/db/tasks.ts", "src/workers/y.ts", "drizzle-orm"]);
    expect(violations([{ file: "src/workers/x.ts", source: 'import { sql } from "drizzle-orm";' }])).toHaveLength(1);
    expect(
      violations([{ file: "src/db/x.ts", source: 'import { destinationHost } from "../webhooks/destination.js";' }]),
    ).toHaveLength(1);
    expect(
      violations([{ file: "src/upstream/x.ts", source: 'import type { TaskStatus } from "../db/schema.js";' }]),
    ).toHaveLength(1);
    expect(violations([{ file: "src/simulator/x.ts", source: 'import { Relay } from "../relay.js";' }])).toHaveLength(
      1,
    );
    expect(
      violations([{ file: "src/db/pg/x.ts", source: 'import { tasks } from "../sqlite/schema.js";' }]),
    ).toHaveLength(1);
    expect(
      violations([{ file: "src/db/sqlite/x.ts", source: 'import { tasks } from "../pg/schema.js";' }]),
    ).toHaveLength(1);
    expect(violations([{ file: "src/db/pg/x.ts", source: 'import { tasks } from "./schema.js";' }])).toHaveLength(0);
    expect(
      violations([{ file: "src/db/x.ts", source: 'import type { Store } from "../store/store.js";' }]),
    ).toHaveLength(0);
    expect(
      violations([
        { file: "src/webhooks/x.ts", source: 'import { activeSigningKeys } from "../services/clients.js";' },
      ]),
    ).toEqual([
      "src/webhooks/x.ts imports src/services/clients.ts: webhooks/ signs and delivers: it imports no services (secrets and header rules are its own or crypto.ts)",
    ]);
    expect(
      violations([{ file: "src/workers/x.ts", source: 'import type { Nudges } from "../services/deps.js";' }]),
    ).toEqual([
      "src/workers/x.ts imports src/services/deps.ts: workers/ call the rules directly: they import no services (credit policy is core/credits.ts)",
    ]);
    expect(
      violations([{ file: "src/workers/x.ts", source: 'import { decideSubmission } from "../core/credits.js";' }]),
    ).toEqual([]);
    expect(
      violations([{ file: "src/destinations/x.ts", source: 'import type { EventRow } from "../store/rows.js";' }]),
    ).toEqual([
      "src/destinations/x.ts imports src/store/rows.ts: destinations/ carry a signed message: no storage, rules, services or workers",
    ]);
    expect(
      violations([{ file: "src/destinations/x.ts", source: 'import { httpHeaders } from "../webhooks/outgoing.js";' }]),
    ).toEqual([]);
    expect(
      handBuiltChanges('update(db, id, token, { claimToken: null, claimedUntil: null, status: "failed" })'),
    ).toEqual(["claimToken: null", "claimedUntil: null", 'status: "failed"']);
  });
});
