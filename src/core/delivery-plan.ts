/**
 * The dispatcher's decisions, as pure functions of what it knows (no store, no clock, no socket):
 * which delivery keys a claim leaves out, how much room a key or its refill has, how long a key
 * saturated by other instances is left out, when the loop wakes, how long a circuit's first pause
 * lasts and whether a failed trial spends a retry. src/workers/dispatcher.ts gathers the inputs,
 * calls these, and carries out what they return (docs/decisions/0006, 0008).
 */
import { cappedBackoff } from "./backoff.js";

// The stores apply the lease-ahead rule inside their claims (db/ imports no core): it lives in store/.
export { leaseRoom } from "../store/lease-ahead.js";

/**
 * A key a claim found at its cap across instances is left out of the loop's claims for this long
 * at first, doubling each time it is found so again, up to the max.
 */
export const SATURATED_BACKOFF_MS = 100;
export const SATURATED_BACKOFF_MAX_MS = 1_000;

/** A key noted as held at its cap by other instances: left out until `until`; `backoffMs` doubles while it stays so. */
export interface SaturationNote {
  until: number;
  backoffMs: number;
}

/** How many more attempts may start for a key now: the rest of its cap in the pool (less slots held for its refill), or its breaker's allowance. */
export function keyRoom(poolRoom: number, breakerAllowance: number): number {
  return Math.min(poolRoom, breakerAllowance);
}

/**
 * Keys none of whose events may be claimed now: at their cap, or with their breaker's trial out.
 * Every such key has an attempt in flight (it is among the pool's keys), so the list is never
 * longer than the pool.
 */
export function busyKeys(poolKeys: Iterable<string>, roomOf: (key: string) => number): string[] {
  const busy: string[] = [];
  for (const key of poolKeys) if (roomOf(key) <= 0) busy.push(key);
  return busy;
}

/**
 * Keys the loop's claim and next-due probe leave out: busy here, or noted as saturated by other
 * instances until their back-off ends (a key with no room here is already among the busy ones).
 */
export function excludedKeys(
  poolKeys: Iterable<string>,
  saturated: ReadonlyMap<string, SaturationNote>,
  now: number,
  roomOf: (key: string) => number,
): string[] {
  const keys = busyKeys(poolKeys, roomOf);
  for (const [key, { until }] of saturated) if (until > now && roomOf(key) > 0) keys.push(key);
  return keys;
}

/** Whether a key is noted as held at its cap by other instances now. */
export function saturatedNow(note: SaturationNote | undefined, now: number): boolean {
  return note !== undefined && note.until > now;
}

/** The back-off of a key found saturated again (or for the first time). */
export function nextSaturationBackoff(before: SaturationNote | undefined): number {
  return before
    ? cappedBackoff({ attempt: 1, baseMs: before.backoffMs, maxMs: SATURATED_BACKOFF_MAX_MS })
    : SATURATED_BACKOFF_MS;
}

/**
 * The saturation notes after a claim of the due index. A key that had due events in the claim's
 * window and room here (its client too), yet got none while the claim took less than it could,
 * was refused by the store's count across instances (EventClaimOptions.maxPerKey) or its lock was
 * held by another instance's claim: this pool cannot see those leases, so without a note the
 * loop's next-due probe would find the key's backlog due now and claim it again every turn to
 * find nothing. The note leaves it out for a back-off; meanwhile this instance's own attempts of
 * the key still refill it as they settle, so the key loses no throughput: it is at its cap across
 * instances. A key that got some events, or was not asked about and whose back-off is over, is forgotten.
 */
export function noteSaturation(
  saturated: ReadonlyMap<string, SaturationNote>,
  claim: {
    /** Keys the store was asked about with room here. */
    asked: ReadonlySet<string>;
    /** Keys the claim took events of. */
    got: ReadonlySet<string>;
    /** The claim took as many as it had room for. */
    full: boolean;
    now: number;
    /** Whether the key and its client still have room here. */
    hasRoom: (key: string) => boolean;
  },
): Map<string, SaturationNote> {
  const { asked, got, full, now, hasRoom } = claim;
  const next = new Map<string, SaturationNote>();
  for (const [key, note] of saturated) if (!got.has(key) && (asked.has(key) || note.until > now)) next.set(key, note);
  if (full) return next;
  for (const key of asked) {
    if (got.has(key) || !hasRoom(key)) continue;
    const backoffMs = nextSaturationBackoff(next.get(key));
    next.set(key, { until: now + backoffMs, backoffMs });
  }
  return next;
}

/**
 * When the loop wakes after a claim that took less than it could: now when a paused key's trial is
 * due and has room, else the earliest of the next trial, the due index's next event and the end
 * of a saturation back-off (keys and clients at their share here wake it as attempts settle).
 */
export function wakeAt(at: {
  now: number;
  trialDueWithRoom: boolean;
  nextTrialAt: number | null;
  due: number | null;
  saturatedUntil: Iterable<number>;
}): number | null {
  let next = at.trialDueWithRoom ? at.now : at.nextTrialAt;
  if (at.due !== null) next = next === null ? at.due : Math.min(next, at.due);
  for (const until of at.saturatedUntil) next = next === null ? until : Math.min(next, until);
  return next;
}

/**
 * How many of a key's next events a settled attempt's refill may claim: the key's room plus the
 * slots held for it, within its client's room and the pool's. `full` when another settle's refill
 * already used the held slot (it claimed for every slot held then): the key is full again.
 */
export function refillRoom(r: {
  keyRoom: number;
  held: number;
  clientRoom: number;
  free: number;
}): { full: true } | { full: false; room: number } {
  if (r.keyRoom + r.held <= 0) return { full: true };
  return { full: false, room: Math.max(0, Math.min(r.keyRoom + r.held, r.clientRoom, r.free)) };
}

/** One key asking to be refilled in a turn's batch: its room here, the slots held for it, its client. */
export interface RefillAsk {
  key: string;
  clientId: string;
  keyRoom: number;
  held: number;
}

/** One key's part of a batched refill: full (another refill used its held slots), or how many of its due events the claim may take. */
export type RefillLimit = { key: string; full: true } | { key: string; full: false; room: number };

/**
 * The limits of one batched refill (every key whose attempt settled in the same turn, claimed in
 * one statement): refillRoom for each key in turn, its client's room asked with what the keys
 * before it were given (`clientRoom` counts those as held, so several keys of one client stay
 * within its share), and the pool's free slots shared out in the same order. The statement takes
 * at most each key's room; a key given 0 is not claimed (the loop's claim serves it).
 */
export function refillPlan(
  asks: readonly RefillAsk[],
  clientRoom: (clientId: string, picked: ReadonlyMap<string, number>) => number,
  free: number,
): RefillLimit[] {
  const picked = new Map<string, number>();
  let left = free;
  return asks.map(({ key, clientId, keyRoom, held }) => {
    const plan = refillRoom({ keyRoom, held, clientRoom: clientRoom(clientId, picked), free: left });
    if (plan.full) return { key, full: true };
    picked.set(clientId, (picked.get(clientId) ?? 0) + plan.room);
    left -= plan.room;
    return { key, full: false, room: plan.room };
  });
}

/**
 * A circuit's first pause: until the schedule's first retry is due at the latest (its delay plus
 * the 20% jitter; 1 s to 30 s), so a receiver that fails first attempts but takes retries gets its
 * trial, an attempted event, when that retry was due anyway, and no retry is left behind it.
 */
export function firstCoolDownMs(retryScheduleMs: readonly number[]): number {
  return Math.min(30_000, Math.max(1_000, Math.ceil((retryScheduleMs[1] ?? 30_000) * 1.2)));
}

/**
 * Until when a failed trial's event waits without spending a retry: the new pause's end, while the
 * event has waited less than its whole retry schedule; past that (or for an attempt that was no
 * trial, or a trial that did not reopen the circuit) null, and the attempt spends a retry, so an
 * event to a host that stays down ends failed (and delivery.exhausted) in time.
 */
export function pausedTrialUntil(t: {
  trial: boolean;
  reopenedUntil: number | null;
  waitedMs: number;
  scheduleSpanMs: number;
}): number | null {
  return t.trial && t.reopenedUntil !== null && t.waitedMs < t.scheduleSpanMs ? t.reopenedUntil : null;
}

/** What one key's part of a batched refill came to: how many of its claimed events started, and whether it is full again. */
export interface RefillOutcome {
  started: number;
  full: boolean;
}

/**
 * Splits a batched refill's plan: the keys the claim asks for (with their limit), and what the
 * others come to without a claim: a key another refill already filled is full again; a key given
 * no room (its client or the pool has none) is not, and the loop's claim serves it.
 */
export function refillClaims(plan: readonly RefillLimit[]): {
  claims: Array<{ key: string; limit: number; index: number }>;
  settled: Map<string, RefillOutcome>;
} {
  const claims: Array<{ key: string; limit: number; index: number }> = [];
  const settled = new Map<string, RefillOutcome>();
  plan.forEach((p, index) => {
    if (p.full) settled.set(p.key, { started: 0, full: true });
    else if (p.room > 0) claims.push({ key: p.key, limit: p.room, index });
    else settled.set(p.key, { started: 0, full: false });
  });
  return { claims, settled };
}

/** Each claimed key's outcome: what started, and full when the claim found as many as its limit. */
export function refillOutcomes(
  claims: ReadonlyArray<{ key: string; limit: number }>,
  got: ReadonlyMap<string, { claimed: number; started: number }>,
): Map<string, RefillOutcome> {
  return new Map(
    claims.map(({ key, limit }) => {
      const n = got.get(key);
      return [key, { started: n?.started ?? 0, full: (n?.claimed ?? 0) >= limit }];
    }),
  );
}

/**
 * Whether a settled attempt need not wake the loop at once: its key's refill started something or
 * is full again, or the key is held at its cap by other instances (then the loop's claim leaves it
 * out anyway, and runs soon for everyone else, not at once for each such settle). A key whose
 * refill failed (no outcome) wakes it.
 */
export function quietAfterRefill(
  outcome: RefillOutcome | undefined,
  saturated: SaturationNote | undefined,
  now: number,
): boolean {
  return outcome !== undefined && (outcome.started > 0 || outcome.full || saturatedNow(saturated, now));
}

/**
 * Leases ahead of the in-flight cap (docs/performance.md, eighth round). A key's refill may lease
 * up to this many of its events at once, while at most its cap of them are in flight: the rest
 * wait in memory and start as the key's own slots free, with no claim between one attempt's end
 * and the next one's start, and their records commit together. 128 since the twelfth round: a
 * refill asked at half of it (leaseAheadWant) still claims about 64, as before, while the key
 * keeps enough waiting to outlast the records' linger its claim joins.
 */
export const LEASE_AHEAD_MAX = 128;

/**
 * A leased-ahead event starts only while its lease outlasts an attempt by this much: a lease that
 * ran out while the event waited could have been claimed by another instance (the fence would
 * drop our record, but the receiver would get the webhook twice and the key's cap would not hold).
 */
export const AHEAD_START_MARGIN_MS = 1_000;

/**
 * How many of a key's events this instance may hold leased at once (in flight and waiting): the
 * cap until the key's attempt time is known, then as many as its cap of slots get through, at
 * half the speed last seen, in the time a leased event may wait (its lease less an attempt's
 * timeout and the margin), up to LEASE_AHEAD_MAX.
 */
export function leaseAheadLimit(a: { cap: number; waitMs: number; attemptMs: number | undefined }): number {
  if (a.attemptMs === undefined || a.waitMs <= 0) return a.cap;
  const fits = Math.floor((a.cap * a.waitMs) / Math.max(1, 2 * a.attemptMs));
  return Math.max(a.cap, Math.min(LEASE_AHEAD_MAX, fits));
}

/**
 * How many more of a key's events its refill leases ahead: none while more than half its limit
 * (and more than a cap's worth) still waits, so a refill every few dozen webhooks, not every one;
 * else up to the key's limit less what it has in flight and waiting. Half, not a cap's worth: a
 * refill that is not urgent joins the records' commit and waits for its linger (up to
 * RECORD_LINGER_MS, workers/delivery/refills.ts), then for the commit's sync; with only a cap's
 * worth left the key ran out first, and its next settle ended the linger (a commit of a few records).
 * `dry`: the key's last refill found fewer events than it asked for (its backlog is all leased):
 * then only once no more than a cap's worth waits, so a short backlog is not asked again at every settle.
 */
export function leaseAheadWant(k: {
  cap: number;
  limit: number;
  inFlight: number;
  waiting: number;
  dry?: boolean;
}): number {
  if (k.waiting > (k.dry === true ? k.cap : Math.max(k.cap, Math.floor(k.limit / 2)))) return 0;
  return Math.max(0, k.limit - k.inFlight - k.waiting);
}

/** Whether a leased-ahead event may still start: its lease outlasts an attempt's timeout and the margin. */
export function mayStartAhead(claimedUntil: number | null, now: number, timeoutMs: number): boolean {
  return claimedUntil !== null && claimedUntil - now >= timeoutMs + AHEAD_START_MARGIN_MS;
}

/** A batched refill's claim of one key: `limit` events in all, of which the first `starts` start now, the rest wait leased ahead. */
export interface RefillClaim {
  key: string;
  limit: number;
  starts: number;
  index: number;
}

/**
 * refillClaims with leases ahead: each key's claim also takes `ahead(index)` more events to wait
 * in memory, and a key given no room to start now (full again, or its client at its share) is
 * still claimed for those. Leased-ahead events hold no slot of the pool, so the fair share, which
 * counts slots in flight, is unchanged.
 */
export function refillClaimsAhead(
  plan: readonly RefillLimit[],
  ahead: (index: number) => number,
): { claims: RefillClaim[]; settled: Map<string, RefillOutcome> } {
  const { claims, settled } = refillClaims(plan);
  const byIndex = new Map(claims.map((c) => [c.index, c]));
  const out: RefillClaim[] = [];
  plan.forEach((p, index) => {
    const extra = Math.max(0, ahead(index));
    const c = byIndex.get(index);
    if (c) out.push({ ...c, starts: c.limit, limit: c.limit + extra });
    else if (extra > 0) {
      settled.delete(p.key);
      out.push({ key: p.key, limit: extra, starts: 0, index });
    }
  });
  return { claims: out, settled };
}
