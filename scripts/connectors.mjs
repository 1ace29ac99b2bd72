#!/usr/bin/env node
// Installs the connectors' own dependencies (integrations/*: the n8n node package's build and lint
// tools, the Zapier app's platform core), which only their tests need. The relay's `npm ci` stays
// lean; `npm test` runs this first (its "pretest"), and it does nothing when each connector's
// node_modules already matches its package-lock.json. No install script runs (--ignore-scripts):
// eslint-plugin-n8n-nodes-base's preinstall only insists on pnpm.
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..");
export const CONNECTORS = ["integrations/n8n-nodes-genrelay", "integrations/zapier"];

/** Installs one connector's dependencies unless its node_modules was installed from this very lock. */
export function ensureConnector(relative) {
  const dir = join(ROOT, relative);
  const lock = readFileSync(join(dir, "package-lock.json"));
  const stamp = join(dir, "node_modules", ".genrelay-lock-sha256");
  const sha = createHash("sha256").update(lock).digest("hex");
  const manifest = JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
  const direct = Object.keys({ ...manifest.dependencies, ...manifest.devDependencies });
  // The stamp alone is not proof: a copied or pruned node_modules can keep it and lose packages.
  const complete = direct.every((name) => existsSync(join(dir, "node_modules", name, "package.json")));
  if (complete && existsSync(stamp) && readFileSync(stamp, "utf8") === sha) return false;
  process.stderr.write(`connectors: installing ${relative}'s dependencies (npm ci, once per lock)…\n`);
  const npm = process.platform === "win32" ? "npm.cmd" : "npm";
  // --prefer-offline: the lock pins each package's URL and integrity, so a cached tarball is the one
  // to install; asking the registry whether each of ~250 is fresh cost ~7 s of CPU, 40 % of the install.
  execFileSync(npm, ["ci", "--ignore-scripts", "--no-audit", "--no-fund", "--prefer-offline", "--loglevel=error"], {
    cwd: dir,
    stdio: ["ignore", "ignore", "inherit"],
  });
  writeFileSync(stamp, sha);
  return true;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  for (const connector of CONNECTORS) ensureConnector(connector);
}
