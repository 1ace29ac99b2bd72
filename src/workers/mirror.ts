import type { Clock } from "../clock.js";
import type { Lifecycle } from "../core/lifecycle.js";
import { outputTextOf } from "../core/stored-output.js";
import type { Logger } from "../logger.js";
import { Bucket, type BucketDeadlines } from "../mirror/bucket.js";
import { copyFile, CopyError, type FileRecord } from "../mirror/copy.js";
import { outputUrls } from "../mirror/output-urls.js";
import { SourceFetcher, validateSourceUrl, type SourceOptions } from "../mirror/source.js";
import { fileLink } from "../mirror/links.js";
import { ensureLinkKey, openLinkKey, openStorage } from "../mirror/stored-bucket.js";
import type { Store } from "../store/store.js";
import type { TaskRow } from "../store/rows.js";
import type { Resolver } from "../net/address-guard.js";
import type { TickResult } from "./loop.js";
import type { LeaseOwner } from "./owner.js";
import { PooledWorker } from "./pooled-loop.js";

/** What the mirror reports, for /metrics. */
export interface MirrorMetrics {
  fileCopied(bytes: number, seconds: number): void;
  fileFailed(): void;
  attemptFailed(kind: string): void;
}

/** The mirror's port of the Store: the tasks it copies and their clients' buckets. */
export type MirrorStore = Pick<Store, "tasks" | "clients" | "outputs">;

export interface MirrorOptions {
  store: MirrorStore;
  clock: Clock;
  logger: Logger;
  owner: LeaseOwner;
  lifecycle: Lifecycle;
  encryptionKey: Buffer | null;
  allowPrivateNetworks: boolean;
  /** MIRROR_MAX_BYTES. */
  maxBytes: number;
  /** PUBLIC_BASE_URL: when set, each copy gets a lasting `link` (mirror/links.ts). */
  publicBaseUrl?: string | null;
  metrics?: MirrorMetrics;
  resolve?: Resolver;
  /** Tasks copied at once, a FairPool shared by the clients (files of one task go one after another): bounds memory and sockets. */
  concurrency?: number;
  leaseMs?: number;
  /** Longest silence from an output URL (headers, or between two pieces of the body). */
  idleTimeoutMs?: number;
  /** Waits before the 2nd, 3rd… round of a task's failed copies; after the last, a failure is final. */
  retryScheduleMs?: number[];
  /** The downloads' and the bucket's deadlines (DOWNLOAD_DEADLINES, BUCKET_DEADLINES unless given). */
  deadlines?: { download?: Pick<SourceOptions, "totalTimeoutMs" | "minRate">; bucket?: Partial<BucketDeadlines> };
}

type Copied = { source_url: string; key: string; bytes: number; sha256: string; content_type: string };
type Failed = { source_url: string; error: string; final: boolean };
/** tasks.files_json while the copies are being made (the list of FileRecord once done). */
interface Progress {
  rounds: number;
  files: Array<Copied | Failed | null>;
}

export const MIRROR_RETRY_SCHEDULE_MS = [10_000, 60_000, 300_000];

/**
 * The mirror stage (docs/contract.md, "Outputs"): between "succeeded upstream" and "task.succeeded written". Claims
 * tasks in phase `mirroring` under a lease, round-robin across clients (the client with the fewest
 * copies running here first), copies every http(s) URL of their output into the client's bucket,
 * streaming, then finishes them with `files` in the same transaction that writes task.succeeded.
 *
 * The copy slots are a FairPool (docs/decisions/0008-fair-pool.md): a client whose bucket or output
 * host hangs holds at most its share of them, and another client's copy finds a slot at once (the
 * reserve), so one tenant's bucket never stops everyone's task.succeeded.
 *
 * Crash safety: progress (the files already copied) is saved after each file, under the lease; a
 * kill -9 mid-upload leaves the task leased, and whoever claims it next copies again what was not
 * finished (object keys are fixed, so a copy is simply written again). The event is written once,
 * by the one transition guarded by the lease. A copy that fails is tried again on the retry
 * schedule; after the last round it goes out as `files[i].error`, so no event waits for ever.
 */
export class Mirror extends PooledWorker<TaskRow> {
  /** Each copy's abort, by task id: close() stops them. */
  private readonly aborts = new Map<string, AbortController>();
  private readonly source: SourceFetcher;
  private readonly leaseMs: number;
  private readonly schedule: number[];

  constructor(private readonly opts: MirrorOptions) {
    super({ size: opts.concurrency ?? 4 });
    this.leaseMs = opts.leaseMs ?? 60_000;
    this.schedule = opts.retryScheduleMs ?? MIRROR_RETRY_SCHEDULE_MS;
    this.source = new SourceFetcher({
      allowPrivateNetworks: opts.allowPrivateNetworks,
      idleTimeoutMs: opts.idleTimeoutMs ?? 30_000,
      maxBytes: opts.maxBytes,
      ...(opts.resolve ? { resolve: opts.resolve } : {}),
      ...opts.deadlines?.download,
    });
  }

  /** Claims what fits in the free slots and starts copying it (not awaited). */
  override async tick(): Promise<TickResult> {
    // Full: the next settle nudges the loop; looking for due rows now would only spin.
    if (this.slots.claimable <= 0) return { didWork: false, nextDueAt: null };
    return this.loop.tick();
  }

  async nextDueAt(full: boolean): Promise<number | null> {
    const now = this.opts.clock.now();
    const due = await this.opts.store.tasks.nextDueAt("mirroring", now);
    // Due tasks a claim with room left behind are of clients at their share: a settle wakes the loop
    // for them, a new task nudges it; a second is the longest they wait otherwise (no spinning on them).
    return due !== null && due <= now && !full ? now + 1_000 : due;
  }

  /** One claim, then waits for the copies in flight (tests); how many it started. */
  override async runOnce(): Promise<number> {
    const started = await this.loop.runOnce();
    await this.drain();
    return started;
  }

  /** Claims due tasks within each client's room in the pool, the client with the fewest copies here first. */
  async claim(start: (task: TaskRow) => void): Promise<{ full: boolean }> {
    const room = this.slots.claimable;
    if (room <= 0) return { full: false };
    const claimed = await this.opts.store.tasks.claimAcrossClients("mirroring", {
      now: this.opts.clock.now(),
      leaseMs: this.leaseMs,
      token: this.opts.owner.token(),
      limit: room,
      rank: (clientId) => this.slots.inFlightOf(clientId),
      clientRoom: (clientId, picked) => this.slots.room(clientId, picked),
    });
    for (const task of claimed) start(task);
    return { full: claimed.length >= room };
  }

  /** Stops the copies in flight (their leases are released by the caller) and the source pool. */
  async close(): Promise<void> {
    for (const abort of this.aborts.values()) abort.abort();
    await this.loop.close();
    await this.source.close();
  }

  /** One task's copy round in its slot: sized by the claim (clientRoom), so the slot is there; a client's copies share one key, its bucket. */
  run(task: TaskRow): Promise<void> {
    const slot = this.slots.take(task.clientId, task.clientId);
    const abort = new AbortController();
    this.aborts.set(task.id, abort);
    return this.copyRound(task, task.claimToken!, abort).finally(() => {
      slot.release();
      this.aborts.delete(task.id);
    });
  }

  failed(task: TaskRow, err: unknown): void {
    this.opts.logger.error(
      { err, task_id: task.id },
      "mirror: copy round failed; the task is tried again when its lease ends",
    );
  }

  private async copyRound(task: TaskRow, token: string, abort: AbortController): Promise<void> {
    const { store, clock, lifecycle, logger } = this.opts;
    const urls = outputUrls(await outputTextOf(task, store.outputs));
    const progress = readProgress(task.filesJson, urls);
    const client = await store.clients.find(task.clientId);
    let bucket: Bucket | null = null;
    let refusal: string | null = null;
    try {
      const config = client ? openStorage(client, this.opts.encryptionKey) : null;
      if (!config) refusal = "not copied: the client's bucket was removed before the copy was made";
      else
        bucket = new Bucket(config, {
          allowPrivateNetworks: this.opts.allowPrivateNetworks,
          ...(this.opts.resolve ? { resolve: this.opts.resolve } : {}),
          deadlines: this.opts.deadlines?.bucket ?? {},
        });
    } catch (err) {
      refusal = `not copied: ${err instanceof Error ? err.message : String(err)}`;
    }
    const round = progress.rounds + 1;
    // Keeps the lease while a long file copies; a lost lease stops the copy (another holder has the task).
    const heartbeat = setInterval(
      () => {
        void lifecycle.holdMirror(task, token, clock.now() + this.leaseMs).then(
          (held) => held || abort.abort(),
          () => {},
        );
      },
      Math.max(1_000, Math.floor(this.leaseMs / 3)),
    );
    heartbeat.unref();
    try {
      for (let n = 0; n < urls.length; n++) {
        const sourceUrl = urls[n]!;
        const entry = progress.files[n];
        if (entry && ("sha256" in entry || entry.final)) continue;
        if (!bucket) {
          // The file's own refusal says more than the bucket's (a private output URL is refused either way).
          const checked = validateSourceUrl(sourceUrl, this.opts.allowPrivateNetworks);
          progress.files[n] = {
            source_url: sourceUrl,
            error: checked.ok ? refusal! : `blocked: ${checked.reason}`,
            final: true,
          };
          continue;
        }
        progress.files[n] = await this.copyOne(task, bucket, sourceUrl, n, round, abort.signal);
        if (abort.signal.aborted) return;
        if (!(await lifecycle.holdMirror(task, token, clock.now() + this.leaseMs, JSON.stringify(progress)))) return;
      }
      const retry = progress.files.some((f) => f !== null && !("sha256" in f) && !f.final);
      if (retry) {
        const wait = this.schedule[round - 1]!;
        await lifecycle.mirrorLater(task, token, clock.now() + wait, JSON.stringify({ ...progress, rounds: round }));
        logger.info({ task_id: task.id, round, retry_in_ms: wait }, "mirror: some copies failed; trying again later");
        return;
      }
      const files: FileRecord[] = [];
      const base = this.opts.publicBaseUrl;
      const linkKey =
        base && bucket && client
          ? (openLinkKey(client, this.opts.encryptionKey) ??
            (await ensureLinkKey(store, task.clientId, this.opts.encryptionKey)))
          : null;
      for (const [n, f] of progress.files.entries()) {
        if (f === null) continue;
        if ("sha256" in f) {
          const link = linkKey ? { link: fileLink(base!, linkKey, task.id, n) } : {};
          files.push({ ...f, url: await bucket!.urlOf(f.key), ...link });
        } else {
          this.opts.metrics?.fileFailed();
          files.push({ source_url: f.source_url, error: f.error });
        }
      }
      if (await lifecycle.finishMirroring(task, token, JSON.stringify(files))) {
        logger.info(
          {
            task_id: task.id,
            client_id: task.clientId,
            files: files.length,
            failed: files.filter((f) => "error" in f).length,
          },
          "mirror: task's output copied",
        );
      }
    } finally {
      clearInterval(heartbeat);
      bucket?.close();
    }
  }

  private async copyOne(
    task: TaskRow,
    bucket: Bucket,
    sourceUrl: string,
    n: number,
    round: number,
    signal: AbortSignal,
  ): Promise<Copied | Failed> {
    const started = performance.now();
    try {
      const copied = await copyFile(this.source, bucket, {
        sourceUrl,
        taskId: task.id,
        n,
        maxBytes: this.opts.maxBytes,
        signal,
      });
      this.opts.metrics?.fileCopied(copied.bytes, (performance.now() - started) / 1000);
      return {
        source_url: sourceUrl,
        key: copied.key,
        bytes: copied.bytes,
        sha256: copied.sha256,
        content_type: copied.contentType,
      };
    } catch (err) {
      const e =
        err instanceof CopyError
          ? err
          : new CopyError(err instanceof Error ? err.message : String(err), true, "internal");
      this.opts.metrics?.attemptFailed(e.kind);
      const final = !e.retryable || round > this.schedule.length;
      this.opts.logger.warn({ task_id: task.id, file: n, round, final, error: e.message }, "mirror: copy failed");
      return {
        source_url: sourceUrl,
        error: e.retryable && final ? `${e.message} (after ${round} attempts)` : e.message,
        final,
      };
    }
  }
}

function readProgress(filesJson: string | null, urls: string[]): Progress {
  let parsed: Partial<Progress> | null = null;
  try {
    parsed = filesJson ? (JSON.parse(filesJson) as Partial<Progress>) : null;
  } catch {
    parsed = null;
  }
  const files = urls.map((url, n) => {
    const f = parsed?.files?.[n];
    return f && f.source_url === url ? f : null;
  });
  return { rounds: typeof parsed?.rounds === "number" ? parsed.rounds : 0, files };
}
