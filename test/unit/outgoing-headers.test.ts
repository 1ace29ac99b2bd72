import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { sealHeaders } from "../../src/webhooks/callback-headers.js";
import { outgoingHeaders } from "../../src/webhooks/outgoing.js";
import type { ClientRow } from "../../src/store/rows.js";
import { signingClient } from "../helpers/signing-client.js";

const KEY = randomBytes(32);

const client = (defaults: Record<string, string> | null): ClientRow => signingClient(defaults, KEY).row;

/** The headers every delivery carries, sorted: the signed ones and the relay's own. */
const SIGNED = ["content-type", "user-agent", "webhook-id", "webhook-signature", "webhook-timestamp"];

describe("outgoingHeaders: callback headers", () => {
  it("sends the client's defaults under the task's own (same names overridden, case-insensitively)", () => {
    const h = outgoingHeaders({
      client: client({ "X-Token": "client", "X-Team": "a" }),
      id: "evt_1",
      at: 1_700_000_000_000,
      body: "{}",
      encryptionKey: KEY,
      callbackHeaders: sealHeaders({ "x-token": "task" }, KEY),
    });
    expect(h["x-token"]).toBe("task");
    expect(h["x-team"]).toBe("a");
    expect(h["webhook-id"]).toBe("evt_1");
  });

  it("never lets a stored header replace the relay's own (rows written before the name checks)", () => {
    const sneaky = JSON.stringify({
      "webhook-signature": "v1,forged",
      "content-type": "text/plain",
      "user-agent": "x",
      "x-ok": "1",
    });
    const h = outgoingHeaders({
      client: client(null),
      id: "evt_2",
      at: 1_700_000_000_000,
      body: "{}",
      encryptionKey: KEY,
      callbackHeaders: sneaky,
    });
    expect(h["webhook-signature"]).toMatch(/^v1,(?!forged)/);
    expect(h["content-type"]).toBe("application/json");
    expect(h["user-agent"]).toMatch(/^genrelay/);
    expect(h["x-ok"]).toBe("1");
  });

  it("drops hop-by-hop and unsendable names stored before intake refused them (Expect made every attempt fail)", () => {
    const stored = JSON.stringify({
      expect: "100-continue",
      "keep-alive": "timeout=5",
      "proxy-authorization": "Basic x",
      te: "trailers",
      trailer: "x",
      upgrade: "h2c",
      host: "evil.example",
      "content-length": "1",
      "x-ok": "1",
    });
    const h = outgoingHeaders({
      client: client(null),
      id: "evt_4",
      at: 1_700_000_000_000,
      body: "{}",
      encryptionKey: KEY,
      callbackHeaders: stored,
    });
    expect(Object.keys(h).sort()).toEqual([...SIGNED, "x-ok"]);
  });

  it("without callback headers: exactly the signed headers", () => {
    const h = outgoingHeaders({
      client: client(null),
      id: "evt_3",
      at: 1_700_000_000_000,
      body: "{}",
      encryptionKey: KEY,
    });
    expect(Object.keys(h).sort()).toEqual(SIGNED);
  });
});
