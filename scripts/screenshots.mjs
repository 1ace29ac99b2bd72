// `npm run screenshots`: PNGs of the dashboard's main pages into docs/img/, for the README.
// Runs the built relay in sandbox mode on loopback with a local webhook receiver, creates a few
// tasks, and photographs the pages with Debian's chromium-headless-shell (not part of npm test).
import { serve } from "@hono/node-server";
import { mkdirSync, mkdtempSync, rmSync, existsSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import puppeteer from "puppeteer-core";
import { systemClock } from "../dist/clock.js";
import { loadConfig } from "../dist/config.js";
import { openDatabase } from "../dist/db/sqlite/open.js";
import { silentLogger } from "../dist/logger.js";
import { Relay } from "../dist/relay.js";
import { createClient } from "../dist/services/clients.js";
import { startSimulator } from "../dist/simulator/server.js";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const out = join(root, "docs", "img");
const BROWSER = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium-headless-shell";
if (!existsSync(BROWSER)) {
  process.stderr.write(
    `no browser at ${BROWSER}: apt-get install -y --no-install-recommends chromium-headless-shell\n`,
  );
  process.exit(1);
}

const dir = mkdtempSync(join(tmpdir(), "genrelay-shots-"));
const config = loadConfig({
  DATABASE_PATH: join(dir, "relay.db"),
  WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
  LOG_LEVEL: "silent",
});
const simulator = await startSimulator({
  accounts: [{ apiKey: "sandbox" }],
  timings: { imageQueuedMs: 300, imageProcessingMs: 800, videoQueuedMs: 400, videoProcessingMs: 1_200 },
});
const database = openDatabase(config.databasePath);
const relay = new Relay({
  config,
  database,
  clock: systemClock,
  logger: silentLogger,
  upstream: { baseUrl: simulator.url, apiKey: "sandbox" },
});
await relay.start();
const server = serve({ fetch: relay.app.fetch, port: 0, hostname: "127.0.0.1" });
await new Promise((resolve) => server.once("listening", resolve));
const base = `http://127.0.0.1:${server.address().port}`;

const receiver = createServer((req, res) => {
  req.resume();
  req.on("end", () => res.writeHead(204).end());
});
await new Promise((resolve) => receiver.listen(0, "127.0.0.1", resolve));
const hook = `http://127.0.0.1:${receiver.address().port}/webhooks/genrelay`;

const { apiKey } = createClient(database.db, systemClock, { name: "Acme Studio", creditLimit: 2_000 });
const create = async (kind, body, n) => {
  const res = await fetch(`${base}/openapi/v1/${kind}/generations`, {
    method: "POST",
    headers: {
      Authorization: `Bearer ${apiKey}`,
      "Content-Type": "application/json",
      "Idempotency-Key": `shot-${kind}-${n}`,
    },
    body: JSON.stringify(body),
  });
  if (res.status !== 201) throw new Error(`create answered ${res.status}: ${await res.text()}`);
  return (await res.json()).data.id;
};
const prompts = [
  "a lighthouse at dawn, watercolor",
  "a red fox in snow",
  "city skyline at night, neon",
  "a bowl of ramen, studio light",
];
const ids = [];
for (const [i, prompt] of prompts.entries()) {
  ids.push(
    await create(
      "images",
      {
        model: "p-image",
        mode: "generate",
        prompt,
        count: 1,
        size: "1K",
        callback_url: hook,
        metadata: { order: `A-${100 + i}` },
      },
      i,
    ),
  );
}
ids.push(
  await create(
    "videos",
    {
      model: "v-video",
      video_mode: "t2v",
      prompt: "waves rolling under moonlight",
      duration: 5,
      resolution: "480p",
      callback_url: hook,
      metadata: { order: "V-7" },
    },
    9,
  ),
);

// Wait (bounded) until every task is delivered, by asking the API like any client would.
const deadline = Date.now() + 30_000;
for (const id of ids) {
  for (;;) {
    const task = await (
      await fetch(`${base}/openapi/v1/tasks/${id}`, { headers: { Authorization: `Bearer ${apiKey}` } })
    ).json();
    if (task.data.callback.delivery?.status === "succeeded") break;
    if (Date.now() > deadline) throw new Error(`task ${id} not delivered in time`);
    await new Promise((r) => setTimeout(r, 200));
  }
}
// One task still waiting at the top of the list, so the page shows more than one status.
await create(
  "images",
  { model: "p-image", mode: "generate", prompt: "a paper boat", count: 1, metadata: { order: "A-200" } },
  20,
);

mkdirSync(out, { recursive: true });
const browser = await puppeteer.launch({
  executablePath: BROWSER,
  headless: "shell",
  args: [
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
  ],
});
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 1200, height: 820 });
  const shot = async (name) => {
    await page.screenshot({ path: join(out, `${name}.png`), fullPage: true });
    process.stdout.write(`docs/img/${name}.png\n`);
  };
  await page.goto(`${base}/dashboard`);
  await shot("dashboard-sign-in");
  await page.type("#api_key", apiKey);
  await Promise.all([page.waitForNavigation(), page.click("form[action='/dashboard/sign-in'] button[type=submit]")]);
  await shot("dashboard-tasks");
  await page.goto(`${base}/dashboard/tasks/${ids[0]}`);
  await shot("dashboard-task");
  await page.goto(`${base}/dashboard/webhooks`);
  await page.type("#url", hook);
  await Promise.all([page.waitForNavigation(), page.click("form[action='/dashboard/webhooks/test'] button")]);
  await shot("dashboard-webhooks");
  await page.goto(`${base}/dashboard/usage`);
  await shot("dashboard-usage");
  await page.setViewport({ width: 390, height: 844 });
  await page.goto(`${base}/dashboard`);
  await shot("dashboard-tasks-phone");
} finally {
  await browser.close();
  server.close();
  receiver.close();
  await relay.stop(2_000);
  await simulator.close();
  database.close();
  rmSync(dir, { recursive: true, force: true });
}
