import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { runCliInProcess, type CliRun } from "../helpers/cli.js";

let dir: string;
let dbPath: string;
const KEY = Buffer.alloc(32, 5).toString("base64");

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "genrelay-cli-storage-"));
  dbPath = join(dir, "relay.db");
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

function cli(args: string[], env: Record<string, string> = {}): Promise<CliRun> {
  return runCliInProcess(args, {
    PATH: process.env.PATH ?? "",
    DATABASE_PATH: dbPath,
    RELAY_ENCRYPTION_KEY: KEY,
    ...env,
  });
}

const SET = [
  "--endpoint",
  "https://s3.eu-west-1.amazonaws.com",
  "--bucket",
  "gen-out",
  "--region",
  "eu-west-1",
  "--prefix",
  "relay/",
  "--access-key-id",
  "AKIAEXAMPLE",
  "--secret-key-env",
  "S3_SECRET",
];

describe("clients storage", () => {
  it("sets (secret from the environment, never shown), shows and clears a client's bucket", async () => {
    const created = JSON.parse((await cli(["clients", "create", "--name", "acme", "--json"])).stdout) as { id: string };
    expect((await cli(["clients", "storage", created.id])).stdout).toBe(`${created.id} has no bucket\n`);
    const set = await cli(["clients", "storage", created.id, ...SET, "--json"], { S3_SECRET: "very-secret-key" });
    expect(set.stderr).toBe("");
    expect(JSON.parse(set.stdout)).toEqual({
      endpoint: "https://s3.eu-west-1.amazonaws.com",
      bucket: "gen-out",
      region: "eu-west-1",
      prefix: "relay/",
      access_key_id: "AKIAEXAMPLE",
      force_path_style: false,
      public_base_url: null,
      url_expires_in: 604800,
    });
    const shown = await cli(["clients", "storage", created.id]);
    expect(shown.stdout).toContain("bucket=gen-out");
    expect(shown.stdout + set.stdout).not.toContain("very-secret-key");
    expect((await cli(["clients", "storage", created.id, "--clear"])).stdout).toContain("removed the bucket");
    expect((await cli(["clients", "storage", created.id, "--json"])).stdout).toBe("null\n");
  });

  it("refuses a private endpoint, a missing secret, and a relay without RELAY_ENCRYPTION_KEY", async () => {
    const created = JSON.parse((await cli(["clients", "create", "--name", "acme", "--json"])).stdout) as { id: string };
    const priv = await cli(
      ["clients", "storage", created.id, ...SET.map((a) => (a.startsWith("https://s3") ? "https://10.0.0.5" : a))],
      { S3_SECRET: "x" },
    );
    expect(priv.status).toBe(1);
    expect(priv.stderr).toContain("--endpoint: 10.0.0.5 is private (RFC 1918)");
    const noSecret = await cli(["clients", "storage", created.id, ...SET]);
    expect(noSecret.status).toBe(1);
    expect(noSecret.stderr).toContain("S3_SECRET is empty or unset");
    const noKey = await cli(["clients", "storage", created.id, ...SET], { S3_SECRET: "x", RELAY_ENCRYPTION_KEY: "" });
    expect(noKey.status).toBe(1);
    expect(noKey.stderr).toContain("RELAY_ENCRYPTION_KEY");
  });
});
