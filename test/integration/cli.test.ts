import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { CLI_PATH, runCliInProcess, runCliProcess, type CliRun } from "../helpers/cli.js";
import { createTestRelay, type TestRelay } from "../helpers/relay.js";

let dir: string;
let dbPath: string;
const relays: TestRelay[] = [];

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "genrelay-cli-"));
  // A folder that does not exist yet: the CLI creates it, as the server does.
  dbPath = join(dir, "nested", "relay.db");
});
afterEach(async () => {
  for (const r of relays.splice(0)) await r.close();
  rmSync(dir, { recursive: true, force: true });
});

/**
 * Runs the CLI in-process (runCli) with a clean environment: only what a test passes, plus PATH and
 * the database. One smoke test below runs the built CLI as a real process.
 */
function cli(args: string[], env: Record<string, string> = {}): Promise<CliRun> {
  return runCliInProcess(args, { PATH: process.env.PATH ?? "", DATABASE_PATH: dbPath, ...env });
}

async function createClient(
  name = "acme",
): Promise<{ id: string; name: string; api_key: string; webhook_secret: string }> {
  const run = await cli(["clients", "create", "--name", name, "--json"]);
  expect(run.stderr).toBe("");
  expect(run.status).toBe(0);
  return JSON.parse(run.stdout) as { id: string; name: string; api_key: string; webhook_secret: string };
}

/** A relay app on the CLI's database file (the server and the CLI share DATABASE_PATH). */
function relayOnSameDb(): TestRelay {
  const r = createTestRelay({ DATABASE_PATH: dbPath });
  relays.push(r);
  return r;
}

describe("clients create", () => {
  it("--json prints exactly one JSON object with id, name, api_key and webhook_secret (the built CLI, as a process)", () => {
    expect(
      existsSync(CLI_PATH),
      `${CLI_PATH} is missing: build first (npx tsc -p tsconfig.build.json, or npm test)`,
    ).toBe(true);
    const run = runCliProcess(["clients", "create", "--name", "Acme Inc", "--json"], { DATABASE_PATH: dbPath });
    expect(run.status).toBe(0);
    expect(run.stderr).toBe("");
    expect(run.stdout.endsWith("\n")).toBe(true);
    expect(run.stdout.trimEnd().split("\n")).toHaveLength(1);
    const created = JSON.parse(run.stdout) as Record<string, string>;
    expect(created).toEqual({
      id: expect.stringMatching(/^cli_[0-9a-z]{26}$/),
      name: "Acme Inc",
      api_key: expect.stringMatching(/^grk_[A-Za-z0-9_-]{43}$/),
      webhook_secret: expect.stringMatching(/^whsec_[A-Za-z0-9+/]+={0,2}$/),
    });
    expect(Buffer.from(created.webhook_secret!.slice("whsec_".length), "base64").length).toBeGreaterThanOrEqual(24);
    expect(existsSync(dbPath)).toBe(true);
  });

  it("without --json prints the key and the secret for a human", async () => {
    const run = await cli(["clients", "create", "--name", "acme"]);
    expect(run.status).toBe(0);
    expect(run.stdout).toMatch(/^created client cli_[0-9a-z]{26} \(acme\)$/m);
    expect(run.stdout).toMatch(/^api key: +grk_\S+$/m);
    expect(run.stdout).toMatch(/^webhook secret: +whsec_\S+$/m);
  });

  it("issues a key the relay accepts, on the same database", async () => {
    const created = await createClient();
    const r = relayOnSameDb();
    const res = await r.request(created.api_key, "/openapi/v1/tasks");
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ data: [], next_cursor: null });
  });

  it("gives every client its own key and secret", async () => {
    const a = await createClient("a");
    const b = await createClient("b");
    expect(new Set([a.id, b.id]).size).toBe(2);
    expect(a.api_key).not.toBe(b.api_key);
    expect(a.webhook_secret).not.toBe(b.webhook_secret);
  });
});

describe("clients list", () => {
  it("shows every client without its key or secret", async () => {
    const a = await createClient("alpha");
    const b = await createClient("beta");
    const run = await cli(["clients", "list"]);
    expect(run.status).toBe(0);
    expect(run.stdout).toContain(a.id);
    expect(run.stdout).toContain(b.id);
    expect(run.stdout).toContain("alpha");
    expect(run.stdout).toMatch(new RegExp(`^${a.id}\\s+active\\s`, "m"));
    for (const secret of [a.api_key, b.api_key, a.webhook_secret, b.webhook_secret])
      expect(run.stdout).not.toContain(secret);

    const json = await cli(["clients", "list", "--json"]);
    expect(json.status).toBe(0);
    const rows = JSON.parse(json.stdout) as Record<string, unknown>[];
    expect(rows.map((r) => [r.id, r.name, r.status])).toEqual([
      [a.id, "alpha", "active"],
      [b.id, "beta", "active"],
    ]);
    for (const row of rows) {
      expect(Object.keys(row)).not.toContain("api_key");
      expect(Object.keys(row)).not.toContain("webhook_secret");
      expect(row.key_prefix).toEqual(expect.stringMatching(/^grk_.{6}…$/));
    }
    for (const secret of [a.api_key, b.api_key, a.webhook_secret, b.webhook_secret])
      expect(json.stdout).not.toContain(secret);
  });

  it("on an empty database says how to create one", async () => {
    const run = await cli(["clients", "list"]);
    expect(run.status).toBe(0);
    expect(run.stdout).toContain("clients create --name");
    expect(JSON.parse((await cli(["clients", "list", "--json"])).stdout)).toEqual([]);
  });
});

describe("clients revoke", () => {
  it("makes the key 401 at once, while the relay runs on the same database", async () => {
    const created = await createClient();
    const other = await createClient("other");
    const r = relayOnSameDb();
    expect((await r.request(created.api_key, "/openapi/v1/tasks")).status).toBe(200);

    const run = await cli(["clients", "revoke", created.id]);
    expect(run.status).toBe(0);
    expect(run.stdout).toContain(created.id);

    const res = await r.request(created.api_key, "/openapi/v1/tasks");
    expect(res.status).toBe(401);
    expect(await res.json()).toEqual({
      error: { code: "invalid_api_key", message: expect.any(String), request_id: expect.stringMatching(/^req_/) },
    });
    // Another client is untouched.
    expect((await r.request(other.api_key, "/openapi/v1/tasks")).status).toBe(200);
    // The list says revoked; revoking again is harmless.
    expect((await cli(["clients", "list"])).stdout).toMatch(new RegExp(`^${created.id}\\s+revoked\\s`, "m"));
    expect((await cli(["clients", "revoke", created.id])).status).toBe(0);
  });
});

describe("clients rotate-secret", () => {
  it("prints a new secret, different from the old one", async () => {
    const created = await createClient();
    const run = await cli(["clients", "rotate-secret", created.id, "--json"]);
    expect(run.status).toBe(0);
    const rotated = JSON.parse(run.stdout) as Record<string, string>;
    expect(rotated).toEqual({
      id: created.id,
      webhook_secret: expect.stringMatching(/^whsec_[A-Za-z0-9+/]+={0,2}$/),
      previous_secret_expires_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/),
    });
    expect(rotated.webhook_secret).not.toBe(created.webhook_secret);
    const hours = (Date.parse(rotated.previous_secret_expires_at!) - Date.now()) / 3_600_000;
    expect(hours).toBeGreaterThan(23.9);
    expect(hours).toBeLessThanOrEqual(24);

    const human = await cli(["clients", "rotate-secret", created.id]);
    expect(human.status).toBe(0);
    expect(human.stdout).toMatch(/^new webhook secret: whsec_\S+$/m);
    expect(human.stdout).not.toContain(rotated.webhook_secret);
  });
});

describe("usage errors", () => {
  it.each([
    [["clients", "create"], /clients create needs --name NAME/],
    [["clients", "create", "--name", "   "], /clients create needs --name NAME/],
    [["clients", "create", "--name"], /--name/],
    [["clients", "create", "--name", "x", "--bogus"], /--bogus/],
    [["clients", "create", "--name", "x", "--max-waiting", "lots"], /--max-waiting must be a whole number/],
    [
      ["clients", "create", "--name", "x", "--upstream-key-env", "NOT_SET_ANYWHERE"],
      /NOT_SET_ANYWHERE is empty or unset/,
    ],
    [["clients", "revoke"], /clients revoke needs a client id/],
    [["clients", "revoke", "cli_unknown"], /no client cli_unknown/],
    [["clients", "rotate-secret"], /clients rotate-secret needs a client id/],
    [["clients", "rotate-secret", "cli_unknown"], /no client cli_unknown/],
    [["clients", "update", "cli_unknown", "--max-running", "2"], /no client cli_unknown/],
    [["clients", "explode"], /unknown command: clients explode\n/],
    [["servers", "list"], /unknown command: servers\n/],
    [["clients", "craete", "--name", "x"], /unknown command: clients craete \(did you mean "clients create"\?\)\n/],
    [["client", "list"], /unknown command: client \(did you mean "clients"\?\)\n/],
    [["tasks", "cancle"], /unknown command: tasks cancle \(did you mean "tasks cancel"\?\)\n/],
  ])("%j exits non-zero with a clear message on stderr", async (args, message) => {
    const run = await cli(args);
    expect(run.status).toBe(1);
    expect(run.stdout).toBe("");
    expect(run.stderr).toMatch(message);
    expect(run.stderr).toMatch(/^genrelay: /);
    expect(run.stderr).toContain("--help");
    // One short message, never a stack trace.
    expect(run.stderr).not.toMatch(/\n\s+at /);
  });

  it("a usage error gives exit code 1 from the built CLI as a process too", () => {
    const run = runCliProcess(["servers", "list"], { DATABASE_PATH: dbPath });
    expect(run.status).toBe(1);
    expect(run.stdout).toBe("");
    expect(run.stderr).toBe("genrelay: unknown command: servers\nRun with --help for usage.\n");
  });

  it("no command at all prints the usage and exits non-zero", async () => {
    const run = await cli([]);
    expect(run.status).toBe(1);
    expect(`${run.stdout}${run.stderr}`).toContain("clients create --name NAME");
  });

  it("refuses to store a client's upstream key without RELAY_ENCRYPTION_KEY", async () => {
    const run = await cli(["clients", "create", "--name", "x", "--upstream-key-env", "MY_KEY"], {
      MY_KEY: "sk_live_secret_value",
    });
    expect(run.status).toBe(1);
    expect(run.stderr).toMatch(/RELAY_ENCRYPTION_KEY/);
    expect(run.stderr).not.toContain("sk_live_secret_value");
  });

  it("a bad environment variable stops the CLI with one line naming it", async () => {
    const run = await cli(["clients", "list"], { LOG_LEVEL: "chatty" });
    expect(run.status).toBe(2);
    expect(run.stderr.trimEnd().split("\n")).toEqual([
      expect.stringMatching(/^genrelay: invalid environment variable LOG_LEVEL: /),
    ]);
  });
});

describe("--help", () => {
  it.each([
    [["--help"]],
    [["-h"]],
    [["help"]],
    [["clients", "--help"]],
    [["clients", "create", "--help"]],
    [["clients", "revoke", "-h"]],
  ])("%j prints the usage and exits 0", async (args) => {
    const run = await cli(args);
    expect(run.status).toBe(0);
    expect(run.stderr).toBe("");
    for (const command of [
      "clients create --name NAME",
      "clients list",
      "clients revoke ID",
      "clients rotate-secret ID",
    ])
      expect(run.stdout).toContain(command);
  });
});

describe("limits", () => {
  it("create and update set a client's limits, shown by list", async () => {
    const run = await cli([
      "clients",
      "create",
      "--name",
      "x",
      "--json",
      "--max-waiting",
      "5",
      "--credit-limit",
      "1000",
    ]);
    expect(run.status).toBe(0);
    const { id } = JSON.parse(run.stdout) as { id: string };
    const updated = await cli(["clients", "update", id, "--max-running", "2", "--credit-limit", "none"]);
    expect(updated.status).toBe(0);
    expect(updated.stdout).toContain("max_waiting=5 max_running=2 credit_limit=none");
    const [row] = JSON.parse((await cli(["clients", "list", "--json"])).stdout) as Record<string, unknown>[];
    expect(row).toMatchObject({ id, max_waiting: 5, max_running: 2, credit_limit: null, points_spent: 0 });
  });
});
