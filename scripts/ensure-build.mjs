// Builds dist/ when it is missing or older than any source file, so `npm start`,
// `npm run cli` and `npm run demo` work straight after `npm ci`.
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, statSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const marker = join(root, "dist", "main.js");

function newestMtime(dir) {
  let newest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    const mtime = entry.isDirectory() ? newestMtime(path) : statSync(path).mtimeMs;
    if (mtime > newest) newest = mtime;
  }
  return newest;
}

const stale =
  !existsSync(marker) ||
  Math.max(newestMtime(join(root, "src")), statSync(join(root, "tsconfig.build.json")).mtimeMs) >
    statSync(marker).mtimeMs;

if (stale) {
  process.stderr.write("genrelay: building dist/ ...\n");
  const tsc = join(root, "node_modules", "typescript-7", "bin", "tsc");
  execFileSync(process.execPath, [tsc, "-p", join(root, "tsconfig.build.json"), "--singleThreaded"], {
    stdio: "inherit",
    cwd: root,
  });
}
