import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { COMMANDS } from "../../src/cli/help.js";
import { Metrics } from "../../src/metrics.js";
import type { Store } from "../../src/store/store.js";
import {
  allBlocks,
  documentFiles,
  fencedBlocks,
  ROOT,
  SHELL_LANGS,
  shellCommands,
  type FencedBlock,
  type ShellCommand,
} from "../helpers/doc-blocks.js";
import { webhookBodyProblems } from "../helpers/webhook-schema.js";

/**
 * Every code example in README.md and docs/ runs as written
 * (docs/contract.md, "The published contract"). Each fenced block is one of:
 *  - a program (js, ts, python): a copy of a file under examples/, marked `<!-- example: examples/… -->`
 *    on the line above the fence; test/integration/examples.test.ts runs those files against a relay;
 *  - a shell command or a configuration snippet, checked here against what it names (npm scripts,
 *    CLI commands and their options, environment variables, files, metrics) and, for its curl
 *    commands, run against a relay by test/integration/doc-commands.test.ts;
 *  - `text`: output or a diagram, not code.
 */

const PROGRAM_LANGS = new Set(["js", "javascript", "mjs", "ts", "typescript", "python", "py"]);
const CHECKED_LANGS = new Set([...SHELL_LANGS, "json", "yaml", "yml", "ini", "sql", "text"]);

const blocks = allBlocks();
const where = (b: FencedBlock): string => `${b.file}:${b.line}`;
const read = (path: string): string => readFileSync(join(ROOT, path), "utf8");
const examples = readdirSync(join(ROOT, "examples")).filter((f) => !f.startsWith(".") && f !== "__pycache__");

describe("fenced blocks of README.md and docs/", () => {
  it("finds the documents and their blocks", () => {
    expect(documentFiles()).toContain("docs/receiving-low-code.md");
    expect(blocks.length).toBeGreaterThan(20);
  });

  it("every block says what it is (```text for output and diagrams), in a language a test checks", () => {
    const problems = blocks.flatMap((b) =>
      b.lang === ""
        ? [`${where(b)}: a fence without a language: mark output or a diagram as \`\`\`text`]
        : !PROGRAM_LANGS.has(b.lang) && !CHECKED_LANGS.has(b.lang)
          ? [`${where(b)}: no test checks \`\`\`${b.lang} blocks: use a checked language or add a check here`]
          : [],
    );
    expect(problems).toEqual([]);
  });

  it("every js, ts or python block is a copy of a file under examples/, kept equal to it", () => {
    const problems: string[] = [];
    for (const b of blocks) {
      if (PROGRAM_LANGS.has(b.lang) && b.mirrors === null) {
        problems.push(
          `${where(b)}: a \`\`\`${b.lang} block that no test runs: move it to examples/ and mark it <!-- example: examples/… -->`,
        );
      }
      if (b.mirrors === null) continue;
      if (!b.mirrors.startsWith("examples/") || !existsSync(join(ROOT, b.mirrors))) {
        problems.push(`${where(b)}: mirrors ${b.mirrors}, which is not a file under examples/`);
      } else if (b.body !== read(b.mirrors)) {
        problems.push(`${where(b)}: differs from ${b.mirrors}: copy the file into the block again`);
      }
    }
    expect(problems).toEqual([]);
  });

  it("the mirror check fails on a block that drifted from its file, and on an unmirrored program", () => {
    const file = read("examples/receive-hmac.mjs");
    const [same, drifted, loose] = fencedBlocks(
      "x.md",
      `<!-- example: examples/receive-hmac.mjs -->\n\`\`\`js\n${file}\`\`\`\n\n<!-- example: examples/receive-hmac.mjs -->\n\`\`\`js\n${file.replace("204", "200")}\`\`\`\n\n\`\`\`python\nprint(1)\n\`\`\`\n`,
    );
    expect(same!.body).toBe(file);
    expect(drifted!.body).not.toBe(file);
    expect(loose!.mirrors).toBeNull();
  });

  it("every file under examples/ is shown or linked by a document", () => {
    const docs = documentFiles().map(read).join("\n");
    expect(examples.filter((f) => !docs.includes(`examples/${f}`))).toEqual([]);
  });

  it.skipIf(!hasPython())("the Python examples parse (python3, ast.parse)", () => {
    for (const f of examples.filter((name) => name.endsWith(".py"))) {
      execFileSync("python3", [
        "-c",
        "import ast, sys; ast.parse(open(sys.argv[1]).read(), sys.argv[1])",
        join(ROOT, "examples", f),
      ]);
    }
  });
});

describe("shell blocks name only what exists", () => {
  const commands = blocks
    .filter((b) => SHELL_LANGS.has(b.lang))
    .flatMap((b) => shellCommands(b.body).map((c) => ({ block: b, command: c })));

  it("splits a block into its commands as sh does", () => {
    expect(
      shellCommands("A=1 npm ci && npm run x -- a 'b c' # note\ncurl -s \\\n  -d '{\n}' u\n").map((c) => c.words),
    ).toEqual([
      ["A=1", "npm", "ci"],
      ["npm", "run", "x", "--", "a", "b c"],
      ["curl", "-s", "-d", "{\n}", "u"],
    ]);
  });

  it("every npm script, CLI command and option, environment variable, file and tool named exists", () => {
    const problems = commands.flatMap(({ block, command }) =>
      shellProblems(command).map((p) => `${where(block)}: ${command.text.slice(0, 60)}: ${p}`),
    );
    expect(problems).toEqual([]);
  });

  it("the checker refuses a missing script, command, option, variable or file", () => {
    const bad = [
      "npm run nope",
      "npm run cli -- clients fly",
      "npm run cli -- clients create --nmae x",
      "NOT_A_SETTING=1 npm start",
      "node dist/nope.js",
      "sh examples/nope.sh",
      "frobnicate",
    ];
    for (const line of bad) expect(shellProblems(shellCommands(line)[0]!), line).not.toEqual([]);
  });
});

describe("configuration snippets name only what exists", () => {
  it("JSON blocks parse, and a webhook body validates against its /openapi.json schema", () => {
    const problems: string[] = [];
    for (const b of blocks.filter((x) => x.lang === "json")) {
      let parsed: unknown;
      try {
        parsed = JSON.parse(b.body);
      } catch (err) {
        problems.push(`${where(b)}: not JSON: ${(err as Error).message}`);
        continue;
      }
      if (typeof parsed === "object" && parsed !== null && "type" in parsed && "data" in parsed) {
        problems.push(...webhookBodyProblems(b.body).map((p) => `${where(b)}: ${p}`));
      }
    }
    expect(problems).toEqual([]);
  });

  it("alert rules use the relay's metric names and labels", () => {
    const metrics = new Map<string, string[]>();
    const registry = new Metrics({ store: {} as Store, reads: () => [] }).registry;
    for (const m of registry.getMetricsAsArray() as unknown as Array<{ name: string; labelNames?: string[] }>)
      metrics.set(m.name, m.labelNames ?? []);
    const problems: string[] = [];
    for (const b of blocks.filter((x) => x.lang === "yaml" || x.lang === "yml")) {
      for (const [, name, labels] of b.body.matchAll(
        /\b(genrelay_[a-z_]+?)(?:_bucket|_sum|_count)?\b(?:\{([^}]*)\})?/g,
      )) {
        const known = metrics.get(name!) ?? metrics.get(name!.replace(/_(bucket|sum|count)$/, ""));
        if (!known) {
          problems.push(`${where(b)}: no metric ${name}`);
          continue;
        }
        for (const [, label] of (labels ?? "").matchAll(/([a-z_]+)\s*[=!]~?/g)) {
          if (!known.includes(label!)) problems.push(`${where(b)}: ${name} has no label ${label}`);
        }
      }
    }
    expect(metrics.size).toBeGreaterThan(10);
    expect(problems).toEqual([]);
  });

  it("files a snippet runs (dist/….js) are built from a source file", () => {
    const problems = blocks.flatMap((b) =>
      [...b.body.matchAll(/\bdist\/([\w/-]+)\.js\b/g)]
        .filter(([, p]) => !existsSync(join(ROOT, "src", `${p}.ts`)))
        .map(([m]) => `${where(b)}: ${m} is built from no src/ file`),
    );
    expect(problems).toEqual([]);
  });

  it("SQL blocks create a role before the database it owns", () => {
    const problems: string[] = [];
    for (const b of blocks.filter((x) => x.lang === "sql")) {
      const statements = b.body
        .split(";")
        .map((s) => s.trim())
        .filter(Boolean);
      const roles = new Set<string>();
      for (const s of statements) {
        const role = /^CREATE ROLE (\w+) LOGIN PASSWORD '[^']*'$/.exec(s);
        const db = /^CREATE DATABASE (\w+) OWNER (\w+)$/.exec(s);
        if (role) roles.add(role[1]!);
        else if (db && !roles.has(db[2]!))
          problems.push(`${where(b)}: ${db[1]} is owned by ${db[2]}, which the block does not create`);
        else if (!db) problems.push(`${where(b)}: a statement this test does not know: ${s}`);
      }
    }
    expect(problems).toEqual([]);
  });
});

// --- what a shell command may name ------------------------------------------------------------

const scripts = (JSON.parse(read("package.json")) as { scripts: Record<string, string> }).scripts;
const NPM_BUILTINS = new Set(["ci", "install", "prune"]);
/** Tools a document may call without a check of their own (docker is checked where it runs our CLI). */
const TOOLS = new Set([
  "curl",
  "docker",
  "openssl",
  "git",
  "npx",
  "pg_dump",
  "psql",
  "echo",
  "set",
  "sed",
  "cat",
  "date",
]);

/** Where an environment variable a document sets must be read: the relay, the examples, the compose file, the test setup. */
const variableSources = (() => {
  const texts: string[] = [];
  const walk = (dir: string): void => {
    for (const entry of readdirSync(join(ROOT, dir), { withFileTypes: true })) {
      const path = `${dir}/${entry.name}`;
      if (entry.isDirectory()) walk(path);
      else if (/\.(ts|mjs|js|py|sh)$/.test(entry.name)) texts.push(read(path));
    }
  };
  for (const dir of ["src", "examples", "test/setup", "scripts"]) walk(dir);
  texts.push(read("docker-compose.yml"), read("Dockerfile"));
  return texts.join("\n");
})();

function variableProblem(assignment: string): string[] {
  const name = /^([A-Za-z_][A-Za-z0-9_]*)=/.exec(assignment)?.[1];
  if (!name || !/^[A-Z][A-Z0-9_]*$/.test(name)) return [];
  return new RegExp(`\\b${name}\\b`).test(variableSources)
    ? []
    : [`${name} is read by nothing (src/, examples/, docker-compose.yml)`];
}

function cliProblems(args: string[]): string[] {
  const [group, sub] = args;
  const commands = group === undefined ? undefined : COMMANDS[group]?.commands;
  if (!commands) return [`no CLI command group "${group ?? ""}"`];
  const command = sub === undefined ? undefined : commands[sub];
  if (!command) return [`no CLI command "${group} ${sub ?? ""}"`];
  const flags = args.slice(2).flatMap((w) => w.match(/--[a-z][a-z-]*/g) ?? []);
  return flags
    .filter((f) => f !== "--help" && !new RegExp(`${f}(?![a-z-])`).test(command.usage))
    .map((f) => `"${group} ${sub}" has no option ${f}`);
}

function nodeProblems(args: string[]): string[] {
  const file = args.find((a) => !a.startsWith("-"));
  if (file === undefined) return ["node without a file"];
  const built = /^dist\/(.+)\.js$/.exec(file);
  if (built && !existsSync(join(ROOT, "src", `${built[1]}.ts`))) return [`${file} is built from no src/ file`];
  if (!built && !existsSync(join(ROOT, file))) return [`no file ${file}`];
  return file === "dist/cli.js" ? cliProblems(args.slice(args.indexOf(file) + 1)) : [];
}

function shellProblems(command: ShellCommand): string[] {
  const words = [...command.words];
  const problems: string[] = [];
  while (words.length > 0 && /^[A-Za-z_][A-Za-z0-9_]*=/.test(words[0]!)) {
    const assignment = words.shift()!;
    // A shell variable of a script (`task=$(…)`) is no setting; an environment variable before a command is.
    if (words.length > 0) problems.push(...variableProblem(assignment));
  }
  const [tool, ...args] = words;
  if (tool === undefined) return problems;
  switch (tool) {
    case "export":
      return [...problems, ...args.flatMap(variableProblem)];
    case "npm": {
      const [verb, script, ...rest] = args;
      if (verb === "test" || verb === "start") return scripts[verb] ? problems : [...problems, `no npm script ${verb}`];
      if (verb === "run") {
        if (script === undefined || !scripts[script]) return [...problems, `no npm script ${script ?? ""}`];
        return script === "cli" ? [...problems, ...cliProblems(rest[0] === "--" ? rest.slice(1) : rest)] : problems;
      }
      return NPM_BUILTINS.has(verb ?? "") ? problems : [...problems, `npm ${verb ?? ""} is not checked here`];
    }
    case "node":
      return [...problems, ...nodeProblems(args)];
    case "sh":
    case "bash":
      return existsSync(join(ROOT, args[0] ?? "")) ? problems : [...problems, `no file ${args[0] ?? ""}`];
    case "cd":
      return existsSync(join(ROOT, args[0] ?? "")) ? problems : [...problems, `no folder ${args[0] ?? ""}`];
    case "docker": {
      for (let i = 0; i < args.length - 1; i++) if (args[i] === "-e") problems.push(...variableProblem(args[i + 1]!));
      const exec = args[0] === "compose" && args[1] === "exec" ? args[2] : undefined;
      if (exec !== undefined && !new RegExp(`^  ${exec}:`, "m").test(read("docker-compose.yml")))
        problems.push(`docker-compose.yml has no service ${exec}`);
      const node = args.indexOf("node");
      return node >= 0 ? [...problems, ...nodeProblems(args.slice(node + 1))] : problems;
    }
    default:
      return TOOLS.has(tool) ? problems : [...problems, `${tool} is not a command this test knows`];
  }
}

function hasPython(): boolean {
  try {
    execFileSync("python3", ["--version"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}
