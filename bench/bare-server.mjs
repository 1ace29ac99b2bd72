// The intake baseline: a bare hono endpoint on @hono/node-server that parses the JSON body and
// answers 201 — what an HTTP endpoint costs on this machine before any durable work.
import { serve } from "@hono/node-server";
import { Hono } from "hono";

let n = 0;
const app = new Hono();
app.post("/openapi/v1/images/generations", async (c) => {
  const body = await c.req.json();
  n += 1;
  return c.json({ data: { id: `task_${n}`, status: "queued", model: body.model } }, 201);
});

serve({ fetch: app.fetch, port: Number(process.env.PORT ?? 0), hostname: "127.0.0.1" }, (info) => {
  process.stdout.write(`bare listening on http://127.0.0.1:${info.port}\n`);
});
process.on("SIGTERM", () => process.exit(0));
