import { describe, expect, it } from "vitest";
import { PUBLIC_REQUESTS_PER_WINDOW } from "../../src/http/public-limit.js";
import { succeededTask } from "../helpers/flow.js";
import type { TestRelay } from "../helpers/relay.js";
import { upstreamSuite } from "../helpers/upstream-suite.js";

/**
 * Issue #38 item 4: a flood of anonymous requests from one address on each public route, while a
 * victim client's task completes and is delivered and its reads go on. The bound is stated in
 * counts and turns, not time (the latency figure is bench/public-routes.mjs's): the victim's webhook
 * is sent in the first dispatcher turn after its completion, as with no flood; every one of its
 * reads answers 200; the flood gets PUBLIC_REQUESTS_PER_WINDOW answers and 429 for the rest.
 */

const { setup, receiver } = upstreamSuite();
const FLOOD = 2_000;
const FLOODER = { incoming: { socket: { remoteAddress: "192.0.2.66" } } };

/** FLOOD requests of `path` from one address, 16 at a time, interleaved with the victim's work: their statuses. */
async function flood(t: TestRelay, path: string): Promise<Record<number, number>> {
  const statuses: Record<number, number> = {};
  let sent = 0;
  await Promise.all(
    Array.from({ length: 16 }, async () => {
      while (sent < FLOOD) {
        sent++;
        const res = await t.relay.app.request(`http://relay.test${path}`, {}, FLOODER);
        await res.arrayBuffer();
        statuses[res.status] = (statuses[res.status] ?? 0) + 1;
      }
    }),
  );
  return statuses;
}

/** The victim's task run to its webhook: how many webhooks arrived after the first dispatcher turn, and its reads' statuses. */
async function victim(t: TestRelay, up: Parameters<typeof succeededTask>[1], apiKey: string, url: string) {
  const reads: Record<number, number> = {};
  const read = async () => {
    const res = await t.request(apiKey, "/openapi/v1/tasks");
    await res.arrayBuffer();
    reads[res.status] = (reads[res.status] ?? 0) + 1;
  };
  await read();
  await succeededTask(t, up, apiKey, { callback_url: url });
  await read();
  await t.relay.dispatcher.runOnce();
  await read();
  return { reads };
}

describe("a flood on a public route beside a victim", () => {
  const routes: Array<[string, string]> = [
    ["JWKS", "/openapi/v1/webhooks/jwks/cli_unknown"],
    ["a file link", `/files/task_${"0".repeat(26)}.0.${"A".repeat(43)}`],
    ["a stream-token read", "/openapi/v1/tasks/task_unknown/events?token=st_nothing"],
    ["the OpenAPI document", "/openapi.json"],
  ];

  it.each(routes)(
    "%s: the victim's webhook goes in the first turn and its reads answer, flood or not",
    async (_name, path) => {
      const { t, up } = setup();
      const r = await receiver();
      const { apiKey } = t.client("victim");

      const quiet = await victim(t, up, apiKey, r.url("/quiet"));
      expect(r.requests.filter((q) => q.url === "/quiet")).toHaveLength(1);

      const flooding = flood(t, path);
      const loud = await victim(t, up, apiKey, r.url("/loud"));
      const statuses = await flooding;
      // Delivered in the first turn after completion, as without the flood.
      expect(r.requests.filter((q) => q.url === "/loud")).toHaveLength(1);
      expect(loud.reads).toEqual(quiet.reads);
      expect(loud.reads).toEqual({ 200: 3 });
      expect(statuses[429]).toBe(FLOOD - PUBLIC_REQUESTS_PER_WINDOW);
      expect(Object.values(statuses).reduce((a, b) => a + b, 0)).toBe(FLOOD);
    },
  );
});
