// In-process micro-benchmark of the relay's Dispatcher (forked, driven over IPC): the built
// Dispatcher, WebhookSender and WorkerLoop from dist/, wired as src/relay.ts wires them, draining
// events already written to the outbox. No HTTP server, no submitter or poller, silent logger:
// what delivery itself costs (claim, sign, POST, record the attempt).
import { distImport } from "./lib/dist.mjs";
import { serveIpc } from "./lib/proc.mjs";

const { systemClock } = await distImport("clock.js");
const { loadConfig } = await distImport("config.js");
const { openDatabase } = await distImport("db/sqlite/open.js");
const { sqliteStore } = await distImport("open-store.js");
const { silentLogger } = await distImport("logger.js");
const { WebhookSender } = await distImport("webhooks/sender.js");
const { Dispatcher } = await distImport("workers/dispatcher.js");
const { WorkerLoop } = await distImport("workers/loop.js");
const { LeaseOwner } = await distImport("workers/owner.js");

serveIpc({
  async drain({ databasePath, total, timeoutMs }) {
    const config = loadConfig({ DATABASE_PATH: databasePath, WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true" });
    const database = openDatabase(databasePath);
    const sender = new WebhookSender({ allowPrivateNetworks: true });
    let ok = 0;
    let failed = 0;
    let first = null;
    let last = null;
    let finish;
    const finished = new Promise((r) => (finish = r));
    const dispatcher = new Dispatcher({
      store: sqliteStore(database),
      clock: systemClock,
      config,
      logger: silentLogger,
      sender,
      owner: new LeaseOwner(),
      // As src/relay.ts wires it (the per-host cap comes from WEBHOOK_MAX_IN_FLIGHT_PER_HOST).
      ...(config.webhookMaxInFlightPerHost !== undefined ? { maxPerHost: config.webhookMaxInFlightPerHost } : {}),
      onAttempt: (_event, result) => {
        const now = performance.now();
        first ??= now;
        last = now;
        if (result.ok) ok++;
        else failed++;
        if (ok + failed >= total) finish(true);
      },
    });
    const loop = new WorkerLoop({
      name: "dispatcher",
      clock: systemClock,
      logger: silentLogger,
      tick: () => dispatcher.tick(),
    });
    dispatcher.onSettled = () => loop.nudge();
    const started = performance.now();
    loop.start();
    const timer = setTimeout(() => finish(false), timeoutMs);
    const complete = await finished;
    clearTimeout(timer);
    await loop.stop();
    await dispatcher.drain();
    await sender.close();
    database.close();
    const seconds = ((last ?? performance.now()) - started) / 1000;
    return {
      complete,
      ok,
      failed,
      seconds,
      rate: ok / seconds,
      firstToLastRate: ok > 1 ? ((ok - 1) * 1000) / (last - first) : null,
    };
  },
});
