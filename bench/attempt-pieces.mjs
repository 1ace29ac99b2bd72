// What an attempt costs around its send, piece by piece (issues #41 and #43, eighth round): the
// signature of a message (a sealed HMAC secret, as a relay with RELAY_ENCRYPTION_KEY stores it, and
// an Ed25519 key), its HTTP headers, the attempt's log line, and a send's deadline (made and ended
// around work that settles at once), and a queue attempt's whole send path (`send-amqp`, `send-nats`:
// the message signed, traced, through the destination port, the queue kind and the broker client's
// connection and deadline, with the library's publish replaced by one that confirms at once, so
// what is left is the relay's own cost around the library). Each piece of each build runs in a process of its own, 50,000
// calls after 5,000 of warm-up; CPU is the process's user + system time over the calls. The builds'
// order rotates per round; medians of the rounds, and the load before and after.
//   node bench/attempt-pieces.mjs OLD_DIST NEW_DIST [rounds=5]
import { execFileSync } from "node:child_process";
import { resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { loadAverage } from "./lib/load-gate.mjs";
import { median } from "./lib/stats.mjs";

const CALLS = 50_000;
const WARM = 5_000;
const PIECES = ["sign-hmac", "sign-ed25519", "http-headers", "log-line", "deadline", "send-amqp", "send-nats"];

async function child(dist, piece) {
  const load = (m) => import(pathToFileURL(resolve(dist, m)).href);
  const { sealSecret } = await load("crypto.js");
  const { generateWebhookSecret, generateSigningKey } = await load("webhooks/sign.js");
  const outgoing = await load("webhooks/outgoing.js");
  const key = Buffer.alloc(32, 7);
  const client = (ed25519) => ({
    id: "cli_01jf3y8k2m9q7r5t3v1w0x6z4a",
    signatureScheme: ed25519 ? "ed25519" : "hmac",
    webhookSecret: sealSecret(generateWebhookSecret(), key),
    signingKey: ed25519 ? sealSecret(generateSigningKey(), key) : null,
    previousWebhookSecret: null,
    previousSecretExpiresAt: null,
    previousSigningKey: null,
    previousSigningKeyExpiresAt: null,
    previousSchemeExpiresAt: null,
    callbackHeaders: null,
  });
  const body = JSON.stringify({ type: "task.succeeded", data: { id: "task_1", outputs: ["x".repeat(200)] } });
  const message = (c, i) => ({
    client: c,
    id: `evt_${i}`,
    at: 1_790_000_000_000 + i,
    body,
    encryptionKey: key,
    callbackHeaders: null,
  });
  let call;
  if (piece === "sign-hmac" || piece === "sign-ed25519") {
    const c = client(piece === "sign-ed25519");
    call = (i) => outgoing.signOutgoing(message(c, i));
  } else if (piece === "http-headers") {
    const parts = outgoing.signOutgoing(message(client(false), 1));
    call = () =>
      outgoing.httpHeaders({ ...parts, traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" });
  } else if (piece === "log-line") {
    const { pino } = await import("pino");
    const logger = await load("logger.js");
    const log = logger.createLogger("info", pino.destination({ dest: "/dev/null", sync: false }));
    // The line as each build writes it: attemptLines where there is one, else pino without redaction.
    const lean = logger.attemptLines ? null : logger.fixedFieldsLogger(log);
    const write = logger.attemptLines
      ? logger.attemptLines(log)
      : (level, line) => lean[level](line, "webhook attempt");
    call = (i) =>
      write("info", {
        event_id: `evt_${i}`,
        destination: "callback",
        task_id: "task_01jf3y8k2m9q7r5t3v1w0x6z4a",
        client_id: "cli_01jf3y8k2m9q7r5t3v1w0x6z4a",
        type: "task.succeeded",
        attempt: 1,
        status_code: 200,
        latency_ms: 3,
        outcome: "delivered",
        error: undefined,
      });
  } else if (piece === "send-amqp" || piece === "send-nats") {
    call = await sendPath(load, piece.slice(5), client(false), key, body);
  } else {
    // The deadline of one send as each build makes it: one timer for all (DeadlineTimer) where
    // there is one, else a timer and an AbortController per send (startDeadline and raceSignal).
    const deadline = await load("net/deadline.js");
    const timer = deadline.DeadlineTimer ? new deadline.DeadlineTimer() : null;
    const late = () => new Error("late");
    call = timer
      ? () => {
          const cancel = new deadline.Cancel();
          return timer.race(5_000, late, cancel, () => Promise.resolve(1));
        }
      : () => {
          const d = deadline.startDeadline(5_000, { what: "x" });
          return deadline.raceSignal(Promise.resolve(1), d.signal).finally(() => d.dispose());
        };
  }
  // In turns of 32 calls awaited together, as attempts settle: promises and timers are let go.
  const run = async (from, n) => {
    for (let i = from; i < from + n; i += 32) {
      const turn = [];
      for (let k = 0; k < 32; k++) turn.push(call(i + k));
      await Promise.all(turn);
    }
  };
  await run(0, WARM);
  const before = process.cpuUsage();
  await run(WARM, CALLS);
  const used = process.cpuUsage(before);
  process.stdout.write(JSON.stringify({ us: (used.user + used.system) / CALLS }));
}

/**
 * One queue attempt's send from its claimed event to the broker client's publish, as attempt.ts
 * makes it (deliveryMessage, tracedSend, Destinations, queueKinds, the kind's client), the library's
 * publish stubbed: an AMQP confirm channel whose publish confirms in a microtask, a JetStream client
 * whose publish answers a PubAck at once (the NATS headers object is still filled: the relay's part).
 */
async function sendPath(load, kind, client, key, body) {
  const { Destinations } = await load("destinations/index.js");
  const { queueKinds } = await load("destinations/queues.js");
  const { deliveryMessage } = await load("workers/delivery/message.js");
  const { tracedSend } = await load("workers/delivery/traced.js");
  const target =
    kind === "amqp"
      ? { kind, amqp: { url: "amqp://127.0.0.1:5672/", exchange: "bench", routingKey: null } }
      : { kind, nats: { url: "nats://127.0.0.1:4222", subject: null } };
  const fakeConn =
    kind === "amqp"
      ? {
          model: { close: async () => {} },
          channel: { publish: (_e, _r, _b, _o, cb) => queueMicrotask(() => cb(null)) },
          returned: new Map(),
          closedBecause: null,
        }
      : { nc: { close: async () => {} }, js: { publish: async () => ({ stream: "S", seq: 1, duplicate: false }) } };
  const { AmqpDestination } = await load("destinations/amqp.js");
  const { NatsDestination } = await load("destinations/nats.js");
  for (const C of [AmqpDestination, NatsDestination]) C.prototype.open = async () => fakeConn;
  const queues = queueKinds({ allowPrivateNetworks: true, targets: async () => target });
  const destinations = new Destinations().register(kind, queues.kinds[kind]);
  const url = kind === "amqp" ? target.amqp.url : target.nats.url;
  const event = (i) => ({
    id: `evt_${i}`,
    webhookId: `evt_${i}`,
    clientId: client.id,
    taskId: "task_01jf3y8k2m9q7r5t3v1w0x6z4a",
    type: "task.succeeded",
    payload: body,
    callbackUrl: url,
    endpointId: "ep_01jf3y8k2m9q7r5t3v1w0x6z4a",
    callbackHeaders: null,
    traceparent: null,
    tracestate: null,
    attempts: 0,
    createdAt: 1_790_000_000_000,
  });
  return async (i) => {
    const e = event(i);
    const message = deliveryMessage(e, client, 1_790_000_000_000 + i, key);
    const { outcome } = await tracedSend(destinations, message, { timeoutMs: 5_000 }, { trace: null, resendCount: 0 });
    if (!outcome.ok) throw new Error(outcome.error);
  };
}

async function main() {
  const [oldDist, newDist, roundsArg] = process.argv.slice(2);
  if (!oldDist || !newDist) throw new Error("usage: node bench/attempt-pieces.mjs OLD_DIST NEW_DIST [rounds=5]");
  const rounds = Number(roundsArg ?? 5);
  const builds = [
    ["old", resolve(oldDist)],
    ["new", resolve(newDist)],
  ];
  const loadBefore = loadAverage();
  const results = Object.fromEntries(PIECES.map((p) => [p, { old: [], new: [] }]));
  for (let r = 0; r < rounds; r++) {
    const order = r % 2 === 0 ? builds : [...builds].reverse();
    for (const piece of PIECES)
      for (const [name, dist] of order) {
        const out = execFileSync(process.execPath, [fileURLToPath(import.meta.url), "--child", dist, piece], {
          encoding: "utf8",
        });
        results[piece][name].push(JSON.parse(out).us);
      }
  }
  console.log(
    `attempt pieces, CPU µs a call, medians of ${rounds} rounds (order rotated); load ${loadBefore.join(" ")} → ${loadAverage().join(" ")}`,
  );
  console.log("| piece | old | new | new ÷ old |");
  console.log("|---|---|---|---|");
  for (const piece of PIECES) {
    const o = median(results[piece].old);
    const n = median(results[piece].new);
    console.log(`| ${piece} | ${o.toFixed(2)} | ${n.toFixed(2)} | ${(n / o).toFixed(2)} |`);
  }
}

if (process.argv[2] === "--child") await child(process.argv[3], process.argv[4]);
else await main();
