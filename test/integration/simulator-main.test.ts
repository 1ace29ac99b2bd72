import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

// The standalone entry runs from the build; `npm test` builds before running vitest.
const MAIN = fileURLToPath(new URL("../../dist/simulator/main.js", import.meta.url));

function run(env: Record<string, string>) {
  const child = spawn(process.execPath, [MAIN], { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
  child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
  return { child, exited, out: () => stdout, err: () => stderr };
}

describe.skipIf(!existsSync(MAIN))("simulator main (dist)", () => {
  it("listens, announces its URL, serves, and exits 0 on SIGTERM", async () => {
    const p = run({ SIM_PORT: "0", SIM_API_KEYS: "k1,k2" });
    try {
      const line = await new Promise<string>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no listening line; stderr: ${p.err()}`)), 10_000);
        p.child.stdout.on("data", () => {
          if (p.out().includes("\n")) {
            clearTimeout(timer);
            resolve(p.out());
          }
        });
      });
      const match = /^genrelay simulator listening on (http:\/\/127\.0\.0\.1:\d+)\n$/.exec(line);
      expect(match).not.toBeNull();
      const res = await fetch(`${match![1]}/openapi/v1/models`, { headers: { authorization: "Bearer k2" } });
      expect(res.status).toBe(200);
      p.child.kill("SIGTERM");
      expect(await p.exited).toBe(0);
    } finally {
      if (p.child.exitCode === null) p.child.kill("SIGKILL");
    }
  });

  it("exits 2 with one line naming a bad variable", async () => {
    const p = run({ SIM_READS_PER_MINUTE: "lots" });
    expect(await p.exited).toBe(2);
    expect(p.err()).toMatch(/^genrelay simulator: invalid environment variable SIM_READS_PER_MINUTE: .*\n$/);
    expect(p.out()).toBe("");
  });
});
