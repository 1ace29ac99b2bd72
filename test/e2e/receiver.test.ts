import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { Webhook } from "standardwebhooks";
import { afterEach, describe, expect, it } from "vitest";
import { DIST, startNode, type Child } from "./process.js";

/** `npm run receiver` (dist/receiver.js) as a process: verified webhooks printed, forged ones refused. */
const built = existsSync(join(DIST, "receiver.js"));
const children: Child[] = [];
afterEach(async () => {
  await Promise.all(children.splice(0).map((c) => c.kill("SIGKILL")));
});

const secret = `whsec_${randomBytes(24).toString("base64")}`;

async function start(env: Record<string, string>): Promise<{ child: Child; url: string }> {
  const child = startNode("receiver.js", env);
  children.push(child);
  const url = (await child.waitForLine(/listening on (http:\/\/127\.0\.0\.1:\d+\/webhooks)/))[1]!;
  return { child, url };
}

/** Signed with the standardwebhooks library, independently of the relay's own signer. */
function signed(body: string, id: string, key = secret): Record<string, string> {
  const now = new Date();
  return {
    "content-type": "application/json",
    "webhook-id": id,
    "webhook-timestamp": String(Math.floor(now.getTime() / 1000)),
    "webhook-signature": new Webhook(key).sign(id, now, body),
  };
}

describe.skipIf(!built)("npm run receiver", () => {
  it("prints each verified webhook as one JSON line and answers 204; refuses a bad signature with 400", async () => {
    const { child, url } = await start({ WEBHOOK_SECRET: secret, RECEIVER_PORT: "0" });
    const event = {
      type: "task.succeeded",
      timestamp: "2026-01-01T12:00:00.000Z",
      data: { id: "task_1", status: "succeeded", output: { images: ["https://cdn.example/a.png"] } },
    };
    const body = JSON.stringify(event);

    const ok = await fetch(url, { method: "POST", headers: signed(body, "evt_good"), body });
    expect(ok.status).toBe(204);
    const printed = await child.waitForLine(/^\{.*"webhook_id":"evt_good".*\}$/);
    expect(JSON.parse(printed[0])).toEqual({ webhook_id: "evt_good", ...event });

    const forged = await fetch(url, {
      method: "POST",
      headers: signed(body, "evt_forged", `whsec_${randomBytes(24).toString("base64")}`),
      body,
    });
    expect(forged.status).toBe(400);
    await child.waitForLine(/^receiver: REJECTED webhook evt_forged: /);
    const unsigned = await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body });
    expect(unsigned.status).toBe(400);
    // Only the verified one reached stdout as a JSON line.
    expect(child.lines.filter((l) => l.startsWith("{"))).toHaveLength(1);
  });

  it("without WEBHOOK_SECRET says what to set and exits 2", async () => {
    const child = startNode("receiver.js", {});
    children.push(child);
    const exited = new Promise<number | null>((resolve) => child.proc.once("exit", (code) => resolve(code)));
    await child.waitForLine(/^receiver: set WEBHOOK_SECRET to the client's webhook secret/);
    expect(await exited).toBe(2);
  });

  it.each(["hello", "whsec_hello", "whsec_not base64!", `whsec_${Buffer.from("short").toString("base64")}`])(
    "WEBHOOK_SECRET=%s is refused with a line naming what a secret looks like, exit 2",
    async (secret) => {
      const child = startNode("receiver.js", { WEBHOOK_SECRET: secret });
      children.push(child);
      const exited = new Promise<number | null>((resolve) => child.proc.once("exit", (code) => resolve(code)));
      await child.waitForLine(
        /^receiver: WEBHOOK_SECRET is not a webhook secret \(expected whsec_ followed by base64 of at least 16 bytes/,
      );
      expect(await exited).toBe(2);
    },
  );
});
