import { spawnSync } from "node:child_process";
import { resolve } from "node:path";
import { vi } from "vitest";
import { runCli } from "../../src/cli/run.js";

/** The built CLI, for the few smoke tests that run it as a real process (`npm test` builds dist/). */
export const CLI_PATH = resolve(import.meta.dirname, "../../dist/cli.js");

export interface CliRun {
  status: number | null;
  stdout: string;
  stderr: string;
}

const text = (chunk: unknown) =>
  typeof chunk === "string" ? chunk : Buffer.from(chunk as Uint8Array).toString("utf8");

/**
 * Runs the CLI in this process through runCli, with exactly `env` as its environment, capturing what
 * it writes to stdout and stderr: the same code path as `node dist/cli.js` minus a process start
 * (about 0.3 s each on a busy 2-core machine).
 */
export async function runCliInProcess(args: string[], env: Record<string, string>): Promise<CliRun> {
  let stdout = "";
  let stderr = "";
  const out = vi.spyOn(process.stdout, "write").mockImplementation((chunk: unknown) => ((stdout += text(chunk)), true));
  const err = vi.spyOn(process.stderr, "write").mockImplementation((chunk: unknown) => ((stderr += text(chunk)), true));
  try {
    const status = await runCli(args, env);
    return { status, stdout, stderr };
  } finally {
    out.mockRestore();
    err.mockRestore();
  }
}

/** The built CLI as a real process, with a clean environment: only `env` plus PATH. */
export function runCliProcess(args: string[], env: Record<string, string>): CliRun {
  const res = spawnSync(process.execPath, [CLI_PATH, ...args], {
    env: { PATH: process.env.PATH ?? "", ...env },
    encoding: "utf8",
    timeout: 15_000,
  });
  return { status: res.status, stdout: res.stdout, stderr: res.stderr };
}
