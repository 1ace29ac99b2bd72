import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, normalize } from "node:path";
import { describe, expect, it } from "vitest";
import { ROOT } from "../helpers/doc-blocks.js";

/**
 * The project's documents live in the project (docs/contract.md, "The published contract"): code and
 * docs cite the repository's own files — docs/contract.md for the relay's contract,
 * docs/upstream.md for the upstream API — by file and heading (`docs/contract.md, "Webhooks"`),
 * never a document outside the repository, and never a bare "section N" that names no file. A
 * comment or a document that names a file of the repository by its path names one that exists.
 */

const SCANNED = ["src", "test", "docs", "bench", "scripts", "examples", "README.md"];
const TEXT = /\.(ts|mts|cts|js|mjs|cjs|py|sh|md)$/;
const SELF = "test/unit/doc-citations.test.ts";

// Built from pieces so that this file does not cite what it looks for.
const OUTSIDE = [new RegExp(`\\b${"DESIGN"}\\b`), new RegExp(`${"UPSTREAM"}-API`)];
const SECTION = new RegExp(`\\b[Ss]ections?\\s+\\d+|${"§"}\\s*\\d+`, "g");
const QUALIFIED = /\.md\b|\bRFC\s*\d+/;
const DOC_PATH = /(?<![\w/.-])((?:\.\.\/)*docs\/[\w./-]*?\.md)(#[\w-]+)?(?:,\s*["“']([^"”']+)["”'])?/g;
const MD_LINK = /\]\(([^)\s#]+\.md)(#[\w-]+)?\)/g;

function files(): string[] {
  const found: string[] = [];
  const walk = (path: string): void => {
    const absolute = join(ROOT, path);
    if (!existsSync(absolute)) return;
    if (statSync(absolute).isDirectory()) {
      for (const entry of readdirSync(absolute))
        if (entry !== "node_modules" && !entry.startsWith(".")) walk(`${path}/${entry}`);
    } else if (TEXT.test(path)) found.push(path);
  };
  for (const path of SCANNED) walk(path);
  return found.filter((f) => f !== SELF).sort();
}

/** GitHub's anchor of a heading. */
function slug(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, "")
    .replace(/\s/g, "-");
}

const headingCache = new Map<string, string[]>();
function headings(file: string): string[] {
  let found = headingCache.get(file);
  if (!found) {
    found = [...readFileSync(join(ROOT, file), "utf8").matchAll(/^#{1,6}\s+(.+?)\s*#*\s*$/gm)].map((m) => m[1]!);
    headingCache.set(file, found);
  }
  return found;
}

/**
 * The file's lines, a citation whose quoted heading goes on to the next line (a wrapped comment)
 * joined with that line's text, so the heading is checked whole.
 */
function joinedLines(text: string): string[] {
  const lines = text.split("\n");
  return lines.map((line, i) =>
    /docs\/[\w./-]+\.md,\s*["“'][^"”']*$/.test(line) && i + 1 < lines.length
      ? `${line} ${lines[i + 1]!.replace(/^\s*(\*|\/\/|#)?\s*/, "")}`
      : line,
  );
}

/** What is wrong with one line of a file: its citations that point outside the repository or nowhere. */
function citationProblems(file: string, line: string): string[] {
  const problems: string[] = [];
  if (OUTSIDE.some((p) => p.test(line)))
    problems.push("cites a document outside the repository: cite docs/contract.md or docs/upstream.md");
  for (const m of line.matchAll(SECTION)) {
    if (!QUALIFIED.test(line.slice(0, m.index)))
      problems.push(`"${m[0]}" names no file: write e.g. docs/contract.md, "Webhooks"`);
  }
  const targets: Array<{ path: string; anchor?: string; heading?: string }> = [];
  for (const m of line.matchAll(DOC_PATH)) {
    targets.push({
      path: m[1]!.replace(/^(\.\.\/)+/, ""),
      ...(m[2] ? { anchor: m[2].slice(1) } : {}),
      ...(m[3] ? { heading: m[3] } : {}),
    });
  }
  if (file.endsWith(".md")) {
    for (const m of line.matchAll(MD_LINK)) {
      if (/^[a-z]+:/.test(m[1]!)) continue;
      targets.push({ path: normalize(join(dirname(file), m[1]!)), ...(m[2] ? { anchor: m[2].slice(1) } : {}) });
    }
  }
  for (const t of targets) {
    if (!existsSync(join(ROOT, t.path))) {
      problems.push(`cites ${t.path}, which does not exist`);
      continue;
    }
    if (t.heading !== undefined && !headings(t.path).includes(t.heading))
      problems.push(`cites "${t.heading}" of ${t.path}, which has no such heading`);
    if (t.anchor !== undefined && !headings(t.path).map(slug).includes(t.anchor))
      problems.push(`cites #${t.anchor} of ${t.path}, which has no such heading`);
  }
  return problems;
}

/**
 * A path with a folder and a file ending (`src/db/pg/leadership.ts`, `core/fair-pool.ts`,
 * `../endpoints.ts`), not inside a longer word, a URL or a package name (`@scope/x`), and not a
 * pattern (`store-conformance-*.test.ts`, `src/cli/<group>.ts`: the `*`, `<` or `{` stops it).
 */
const ENDINGS = "ts|mts|cts|js|mjs|cjs|md|json|ya?ml|sql|sh|py";
const FILE_PATH = new RegExp(`(?<![\\w/.@$-])((?:\\.\\./)*(?:[\\w-]+/)*[\\w.-]+\\.(?:${ENDINGS}))(?![\\w*<{/-])`, "g");
/** Paths of what the build or the install makes, and docs/ paths (the citation check's). */
const NOT_POINTERS = /^(?:\.\.\/)*(?:dist|node_modules|docs)\//;

/**
 * Pointers known to be stale, each to be mended by whoever owns the file that holds it (then drop
 * it here: the check fails while an entry is no longer found, so the list cannot outlive its use).
 */
const KNOWN_MISSING = new Map<string, string>([]);

/** The part of a line that is prose: all of a Markdown line, a comment's text in code. */
function prose(file: string, line: string): string {
  if (file.endsWith(".md")) return line;
  if (/^\s*(\/\/|\/?\*|#)/.test(line)) return line;
  const trailing = line.indexOf(" // ");
  return trailing >= 0 ? line.slice(trailing) : "";
}

/**
 * The files a line names that do not exist. A path is read from the repository's root, from src/
 * or test/ (`core/fair-pool.ts`), or from the naming file's folder (`../endpoints.ts`,
 * `decisions/0008-fair-pool.md`); a `.js` import path also stands for its `.ts` source.
 */
function missingFiles(file: string, line: string): string[] {
  const missing: string[] = [];
  for (const m of prose(file, line).matchAll(FILE_PATH)) {
    const path = m[1]!;
    if (!path.includes("/") || NOT_POINTERS.test(path) || missing.includes(path)) continue;
    const bases = [path, `src/${path}`, `test/${path}`, join(dirname(file), path)];
    const candidates = bases.flatMap((b) => (b.endsWith(".js") ? [b, `${b.slice(0, -3)}.ts`] : [b]));
    if (!candidates.some((c) => existsSync(join(ROOT, normalize(c))))) missing.push(path);
  }
  return missing;
}

describe("citations", () => {
  const scanned = files();

  it("scans the code, the tests, the docs, the benchmarks and the scripts", () => {
    for (const f of [
      "src/config.ts",
      "test/helpers/relay.ts",
      "docs/contract.md",
      "README.md",
      "examples/receive-hmac.mjs",
    ])
      expect(scanned).toContain(f);
    expect(scanned.some((f) => f.startsWith("bench/"))).toBe(true);
  });

  it("point only at the repository's own documents, by file and heading", () => {
    const offenders: string[] = [];
    for (const file of scanned) {
      joinedLines(readFileSync(join(ROOT, file), "utf8")).forEach((line, i) => {
        for (const p of citationProblems(file, line))
          offenders.push(`${file}:${i + 1}: ${p}\n    ${line.trim().slice(0, 160)}`);
      });
    }
    expect(offenders, `${offenders.length} citations to fix:\n${offenders.join("\n")}`).toEqual([]);
  });

  it("name only files that exist", () => {
    const offenders: string[] = [];
    const known = new Set<string>();
    for (const file of scanned) {
      readFileSync(join(ROOT, file), "utf8")
        .split("\n")
        .forEach((line, i) => {
          for (const path of missingFiles(file, line)) {
            if (file.startsWith(KNOWN_MISSING.get(path) ?? "\0")) known.add(path);
            else offenders.push(`${file}:${i + 1}: names ${path}, which does not exist\n    ${line.trim()}`);
          }
        });
    }
    expect(offenders, `${offenders.length} pointers to fix:\n${offenders.join("\n")}`).toEqual([]);
    const mended = [...KNOWN_MISSING.keys()].filter((path) => !known.has(path));
    expect(mended, "mended: drop these from KNOWN_MISSING").toEqual([]);
  });

  it("the pointer check flags a file that does not exist and passes the ones that do", () => {
    expect(missingFiles("src/x.ts", "// see src/db/nowhere.ts")).toEqual(["src/db/nowhere.ts"]);
    expect(missingFiles("src/x.ts", " * test/unit/nowhere.test.ts holds it")).toEqual(["test/unit/nowhere.test.ts"]);
    expect(missingFiles("src/db/pg/x.ts", "// the SQLite one is in ../nowhere.ts")).toEqual(["../nowhere.ts"]);
    expect(missingFiles("docs/x.md", "`core/nowhere.ts` does it")).toEqual(["core/nowhere.ts"]);
    const good = [
      "// src/core/fair-pool.ts and core/lifecycle.ts",
      "// leases (src/store/store.ts); imported as ../store/store.js",
      " * test/integration/store-conformance-*.test.ts, src/db/sqlite/<area>.ts, node dist/cli.js",
      "// https://example.com/a/nowhere.md, @hono/zod-openapi, $RELAY/openapi.json",
      'const file = "src/nowhere.ts"; // code, not a comment: not read',
    ];
    for (const line of good) expect(missingFiles("src/workers/x.ts", line), line).toEqual([]);
    expect(missingFiles("docs/x.md", "see decisions/0008-fair-pool.md")).toEqual([]);
  });

  it("the check flags each kind of bad citation and passes good ones", () => {
    const bad = [
      `// see ${"DESIGN"} ${"§"}12`,
      `/** ${"UPSTREAM"}-API.md ${"§"}7 */`,
      `// (section 14): refused`,
      `// the rule (${"§"}4.1)`,
      `// docs/nowhere.md`,
      `// docs/contract.md, "No such heading"`,
      `// docs/contract.md#no-such-heading`,
    ];
    for (const line of bad) expect(citationProblems("src/x.ts", line), line).not.toEqual([]);
    expect(citationProblems("docs/x.md", "see [the guide](nowhere.md)")).not.toEqual([]);
    expect(joinedLines(' * (docs/contract.md, "The published\n * contract").')[0]).toBe(
      ' * (docs/contract.md, "The published contract").',
    );
    const good = [
      `// docs/contract.md, "Webhooks"`,
      `// (docs/upstream.md, "Errors")`,
      `// docs/contract.md#outputs`,
      `// Retry-After (RFC 9110 ${"§"}10.2.3)`,
    ];
    for (const line of good) expect(citationProblems("src/x.ts", line), line).toEqual([]);
    expect(citationProblems("docs/x.md", "see [the contract](contract.md#webhooks)")).toEqual([]);
  });
});
