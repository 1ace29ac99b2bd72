// The victim client of bench/big-outputs.mjs: creations from 4 connections, back to back or paced,
// each one's latency. Run in the bench's own process, or (BENCH_BIG_VICTIM=process) in a process of
// its own, forked here, so that the bench's fake upstream sending 7 MB answers and its webhook
// receiver do not stall the victim's clock: the victim then times only the relay.
import { fork } from "node:child_process";
import { fileURLToPath } from "node:url";

/** A creation's body; `kind` lands in its metadata (the receiver counts the big ones). */
export const body = (callback, kind, prompt) =>
  JSON.stringify({
    model: "p-image",
    mode: "generate",
    prompt,
    count: 1,
    callback_url: callback,
    metadata: { kind },
  });

/**
 * Creations from 4 connections until `until()` says stop (and at least `minCount`), back to back, or
 * `rate` a second when rate > 0 (an open loop: a creation starts at its time whatever the others
 * wait for, at most 4 in flight); each one's latency in ms, from its scheduled start when paced (a
 * creation that could not start on time because all 4 were busy counts its wait too). Failures
 * (a creation without its 201) are counted in `samples.failures`, not hidden.
 */
export async function victimLoad({ url, apiKey, callback, until, minCount, rate = 0 }) {
  const samples = [];
  samples.failures = [];
  const failures = samples.failures;
  let n = 0;
  const paceStart = performance.now();
  let slot = 0;
  await Promise.all(
    Array.from({ length: 4 }, async () => {
      while (!until() || samples.length < minCount) {
        let t0 = performance.now();
        if (rate > 0) {
          const at = paceStart + (slot++ * 1000) / rate;
          if (at > t0) await new Promise((r) => setTimeout(r, at - t0));
          t0 = at;
        }
        try {
          const res = await fetch(`${url}/openapi/v1/images/generations`, {
            method: "POST",
            headers: {
              authorization: `Bearer ${apiKey}`,
              "content-type": "application/json",
              "idempotency-key": `victim-${process.pid}-${Date.now()}-${n++}`,
            },
            body: body(callback, "small", "a lighthouse at dawn"),
          });
          await res.arrayBuffer();
          if (res.status !== 201) throw new Error(`HTTP ${res.status}`);
          samples.push(performance.now() - t0);
        } catch (err) {
          failures.push(String(err.cause?.code ?? err.message));
        }
      }
    }),
  );
  return samples;
}

/**
 * victimLoad in a child process: `until` is asked here every 20 ms and a stop sent when it says
 * so; the child answers with its samples and failures, then exits.
 */
export function victimInProcess({ until, ...options }) {
  const child = fork(fileURLToPath(import.meta.url), ["--victim-child"], { stdio: "inherit" });
  return new Promise((resolve, reject) => {
    const poll = setInterval(() => {
      if (until()) child.send({ op: "stop" });
    }, 20);
    child.once("message", (m) => {
      clearInterval(poll);
      const samples = m.samples;
      samples.failures = m.failures;
      resolve(samples);
    });
    child.once("exit", (code) => {
      clearInterval(poll);
      if (code !== 0) reject(new Error(`victim process exited ${code}`));
    });
    child.send({ op: "run", options });
  });
}

if (process.argv.includes("--victim-child") && process.send) {
  let stop = false;
  process.on("message", async (m) => {
    if (m.op === "stop") stop = true;
    if (m.op !== "run") return;
    const samples = await victimLoad({ ...m.options, until: () => stop });
    process.send({ samples: [...samples], failures: samples.failures }, () => process.exit(0));
  });
}
