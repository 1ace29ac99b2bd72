import { describe, expect, it } from "vitest";
import { typeErrors } from "../helpers/openapi-types.js";
import { upstreamSuite } from "../helpers/upstream-suite.js";

/**
 * Issue #23, "Typed": a receiver written against types that openapi-typescript generates from the
 * served /openapi.json type-checks, reading each event's fields with their real types. With an
 * empty `webhooks` object (what the relay served before) the same receiver does not compile.
 */
const suite = upstreamSuite();

const RECEIVER = `import type { webhooks } from "./schema";

type Body<T extends keyof webhooks> = webhooks[T]["post"]["requestBody"]["content"]["application/json"];
export type GenrelayEvent = { [T in keyof webhooks]: Body<T> }[keyof webhooks];

const seen = new Set<string>();

/** A receiver's handler: dedupe on the body's id, then read each event type's own fields. */
export function receive(raw: string): string {
  const event = JSON.parse(raw) as GenrelayEvent;
  const id: string = event.id;
  if (seen.has(id)) return "duplicate";
  seen.add(id);
  const at: string = event.timestamp;
  switch (event.type) {
    case "task.succeeded": {
      const taskId: string = event.data.id;
      const kind: "image" | "video" = event.data.type;
      const output: { [key: string]: unknown } | null = event.data.output;
      const charged: number | null = event.data.usage.points_charged;
      const refunded: number | null = event.data.usage.points_refunded;
      const metadata: { [key: string]: string } | null = event.data.metadata;
      const copy: string | undefined = event.data.files?.[0]?.url;
      const sample: true | undefined = event.data.sample;
      const sequence: number = event.data.sequence;
      return [at, taskId, kind, JSON.stringify(output), charged, refunded, metadata, copy, sample, sequence].join(" ");
    }
    case "task.failed": {
      const code: string | undefined = event.data.error?.code;
      const charged: number | null = event.data.usage.points_charged;
      return \`\${event.data.id} failed: \${code} (\${charged})\`;
    }
    case "task.processing":
    case "task.canceled":
      return \`\${event.data.id} \${event.data.status}\`;
    case "ping":
      return "ping";
    case "endpoint.failing": {
      const host: string = event.data.host;
      const pending: number = event.data.pending_events;
      return \`\${host} failing since \${event.data.failing_since} (\${pending} waiting)\`;
    }
    case "endpoint.recovered":
      return \`\${event.data.host} recovered at \${event.data.recovered_at}\`;
    case "delivery.exhausted": {
      const eventId: string = event.data.event_id;
      const attempts: number = event.data.attempts;
      return \`\${eventId} of \${event.data.task_id} gave up after \${attempts}\`;
    }
    default: {
      const none: never = event;
      return none;
    }
  }
}

// The types are real, not any: each of these must be an error.
declare const succeeded: Body<"task.succeeded">;
// @ts-expect-error output is an object or null, never a string
export const wrongOutput: string = succeeded.data.output;
// @ts-expect-error points_charged may be null
export const wrongCharge: number = succeeded.data.usage.points_charged;
// @ts-expect-error a task.succeeded event has no host
export const wrongField = succeeded.data.host;
`;

describe("a receiver built from openapi-typescript's types of /openapi.json", () => {
  it("type-checks, reading data.id, data.output, data.usage.points_charged and each notice's fields; with empty webhooks it does not", async () => {
    const { t } = suite.setup();
    const doc = (await (await t.request(null, "/openapi.json")).json()) as Record<string, unknown>;
    const receiver = { name: "receiver.ts", source: RECEIVER };
    expect(await typeErrors(doc, receiver)).toEqual([]);
    const errors = await typeErrors({ ...doc, webhooks: {} }, receiver);
    expect(errors).toContain("receiver.ts:11 Property 'id' does not exist on type 'never'.");
  }, 60_000);
});
