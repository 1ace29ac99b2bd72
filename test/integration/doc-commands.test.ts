import { serve } from "@hono/node-server";
import { execFile } from "node:child_process";
import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startSimulator } from "../../src/simulator/server.js";
import { allBlocks, SHELL_LANGS, shellCommands } from "../helpers/doc-blocks.js";
import { createTestRelay, type TestRelay } from "../helpers/relay.js";

/**
 * Every curl command of README.md and docs/ runs as written (docs/contract.md, "The published contract")
 * against a relay on loopback, with `RELAY` and `GENRELAY_API_KEY` set as the documents
 * say, and answers what the document shows after it (`# {…}`: the same fields). The relay's loops
 * do not run and its resolver knows no host, so a callback URL in a document (hooks.zapier.com) is
 * never contacted. Files under examples/ are run by examples.test.ts.
 */

const run = promisify(execFile);

interface CurlExample {
  where: string;
  text: string;
  /** The answer the document shows after the command, or null. */
  shown: unknown;
}

const curls: CurlExample[] = allBlocks()
  .filter((b) => SHELL_LANGS.has(b.lang) && b.mirrors === null)
  .flatMap((b) => {
    const commands = shellCommands(b.body).filter((c) => c.words.find((w) => !/^[A-Za-z_]\w*=/.test(w)) === "curl");
    const shown = /^# (\{.*\})$/m.exec(b.body)?.[1];
    return commands.map((c) => ({
      where: `${b.file}:${b.line}`,
      text: c.text,
      shown: commands.length === 1 && shown ? (JSON.parse(shown) as unknown) : null,
    }));
  });

let t: TestRelay;
let server: Server;
let relayUrl: string;
let apiKey: string;
let simulator: Awaited<ReturnType<typeof startSimulator>>;
const asked: string[] = [];

beforeAll(async () => {
  simulator = await startSimulator({ accounts: [{ apiKey: "sandbox" }] });
  t = createTestRelay(
    { WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true" },
    {
      upstream: { baseUrl: simulator.url, apiKey: "sandbox" },
      resolve: async (hostname) => {
        asked.push(hostname);
        throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: "ENOTFOUND" });
      },
    },
  );
  apiKey = t.client("docs").apiKey;
  server = await new Promise<Server>((resolve) => {
    const s = serve({ fetch: t.relay.app.fetch, port: 0, hostname: "127.0.0.1" }, () => resolve(s as Server)) as Server;
  });
  relayUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  server?.closeAllConnections();
  await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
  await t?.close();
  await simulator?.close();
});

/** The shape of a JSON value: object keys (recursively) and value kinds, not the values. */
function shape(value: unknown): unknown {
  if (Array.isArray(value)) return value.length > 0 ? [shape(value[0])] : [];
  if (value !== null && typeof value === "object")
    return Object.fromEntries(
      Object.entries(value)
        .map(([k, v]) => [k, shape(v)])
        .sort(),
    );
  return "value";
}

describe("curl commands of the documents", () => {
  it("finds them", () => {
    expect(curls.length).toBeGreaterThanOrEqual(3);
  });

  it.each(curls)("$where runs as written", async ({ text, shown }) => {
    const { stdout, stderr } = await run("sh", ["-c", text], {
      env: { PATH: process.env.PATH, RELAY: relayUrl, GENRELAY_API_KEY: apiKey },
    });
    expect(stderr).toBe("");
    const answer = JSON.parse(stdout) as Record<string, unknown>;
    expect(answer, stdout).not.toHaveProperty("error");
    expect(answer).toHaveProperty("data");
    if (shown !== null) expect(shape(answer)).toEqual(shape(shown));
  });

  it("contacted no host outside this machine", () => {
    // The sample event went through the relay's resolver, which refused the documents' catch hook host.
    expect(asked).toContain("hooks.zapier.com");
    expect(asked.every((h) => h.endsWith(".zapier.com"))).toBe(true);
  });
});
