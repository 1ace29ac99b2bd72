import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { loadConfig } from "../../src/config.js";

/** .env.example is what an operator copies: it must name every variable, with the true defaults. */

const ROOT = resolve(import.meta.dirname, "../..");

/** The variables the zod schema in src/config.ts parses (its object keys). */
function configVariables(): string[] {
  const source = readFileSync(join(ROOT, "src/config.ts"), "utf8");
  const body = /const EnvSchema = z\s*\.object\(\{([\s\S]*?)\n\s*\}\)/.exec(source)?.[1];
  expect(body, "EnvSchema found in src/config.ts").toBeDefined();
  return [...body!.matchAll(/^\s+([A-Z][A-Z0-9_]*):/gm)].map((m) => m[1]!).sort();
}

/** `# NAME=value` lines: the commented-out defaults. */
function exampleEntries(): Map<string, string> {
  const entries = new Map<string, string>();
  for (const line of readFileSync(join(ROOT, ".env.example"), "utf8").split("\n")) {
    const m = /^#?\s*([A-Z][A-Z0-9_]*)=(.*)$/.exec(line.trim());
    if (m) entries.set(m[1]!, m[2]!.trim());
  }
  return entries;
}

describe(".env.example", () => {
  it("lists every variable of src/config.ts, and nothing else", () => {
    const vars = configVariables();
    expect(vars.length).toBeGreaterThanOrEqual(14);
    expect([...exampleEntries().keys()].sort()).toEqual(vars);
  });

  it("shows the real defaults: uncommenting every line changes nothing", () => {
    expect(loadConfig(Object.fromEntries(exampleEntries()))).toEqual(loadConfig({}));
  });

  it("keeps every line commented, so a copy starts from the defaults", () => {
    for (const line of readFileSync(join(ROOT, ".env.example"), "utf8").split("\n")) {
      if (line.trim() !== "") expect(line.startsWith("#"), line).toBe(true);
    }
  });

  it("and the configuration page's table (docs/configuration.md) names the same variables", () => {
    const page = readFileSync(join(ROOT, "docs", "configuration.md"), "utf8");
    const documented = [...page.matchAll(/^\| `([A-Z][A-Z0-9_]*)` \|/gm)].map((m) => m[1]!).sort();
    expect(documented).toEqual(configVariables());
  });
});
