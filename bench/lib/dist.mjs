// Which build the benchmarks run. At the start of a run, run.mjs copies dist/ and migrations/ into
// bench/.snapshot/<pid>/ and every process and import of the run uses that copy: a rebuild of dist/
// during the run (a developer's `npm run build`, another `npm test`) cannot mix two builds into one
// set of figures. Children learn the path from BENCH_DIST; a run started with BENCH_DIST set uses that
// build as it is (e.g. an old commit's snapshot in bench/.ab/).
import { cpSync, mkdirSync, rmdirSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

/** The build in use (live binding: changes when snapshotDist() runs). */
export let DIST = process.env.BENCH_DIST || join(ROOT, "dist");

export function distImport(relative) {
  return import(pathToFileURL(join(DIST, relative)).href);
}

/** Copies dist/ and migrations/ (the migrator finds them at dist/db/../../migrations) and switches to the copy. */
export function snapshotDist() {
  // BENCH_DIST names a build already set aside (bench/.ab/<name>/dist): use it as it is.
  if (process.env.BENCH_DIST) return null;
  const dir = join(ROOT, "bench", ".snapshot", String(process.pid));
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  cpSync(join(ROOT, "dist"), join(dir, "dist"), { recursive: true });
  cpSync(join(ROOT, "migrations"), join(dir, "migrations"), { recursive: true });
  writeFileSync(join(dir, "package.json"), '{ "type": "module", "private": true }\n');
  DIST = join(dir, "dist");
  process.env.BENCH_DIST = DIST;
  return dir;
}

export function removeSnapshot(dir) {
  if (!dir) return;
  rmSync(dir, { recursive: true, force: true });
  try {
    rmdirSync(dirname(dir)); // bench/.snapshot itself, when no other run is using it
  } catch {
    // another run's snapshot is still there
  }
}

/** Switches the run to another build (children learn it from BENCH_DIST), e.g. one stageDist() set aside. */
export function useDist(dist) {
  DIST = dist;
  process.env.BENCH_DIST = dist;
}

/**
 * A copy of another build's `dist` (and the `migrations` beside it) under bench/.ab/<name>-<pid>/,
 * so it runs on this checkout's node_modules: an old checkout's own install may be missing or differ
 * (an A/B then measures the code, with the same packages on both sides), and a rebuild of either
 * dist during the run cannot change what is measured. Returns the copy's dist; removeSnapshot(dirname(it)) removes it.
 */
export function stageDist(dist, name) {
  const dir = join(ROOT, "bench", ".ab", `${name}-${process.pid}`);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  cpSync(dist, join(dir, "dist"), { recursive: true });
  cpSync(join(dist, "..", "migrations"), join(dir, "migrations"), { recursive: true });
  writeFileSync(join(dir, "package.json"), '{ "type": "module", "private": true }\n');
  return join(dir, "dist");
}
