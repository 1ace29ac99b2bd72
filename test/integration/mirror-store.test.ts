import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { newClient } from "../../src/services/clients.js";
import { setStorage } from "../../src/services/storage.js";
import type { Store } from "../../src/store/store.js";
import { Mirror } from "../../src/workers/mirror.js";
import { loadConfig } from "../../src/config.js";
import { FakeClock } from "../helpers/fake-clock.js";
import { storeDialects } from "../helpers/store-dialects.js";
import {
  mirroringLifecycle,
  mirrorOptions,
  startFileServer,
  startS3,
  succeedTask,
  type TestS3,
} from "../helpers/mirror.js";
import { startSilentServer } from "../helpers/hostile.js";

/** The mirror stage's store operations and its whole round, on both dialects. */
const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const dialects = storeDialects((fn) => cleanups.push(fn)).map(
  ([name, make]) => [name, async () => (await make()).store] as [string, () => Promise<Store>],
);

let s3: TestS3;
let files: Awaited<ReturnType<typeof startFileServer>>;
beforeAll(async () => {
  s3 = await startS3();
  files = await startFileServer({
    "/f.png": (_req, res) => {
      res.writeHead(200, { "Content-Type": "image/png" });
      res.end(Buffer.alloc(5000, 1));
    },
  });
});
afterAll(async () => {
  await files.close();
  await s3.close();
});

const config = loadConfig({
  WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
  RELAY_ENCRYPTION_KEY: Buffer.alloc(32, 3).toString("base64"),
});

describe.each(dialects)("mirror stage on %s", (_name, make) => {
  /** A store of this dialect, a fake clock, the mirroring lifecycle, and a client for each name. */
  async function stage(...names: string[]) {
    const store = await make();
    const clock = new FakeClock();
    const lifecycle = mirroringLifecycle(store, clock);
    const clients = await Promise.all(names.map((name) => store.clients.insert(newClient(clock.now(), { name }).row)));
    return { store, clock, lifecycle, clients };
  }

  it("claimAcrossClients: every client's oldest before any client's second, the least busy client first, each task to one claimer", async () => {
    const { store, clock, lifecycle, clients } = await stage("a", "b", "c");
    const [a, b, c] = clients;
    const tasksOf: Record<string, string[]> = { [a!.id]: [], [b!.id]: [], [c!.id]: [] };
    // A floods first; B and C come later.
    for (let i = 0; i < 5; i++)
      tasksOf[a!.id]!.push(
        (await succeedTask(store, lifecycle, a!.id, { u: files.url("/f.png") }, clock.advance(10))).id,
      );
    tasksOf[b!.id]!.push(
      (await succeedTask(store, lifecycle, b!.id, { u: files.url("/f.png") }, clock.advance(10))).id,
    );
    for (let i = 0; i < 2; i++)
      tasksOf[c!.id]!.push(
        (await succeedTask(store, lifecycle, c!.id, { u: files.url("/f.png") }, clock.advance(10))).id,
      );
    const now = clock.advance(10);
    const first = await store.tasks.claimAcrossClients("mirroring", {
      now,
      leaseMs: 60_000,
      token: "m:1",
      limit: 4,
      rank: () => 0,
    });
    expect(first.map((t) => t.id)).toEqual([
      tasksOf[a!.id]![0],
      tasksOf[b!.id]![0],
      tasksOf[c!.id]![0],
      tasksOf[a!.id]![1],
    ]);
    // C already has copies running here: it goes last.
    const second = await store.tasks.claimAcrossClients("mirroring", {
      now,
      leaseMs: 60_000,
      token: "m:2",
      limit: 3,
      rank: (id) => (id === c!.id ? 5 : 0),
    });
    expect(second.map((t) => t.id)).toEqual([tasksOf[a!.id]![2], tasksOf[c!.id]![1], tasksOf[a!.id]![3]]);
    const rest = await Promise.all(
      [1, 2].map((n) =>
        store.tasks.claimAcrossClients("mirroring", {
          now,
          leaseMs: 60_000,
          token: `m:x${n}`,
          limit: 10,
          rank: () => 0,
        }),
      ),
    );
    expect(rest.flat().map((t) => t.id)).toEqual([tasksOf[a!.id]![4]]);
    expect(await store.tasks.nextDueAt("mirroring", now)).toBe(now + 60_001);
  });

  it("claimAcrossClients with clientRoom: a client with no room is left out, the others take no more than theirs (the copy pool's shares)", async () => {
    const { store, clock, lifecycle, clients } = await stage("a", "b", "c");
    const [a, b, c] = clients;
    const tasksOf = new Map<string, string[]>([
      [a!.id, []],
      [b!.id, []],
      [c!.id, []],
    ]);
    for (const client of [a!, b!, c!])
      for (let i = 0; i < 4; i++)
        tasksOf
          .get(client.id)!
          .push((await succeedTask(store, lifecycle, client.id, { u: files.url("/f.png") }, clock.advance(10))).id);
    const now = clock.advance(10);
    const rooms = new Map([
      [a!.id, 0],
      [b!.id, 1],
      [c!.id, 3],
    ]);
    const claimed = await store.tasks.claimAcrossClients("mirroring", {
      now,
      leaseMs: 60_000,
      token: "m:room",
      limit: 10,
      rank: () => 0,
      clientRoom: (clientId, picked) => rooms.get(clientId)! - (picked.get(clientId) ?? 0),
    });
    const [bTasks, cTasks] = [tasksOf.get(b!.id)!, tasksOf.get(c!.id)!];
    expect(claimed.map((t) => t.id)).toEqual([bTasks[0], cTasks[0], cTasks[1], cTasks[2]]);
  });

  it("the copy pool: a client whose bucket never answers holds its share (3 of 4); another client's task takes the reserve at the next tick; no spinning meanwhile", async () => {
    const { store, clock, lifecycle, clients } = await stage("hostile", "victim");
    const [hostile, victim] = clients;
    const silent = await startSilentServer();
    cleanups.push(() => silent.close());
    await setStorage({ store, config }, hostile!.id, s3.storageBody({ endpoint: silent.url }));
    await setStorage({ store, config }, victim!.id, s3.storageBody());
    for (let i = 0; i < 5; i++)
      await succeedTask(store, lifecycle, hostile!.id, { u: files.url("/f.png") }, clock.now());
    const mirror = new Mirror(mirrorOptions({ store, clock, lifecycle, encryptionKey: config.encryptionKey }));
    cleanups.push(() => mirror.close());

    expect(await mirror.tick()).toMatchObject({ didWork: true });
    expect(mirror.slots.inFlightOf(hostile!.id)).toBe(3);
    // Its two other tasks are due, but it is at its share: the loop waits for a settle, a nudge or a second.
    expect(await mirror.tick()).toEqual({ didWork: false, nextDueAt: clock.now() + 1_000 });
    const task = await succeedTask(store, lifecycle, victim!.id, { u: files.url("/f.png") }, clock.now());
    expect(await mirror.tick()).toMatchObject({ didWork: true });
    // Before #30: the hostile client's copies held all 4 slots and this task waited for them.
    expect(mirror.slots.inFlightOf(victim!.id)).toBe(1);
    await expect.poll(async () => (await store.tasks.find(task.id))?.phase, { timeout: 5_000 }).toBe("done");
    expect(mirror.slots.inFlightOf(hostile!.id)).toBe(3);
  });

  it("a succeeded task is held in mirroring, copied, then ends with task.succeeded carrying its files", async () => {
    const store = await make();
    const clock = new FakeClock();
    const lifecycle = mirroringLifecycle(store, clock);
    const client = await store.clients.insert(newClient(clock.now(), { name: "m" }).row);
    await setStorage({ store, config }, client.id, s3.storageBody());
    const task = await succeedTask(
      store,
      lifecycle,
      client.id,
      { images: [{ url: files.url("/f.png") }] },
      clock.now(),
    );
    expect(task).toMatchObject({ phase: "mirroring", status: "processing", pointsReserved: 0 });
    expect(await store.events.ofTask(task.id)).toEqual([]);
    const mirror = new Mirror(mirrorOptions({ store, clock, lifecycle, encryptionKey: config.encryptionKey }));
    cleanups.push(() => mirror.close());
    expect(await mirror.runOnce()).toBe(1);
    const done = await store.tasks.find(task.id);
    expect(done).toMatchObject({ phase: "done", status: "succeeded", claimToken: null });
    const events = await store.events.ofTask(task.id);
    expect(events.map((e) => e.type)).toEqual(["task.succeeded"]);
    const data = JSON.parse(events[0]!.payload).data;
    expect(data.files).toEqual([
      expect.objectContaining({ key: `gen/${task.id}/0.png`, bytes: 5000, content_type: "image/png" }),
    ]);
    expect((await s3.read(`gen/${task.id}/0.png`)).bytes).toBe(5000);
    expect(await mirror.runOnce()).toBe(0);
  });
});
