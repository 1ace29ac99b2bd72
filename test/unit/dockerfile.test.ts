import { existsSync, readFileSync, statSync } from "node:fs";
import { join, normalize, posix, relative, resolve } from "node:path";
import { describe, expect, it } from "vitest";

/**
 * No Docker engine runs in CI, so the Dockerfile is checked by reading it: every path it copies
 * exists, every script it runs is defined, what the runtime starts is what the build produces,
 * and the runtime stage has the operational settings the README promises.
 */

const ROOT = resolve(import.meta.dirname, "../..");

interface Instruction {
  keyword: string;
  args: string;
  line: number;
}

interface Stage {
  name: string | null;
  base: string;
  instructions: Instruction[];
}

/** Instructions with continuation lines joined and comments dropped (parser directives included). */
function parseDockerfile(text: string): Instruction[] {
  const result: Instruction[] = [];
  const lines = text.split("\n");
  let current = "";
  let start = 0;
  lines.forEach((raw, i) => {
    const line = raw.trimEnd();
    if (current === "" && (line.trim() === "" || line.trim().startsWith("#"))) return;
    if (current !== "" && line.trim().startsWith("#")) return; // comment inside a continuation
    if (current === "") start = i + 1;
    if (line.endsWith("\\")) {
      current += `${line.slice(0, -1)} `;
      return;
    }
    current += line;
    const match = /^\s*(\w+)\s+([\s\S]*)$/.exec(current);
    if (match) result.push({ keyword: match[1]!.toUpperCase(), args: match[2]!.trim(), line: start });
    current = "";
  });
  return result;
}

function stages(instructions: Instruction[]): { args: Map<string, string>; stages: Stage[] } {
  const args = new Map<string, string>();
  const list: Stage[] = [];
  for (const ins of instructions) {
    if (ins.keyword === "ARG" && list.length === 0) {
      const [name, value] = ins.args.split("=");
      if (value !== undefined) args.set(name!, value);
    } else if (ins.keyword === "FROM") {
      const m = /^(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?$/i.exec(ins.args)!;
      const base = m[1]!.replace(/\$\{(\w+)\}|\$(\w+)/g, (_, a: string, b: string) => args.get(a ?? b) ?? "");
      list.push({ name: m[2] ?? null, base, instructions: [] });
    } else {
      list.at(-1)?.instructions.push(ins);
    }
  }
  return { args, stages: list };
}

/** COPY/ADD arguments: flags, sources and the destination (JSON array form or plain words). */
function copyParts(args: string): { flags: Record<string, string>; sources: string[]; dest: string } {
  const flags: Record<string, string> = {};
  let rest = args;
  for (;;) {
    const m = /^--([\w-]+)(?:=(\S+))?\s+/.exec(rest);
    if (!m) break;
    flags[m[1]!] = m[2] ?? "true";
    rest = rest.slice(m[0].length);
  }
  const words = rest.startsWith("[") ? (JSON.parse(rest) as string[]) : rest.split(/\s+/);
  return { flags, sources: words.slice(0, -1), dest: words.at(-1)! };
}

/** ENV in both forms: `ENV A=1 B=2` and the legacy `ENV A 1`. */
function envOf(stage: Stage): Map<string, string> {
  const env = new Map<string, string>();
  for (const ins of stage.instructions.filter((i) => i.keyword === "ENV")) {
    if (!ins.args.includes("=")) {
      const [k, ...v] = ins.args.split(/\s+/);
      env.set(k!, v.join(" "));
      continue;
    }
    for (const m of ins.args.matchAll(/(\w+)=("([^"]*)"|\S+)/g)) env.set(m[1]!, m[3] ?? m[2]!);
  }
  return env;
}

const dockerfile = readFileSync(join(ROOT, "Dockerfile"), "utf8");
const instructions = parseDockerfile(dockerfile);
const { args, stages: allStages } = stages(instructions);
const runtime = allStages.at(-1)!;
const build = allStages.find((s) => s.name === "build");
const pkg = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as {
  scripts: Record<string, string>;
  type?: string;
};
const dockerignore = existsSync(join(ROOT, ".dockerignore"))
  ? readFileSync(join(ROOT, ".dockerignore"), "utf8")
      .split("\n")
      .map((l) => l.trim())
      .filter((l) => l && !l.startsWith("#"))
  : [];

const find = (stage: Stage, keyword: string) => stage.instructions.filter((i) => i.keyword === keyword);
const lastOf = (stage: Stage, keyword: string) => find(stage, keyword).at(-1);
/** The exec-form command as words (shell form split on spaces). */
const words = (args: string) => (args.startsWith("[") ? (JSON.parse(args) as string[]) : args.split(/\s+/));

/** Paths a stage has put under its WORKDIR with COPY, relative to it (e.g. "dist", "migrations"). */
function copiedInto(stage: Stage): Map<string, { from: string | null; sources: string[] }> {
  const map = new Map<string, { from: string | null; sources: string[] }>();
  for (const ins of find(stage, "COPY")) {
    const { flags, sources, dest } = copyParts(ins.args);
    for (const src of sources) {
      const target = dest.endsWith("/") || sources.length > 1 ? posix.join(dest, posix.basename(src)) : dest;
      map.set(posix.normalize(target).replace(/^\.\//, ""), { from: flags.from ?? null, sources: [src] });
    }
  }
  return map;
}

describe("Dockerfile", () => {
  it("parses into a build stage and a runtime stage on a current Node LTS slim image", () => {
    expect(allStages.length).toBeGreaterThanOrEqual(2);
    expect(build).toBeDefined();
    for (const stage of allStages) {
      const m = /^node:(\d+)[\w.-]*-slim$/.exec(stage.base);
      expect(m, `base image ${stage.base}`).not.toBeNull();
      const major = Number(m![1]);
      // Even majors are the LTS lines; package.json asks for Node >= 20.
      expect(major % 2).toBe(0);
      expect(major).toBeGreaterThanOrEqual(20);
    }
    expect(args.get("NODE_VERSION")).toBeDefined();
  });

  it("copies only sources that exist in the repository and are not excluded by .dockerignore", () => {
    const contextCopies = instructions.filter(
      (i) => (i.keyword === "COPY" || i.keyword === "ADD") && !copyParts(i.args).flags.from,
    );
    expect(contextCopies.length).toBeGreaterThan(0);
    for (const ins of contextCopies) {
      for (const src of copyParts(ins.args).sources) {
        const path = normalize(join(ROOT, src));
        expect(relative(ROOT, path).startsWith(".."), `line ${ins.line}: ${src} is outside the build context`).toBe(
          false,
        );
        expect(existsSync(path), `line ${ins.line}: COPY source ${src} does not exist`).toBe(true);
        const top = relative(ROOT, path).split(/[\\/]/)[0]!;
        expect(dockerignore, `line ${ins.line}: ${src} is excluded by .dockerignore`).not.toContain(top);
      }
    }
  });

  it("gives the build what it needs: lockfile for npm ci, every tsconfig, src, and scripts that exist", () => {
    const copied = copiedInto(build!);
    for (const needed of ["package.json", "package-lock.json", "tsconfig.json", "tsconfig.build.json", "src"]) {
      expect([...copied.keys()], `build stage copies ${needed}`).toContain(needed);
    }
    // A tsconfig the build extends must be copied too.
    const buildTsconfig = JSON.parse(readFileSync(join(ROOT, "tsconfig.build.json"), "utf8")) as {
      extends?: string;
      compilerOptions: { outDir: string; rootDir: string };
    };
    if (buildTsconfig.extends) expect([...copied.keys()]).toContain(posix.normalize(buildTsconfig.extends));
    expect(statSync(join(ROOT, "src")).isDirectory()).toBe(true);

    const runs = find(build!, "RUN").map((i) => i.args);
    expect(runs.some((r) => /\bnpm ci\b/.test(r))).toBe(true);
    for (const run of [...runs, ...find(runtime, "RUN").map((i) => i.args)]) {
      for (const m of run.matchAll(/\bnpm run ([\w:-]+)/g))
        expect(Object.keys(pkg.scripts), `npm run ${m[1]}`).toContain(m[1]);
    }
    // npm ci installs from the lockfile, so it must come after the lockfile is copied.
    const lockCopy = build!.instructions.findIndex((i) => i.keyword === "COPY" && i.args.includes("package-lock.json"));
    const ci = build!.instructions.findIndex((i) => i.keyword === "RUN" && /\bnpm ci\b/.test(i.args));
    expect(lockCopy).toBeGreaterThanOrEqual(0);
    expect(lockCopy).toBeLessThan(ci);
  });

  it("starts dist/main.js, which the build script produces from src/main.ts, with migrations where the server looks", () => {
    // The build script compiles rootDir src into outDir dist: src/main.ts becomes dist/main.js.
    const tsconfig = JSON.parse(readFileSync(join(ROOT, "tsconfig.build.json"), "utf8")) as {
      compilerOptions: { outDir: string; rootDir: string };
    };
    expect(pkg.scripts.build).toMatch(/\btsc -p tsconfig\.build\.json\b/);
    expect(tsconfig.compilerOptions).toMatchObject({ rootDir: "src", outDir: "dist" });
    expect(pkg.type).toBe("module");

    const cmd = words(lastOf(runtime, "CMD")!.args);
    expect(cmd[0]).toBe("node"); // node itself is PID 1 and receives SIGTERM (exec form, no shell)
    expect(lastOf(runtime, "CMD")!.args.startsWith("[")).toBe(true);
    const entry = cmd[1]!;
    expect(entry).toBe("dist/main.js");
    const source = join(
      ROOT,
      tsconfig.compilerOptions.rootDir,
      relative(tsconfig.compilerOptions.outDir, entry).replace(/\.js$/, ".ts"),
    );
    expect(existsSync(source), `${entry} is built from ${relative(ROOT, source)}`).toBe(true);
    expect(existsSync(join(ROOT, "src", "cli.ts")), "dist/cli.js (the CLI in the image) is built from src/cli.ts").toBe(
      true,
    );

    const runtimeCopies = copiedInto(runtime);
    expect(runtimeCopies.get("dist")).toEqual({ from: "build", sources: ["/app/dist"] });
    expect(runtimeCopies.get("node_modules")).toEqual({ from: "build", sources: ["/app/node_modules"] });
    expect(runtimeCopies.has("package.json")).toBe(true); // "type": "module" for dist/*.js
    // src/db/sqlite/open.ts finds migrations three levels above dist/db/sqlite/, i.e. beside dist/.
    expect(readFileSync(join(ROOT, "src/db/sqlite/open.ts"), "utf8")).toMatch(
      /MIGRATIONS_FOLDER = join\(dirname\(fileURLToPath\(import\.meta\.url\)\), "\.\.", "\.\.", "\.\.", "migrations"\)/,
    );
    expect(runtimeCopies.get("migrations")?.sources).toEqual(["migrations"]);
    expect(existsSync(join(ROOT, "migrations", "meta", "_journal.json"))).toBe(true);
    // Both stages work in the same folder, so /app/dist and /app/node_modules are what the build made.
    expect(lastOf(build!, "WORKDIR")!.args).toBe("/app");
    expect(lastOf(runtime, "WORKDIR")!.args).toBe("/app");
    // Dev dependencies stay out of the runtime image.
    expect(find(build!, "RUN").some((i) => /npm prune --omit=dev|npm ci --omit=dev/.test(i.args))).toBe(true);
  });

  it("runs as a non-root user, with /data as a volume holding the database, on 0.0.0.0", () => {
    const user = lastOf(runtime, "USER")?.args;
    expect(user).toBeDefined();
    expect(["root", "0", "0:0", "root:root"]).not.toContain(user);

    const env = envOf(runtime);
    expect(env.get("HOST")).toBe("0.0.0.0");
    expect(env.get("DATABASE_PATH")).toMatch(/^\/data\//);
    expect(env.get("NODE_ENV")).toBe("production");

    const volume = lastOf(runtime, "VOLUME")!.args;
    expect(words(volume)).toContain("/data");
    // The non-root user must be able to write the volume.
    expect(
      find(runtime, "RUN").some(
        (i) => /mkdir -p \/data/.test(i.args) && new RegExp(`chown ${user}(:${user})? /data`).test(i.args),
      ),
    ).toBe(true);
  });

  it("exposes the port it listens on and checks /healthz on it", () => {
    const env = envOf(runtime);
    const exposed = lastOf(runtime, "EXPOSE")!
      .args.split(/\s+/)
      .map((p) => p.replace(/\/tcp$/, ""));
    expect(exposed).toContain(env.get("PORT") ?? "8080");

    const health = lastOf(runtime, "HEALTHCHECK")!.args;
    expect(health).toMatch(/\bCMD\b/);
    expect(health).toContain("/healthz");
    expect(health).toMatch(/process\.env\.PORT/);
    expect(health).toMatch(/--timeout=\d+s/);
    // node:*-slim images have no curl or wget: the check must not need them.
    expect(health).not.toMatch(/\b(curl|wget)\b/);
  });
});
