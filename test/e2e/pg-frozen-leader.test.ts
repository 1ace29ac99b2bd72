import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { describe, expect, it } from "vitest";
import { BUILT, createImage, processesPerTest, simulatorStats, succeededTasks, until } from "./process.js";

/**
 * A frozen leader on PostgreSQL (docs/contract.md, "A frozen instance loses its roles"; issue #30
 * repro 3): three built relays share one database and the simulator; the one leading the upstream
 * account is stopped with SIGSTOP while a creation it sent upstream is answered (the answer waits
 * in its socket). Another instance takes
 * the account over within the lease (LEADER_LEASE, a few seconds here; 20 s by default), submits
 * that task again under the same upstream key and finishes every task. The new leader ended the
 * stopped one's database sessions when it took over; resumed with SIGCONT, the old leader reads the
 * answer and tries to write it under its old lease (on an ended session, or a new one where its
 * claim token no longer holds): the task stays as the new leader left it.
 *
 * Each relay reaches the simulator through a loopback proxy of its own, so the test knows whose
 * request it is and can hold one answer. `FROZEN_LEADER_LEASE=default` runs it with the default
 * lease (to measure the takeover time; the test then waits longer).
 */
const run = processesPerTest();
/** Short, for a short test, yet a loaded 2-core machine's scheduling stalls (a second or two) do not cost a live leader its lease. */
const LEASE = process.env.FROZEN_LEADER_LEASE ?? "5s";
const LEASE_MS = LEASE === "default" ? 20_000 : Number(/^(\d+)s$/.exec(LEASE)?.[1] ?? "5") * 1000;
/** A non-leader looks at an account again this often (submitter.ts LEADER_RECHECK_MS), plus a loaded machine's slack. */
const RECHECK_MS = 2_000;
const SLACK_MS = 3_000;

interface Proxy {
  url: string;
  /** The next creation through this proxy is sent upstream; once answered, `beforeAnswer` runs, then the answer goes back. */
  holdNextCreate(beforeAnswer: (taskId: string) => Promise<void>): void;
  close(): Promise<void>;
}

/** A loopback proxy to `target` for one relay. */
async function proxyTo(target: string): Promise<Proxy> {
  let hold: ((taskId: string) => Promise<void>) | null = null;
  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      void (async () => {
        const headers = new Headers();
        for (const [k, v] of Object.entries(req.headers))
          if (typeof v === "string" && !["host", "connection", "content-length"].includes(k)) headers.set(k, v);
        const body = chunks.length > 0 ? Buffer.concat(chunks) : undefined;
        const answer = await fetch(`${target}${req.url}`, {
          method: req.method ?? "GET",
          headers,
          ...(body ? { body } : {}),
        });
        const text = Buffer.from(await answer.arrayBuffer());
        const key = req.headers["idempotency-key"];
        if (hold && req.method === "POST" && /\/generations$/.test(req.url ?? "") && typeof key === "string") {
          const before = hold;
          hold = null;
          await before(key.replace(/^genrelay-/, ""));
        }
        const out: Record<string, string> = {};
        answer.headers.forEach((v, k) => {
          if (!["content-length", "connection", "transfer-encoding", "content-encoding", "keep-alive"].includes(k))
            out[k] = v;
        });
        res.writeHead(answer.status, out).end(text);
      })().catch(() => res.destroy());
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    holdNextCreate: (fn) => (hold = fn),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

describe.skipIf(!BUILT)("a frozen leader on PostgreSQL", () => {
  it("the leader of the upstream account is stopped (SIGSTOP) mid-submission: another takes over within the lease and finishes every task; resumed, its late write changes nothing", async () => {
    const { simUrl, relayEnv, apiKey, secret } = await run.pgSetup("frozen");
    const proxies = [await proxyTo(simUrl), await proxyTo(simUrl), await proxyTo(simUrl)];
    for (const p of proxies) run.cleanups.push(() => p.close());
    const env = (i: number) => ({
      ...relayEnv(proxies[i]!.url),
      ...(LEASE === "default" ? {} : { LEADER_LEASE: LEASE }),
    });
    const relays = [await run.startRelay(env(0)), await run.startRelay(env(1)), await run.startRelay(env(2))];
    const receiver = await run.startReceiver();

    const ids = new Set<string>();
    const create = async (n: number, via = relays[n % 3]!) => {
      const body = { idempotencyKey: `frozen-e2e-${n}`, prompt: `frozen e2e ${n}`, callbackUrl: receiver.url };
      ids.add(await createImage(via.url, apiKey, body, AbortSignal.timeout(LEASE_MS + 15_000)));
    };
    for (let n = 0; n < 6; n++) await create(n);

    // One instance takes the account and says so. The next creation an instance sends upstream (the
    // leader's: only it submits) is answered while that instance is stopped; the creations that
    // bring it are made through the others.
    const leading = /"msg":"leading upstream account/;
    await Promise.any(relays.map((r) => r.child.waitForLine(leading, 20_000)));
    const lastLeading = (r: (typeof relays)[number]) =>
      r.child.lines
        .filter((l) => leading.test(l))
        .map((l) => /"time":"([^"]+)"/.exec(l)![1]!)
        .pop() ?? "";
    const likely = relays.reduce((a, b) => (lastLeading(b) > lastLeading(a) ? b : a));
    let stoppedAt = 0;
    let heldTask = "";
    /** Each instance's lines when the leader was stopped. */
    let linesAtStop: number[] = [];
    const stopped = new Promise<number>((resolve) => {
      proxies.forEach((p, i) => {
        p.holdNextCreate(async (taskId) => {
          if (stoppedAt > 0) return;
          heldTask = taskId;
          relays[i]!.child.proc.kill("SIGSTOP");
          stoppedAt = Date.now();
          linesAtStop = relays.map((r) => r.child.lines.length);
          resolve(i);
        });
      });
    });
    // (A creation may wait until the takeover: the stopped leader may hold the client's row lock in a transaction.)
    const via = relays.filter((r) => r !== likely);
    let slowest = 0;
    for (let n = 6; n < 12; n++) {
      const start = performance.now();
      await create(n, via[n % 2]);
      slowest = Math.max(slowest, performance.now() - start);
    }
    const leader = relays[await stopped]!;
    expect(leader).toBe(likely);
    const others = relays.filter((r) => r !== leader);
    expect(ids.has(heldTask)).toBe(true);

    // Another instance takes the account over once the stopped one's lease has lapsed.
    await until(
      () => others.some((r) => r.child.lines.slice(linesAtStop[relays.indexOf(r)]).some((l) => leading.test(l))),
      (fn) => {
        for (const r of others) r.child.proc.stdout!.on("data", () => setImmediate(fn));
      },
      LEASE_MS + RECHECK_MS + SLACK_MS + 5_000,
      () => "another instance leading",
    );
    const takeoverAt = Math.min(
      ...others.flatMap((r) =>
        r.child.lines
          .slice(linesAtStop[relays.indexOf(r)])
          .filter((l) => leading.test(l))
          .map((l) => Date.parse(/"time":"([^"]+)"/.exec(l)![1]!)),
      ),
    );
    // By the new leader's own log time (this process may have been busy when the line arrived).
    const takeoverMs = takeoverAt - stoppedAt;
    console.log(
      `frozen leader: another instance led the account ${(takeoverMs / 1000).toFixed(1)} s after SIGSTOP (LEADER_LEASE=${LEASE}); the slowest creation meanwhile took ${(slowest / 1000).toFixed(1)} s`,
    );
    expect(takeoverMs).toBeLessThan(LEASE_MS + RECHECK_MS + SLACK_MS);

    // Every task ends and is delivered, the held one included (submitted again under its key), while the old leader is still stopped.
    const succeeded = () => succeededTasks(receiver.hooks, secret);
    await until(
      () => [...ids].every((id) => succeeded().has(id)),
      receiver.onHook,
      60_000,
      () => `${succeeded().size}/${ids.size} tasks with webhooks`,
    );

    // Resumed, the old leader acts on the held answer (records it, or a retry when its deadline's
    // timer fires first) under its old lease, or finds its database session ended: nothing changes.
    const mark = leader.child.lines.length;
    leader.child.proc.kill("SIGCONT");
    await leader.child.waitForLine(
      new RegExp(`"task_id":"${heldTask}".*"msg":"submission"|"msg":"storage unavailable`),
      20_000,
    );
    // The relays go on with it around: a task created now is delivered too.
    await create(12, others[0]);
    await until(
      () => [...ids].every((id) => succeeded().has(id)),
      receiver.onHook,
      60_000,
      () => `${succeeded().size}/${ids.size} tasks with webhooks`,
    );
    expect(leader.child.lines.slice(mark).some((l) => leading.test(l))).toBe(false);
    for (const id of ids) {
      const task = (await (
        await fetch(`${others[0]!.url}/openapi/v1/tasks/${id}`, {
          headers: { Authorization: `Bearer ${apiKey}` },
        })
      ).json()) as {
        data: { status: string };
      };
      expect(task.data.status, id).toBe("succeeded");
    }

    const stats = await simulatorStats(simUrl);
    expect(stats.tasks_created).toBe(ids.size);
    expect(stats.creations_per_key_max).toBe(1);
    expect(stats.rate_limited).toBe(0);
  }, 180_000);
});
