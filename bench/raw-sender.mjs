// The delivery baseline (forked, driven over IPC): plain undici POSTs of a webhook body through a
// keep-alive Agent, `concurrency` requests in flight, no signing, no database.
import { Agent } from "undici";
import { serveIpc } from "./lib/proc.mjs";

serveIpc({
  async send({ url, body, total, concurrency, connections }) {
    const target = new URL(url);
    const agent = new Agent({ connections: connections ?? null, keepAliveTimeout: 60_000 });
    let next = 0;
    let ok = 0;
    let failed = 0;
    const started = performance.now();
    const worker = async () => {
      while (next < total) {
        next++;
        try {
          const res = await agent.request({
            origin: target.origin,
            path: target.pathname,
            method: "POST",
            headers: { "content-type": "application/json" },
            body,
          });
          await res.body.dump();
          if (res.statusCode >= 200 && res.statusCode < 300) ok++;
          else failed++;
        } catch {
          failed++;
        }
      }
    };
    await Promise.all(Array.from({ length: concurrency }, worker));
    const seconds = (performance.now() - started) / 1000;
    await agent.close();
    return { ok, failed, seconds, rate: ok / seconds };
  },
});
