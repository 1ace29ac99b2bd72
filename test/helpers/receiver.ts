import http from "node:http";
import type { AddressInfo } from "node:net";
import { Webhook } from "standardwebhooks";
import { vi } from "vitest";
import { webhookBodyProblems } from "./webhook-schema.js";

export interface Received {
  method: string;
  url: string;
  headers: Record<string, string>;
  body: string;
  /** The body parsed as JSON. */
  json: { type: string; timestamp: string; data: Record<string, any> };
}

/** How the receiver answers one request; not calling res.end() leaves the request hanging. */
export type Answer = (req: Received, res: http.ServerResponse) => void;

export const ok: Answer = (_req, res) => res.end("ok");
export const status =
  (code: number, headers: Record<string, string> = {}): Answer =>
  (_req, res) => {
    res.writeHead(code, headers);
    res.end(`status ${code}`);
  };
/** Never answers: the relay's attempt must time out. */
export const hang: Answer = () => {};

export interface Receiver {
  url(path?: string): string;
  requests: Received[];
  /** Answers for the next requests, in order; when empty, `fallback` answers. */
  answers: Answer[];
  fallback: Answer;
  /** Resolves with the next request received. */
  next(): Promise<Received>;
  /** Bodies that did not validate against their OpenAPI `webhooks` schema; close() fails when any did. */
  invalid: string[];
  close(): Promise<void>;
}

/** A real loopback HTTP server that records every request (webhook delivery does not go through msw). */
export async function startReceiver(fallback: Answer = ok): Promise<Receiver> {
  const waiters: Array<(r: Received) => void> = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const body = Buffer.concat(chunks).toString("utf8");
      let json: Received["json"];
      try {
        json = JSON.parse(body) as Received["json"];
      } catch {
        json = { type: "", timestamp: "", data: {} };
      }
      const received: Received = {
        method: req.method ?? "",
        url: req.url ?? "",
        headers: req.headers as Record<string, string>,
        body,
        json,
      };
      receiver.requests.push(received);
      // Every body the relay sends in the suite is checked against /openapi.json's webhooks (ajv).
      if (req.method === "POST") receiver.invalid.push(...webhookBodyProblems(body));
      waiters.shift()?.(received);
      (receiver.answers.shift() ?? receiver.fallback)(received, res);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;
  const receiver: Receiver = {
    url: (path = "/hook") => `http://127.0.0.1:${port}${path}`,
    requests: [],
    answers: [],
    fallback,
    next: () => new Promise((resolve) => waiters.push(resolve)),
    invalid: [],
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      if (receiver.invalid.length > 0)
        throw new Error(`bodies not matching their OpenAPI webhooks schema:\n${receiver.invalid.join("\n")}`);
    },
  };
  return receiver;
}

/**
 * Verifies a delivery with the standardwebhooks package (independent of our signer). The package
 * checks webhook-timestamp against Date.now() with a 5-minute tolerance, so "now" is the fake
 * clock's time at which the relay signed.
 */
export function verifyAt(secret: string, req: Received, nowMs: number): unknown {
  const spy = vi.spyOn(Date, "now").mockReturnValue(nowMs);
  try {
    return new Webhook(secret).verify(req.body, req.headers);
  } finally {
    spy.mockRestore();
  }
}
