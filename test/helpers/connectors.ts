import { execFileSync } from "node:child_process";
import { join } from "node:path";
import { ROOT } from "./doc-blocks.js";

/**
 * The connectors' own dependencies (n8n-workflow and the lint tools for the n8n package,
 * zapier-platform-core for the Zapier app), installed into each connector's node_modules by
 * scripts/connectors.mjs: npm test's pretest runs it, and a test file run alone runs it too (it
 * does nothing when they are up to date).
 */
export function installConnectors(): void {
  execFileSync(process.execPath, [join(ROOT, "scripts", "connectors.mjs")], { stdio: "inherit", timeout: 300_000 });
}
