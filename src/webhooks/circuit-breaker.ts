import type { Clock } from "../clock.js";
import type { SendResult } from "./sender.js";
import { cappedBackoff } from "../core/backoff.js";

/**
 * A small circuit breaker per destination host, so a dead receiver costs one attempt per cool-down
 * instead of one timeout per due event. Closed: attempts go out; after `failureThreshold`
 * consecutive failures it opens for a cool-down (30 s, doubling on each failed trial up to 10 min),
 * but only when the host answered no 2xx within the last `healthyWindowMs` either: a receiver that
 * fails every first attempt and takes the retry, or fails half of all requests, is working, and
 * pausing it would only starve it (docs/contract.md, "Partly working receivers"). Once the cool-down is over it is half-open and lets
 * exactly one trial attempt through: success closes it (and resets the cool-down), failure opens it
 * again. Pure bookkeeping driven by a clock; the dispatcher decides which event is the trial and
 * what to do with events while a host is refused.
 */

export interface BreakerOptions {
  /** Consecutive failures that open the circuit (default 5). */
  failureThreshold?: number;
  /** First cool-down (default 30 s); each failed trial doubles it up to `maxCoolDownMs`. */
  coolDownMs?: number;
  /** Longest cool-down (default 10 min). */
  maxCoolDownMs?: number;
  /** A 2xx this recent keeps the circuit closed whatever the failures since (default 30 s). */
  healthyWindowMs?: number;
}

export type BreakerState = "closed" | "open" | "half-open";

/** What an attempt says about the host's health; "neutral" attempts say nothing (blocked, never sent). */
export type BreakerOutcome = "success" | "failure" | "neutral";

/** Permission for one attempt; hand it back to record() exactly once. */
export interface Permit {
  readonly host: string;
  /** Which opening the permit was issued under: results of attempts started before the circuit opened are ignored. */
  readonly generation: number;
  /** The half-open trial: its outcome decides whether the circuit closes. */
  readonly trial: boolean;
}

/** A change worth one log line: the circuit opened (or re-opened after a failed trial), or closed. */
export type BreakerTransition =
  | { kind: "opened"; host: string; until: number; coolDownMs: number; failures: number; afterTrial: boolean }
  | { kind: "closed"; host: string };

interface Breaker {
  failures: number;
  open: boolean;
  openUntil: number;
  coolDownMs: number;
  generation: number;
  trialOut: boolean;
  /** Permits handed out and not yet recorded; an entry is forgotten only when none are out. */
  outstanding: number;
  /** The host's last 2xx (or other sign of life), if recent enough to matter. */
  lastSuccessAt: number | null;
  /** Last permit or outcome: a closed entry idle longer than the longest pause is forgotten. */
  touchedAt: number;
}

/** Entries past this many are swept of forgotten hosts on the next acquire. */
const SWEEP_AT = 10_000;

/**
 * Timeouts, connection errors, TLS and DNS failures and 5xx count against the host; any other
 * answer (2xx, but also 3xx and 4xx) shows it is up and resets the count. An attempt the SSRF guard
 * refused, or that never left (sender closing, internal error), is neutral.
 */
export function breakerOutcome(result: SendResult): BreakerOutcome {
  if (result.blocked) return "neutral";
  if (result.error === "sender closed" || result.error?.startsWith("internal error")) return "neutral";
  if (result.ok) return "success";
  if (result.statusCode !== null && result.statusCode >= 500) return "failure";
  if (result.statusCode !== null && !result.error?.startsWith("timeout")) return "success";
  return "failure";
}

export class CircuitBreakers {
  private readonly byHost = new Map<string, Breaker>();
  private readonly failureThreshold: number;
  private readonly baseCoolDownMs: number;
  private readonly maxCoolDownMs: number;
  private readonly healthyWindowMs: number;
  private sweepAt = SWEEP_AT;

  constructor(
    private readonly clock: Clock,
    opts: BreakerOptions = {},
  ) {
    this.failureThreshold = Math.max(1, opts.failureThreshold ?? 5);
    this.baseCoolDownMs = Math.max(0, opts.coolDownMs ?? 30_000);
    this.maxCoolDownMs = Math.max(this.baseCoolDownMs, opts.maxCoolDownMs ?? 600_000);
    this.healthyWindowMs = Math.max(0, opts.healthyWindowMs ?? 30_000);
  }

  state(host: string): BreakerState {
    const b = this.byHost.get(host);
    if (!b?.open) return "closed";
    return this.clock.now() < b.openUntil ? "open" : "half-open";
  }

  /** When an open circuit lets its trial through, or null when it is not open now. */
  openUntil(host: string): number | null {
    const b = this.byHost.get(host);
    return b?.open && this.clock.now() < b.openUntil ? b.openUntil : null;
  }

  /** Consecutive failures counted against the host while closed. */
  failures(host: string): number {
    return this.byHost.get(host)?.failures ?? 0;
  }

  /** How many attempts may start now, breaker-wise: unlimited when closed, 1 for a pending trial, else 0. */
  allowance(host: string): number {
    const state = this.state(host);
    if (state === "closed") return Number.POSITIVE_INFINITY;
    if (state === "open") return 0;
    return this.byHost.get(host)!.trialOut ? 0 : 1;
  }

  /** A permit for one attempt now, or null while the circuit refuses (open, or its trial is out). */
  acquire(host: string): Permit | null {
    let b = this.byHost.get(host);
    if (!b) {
      if (this.byHost.size >= this.sweepAt) this.sweep();
      b = {
        failures: 0,
        open: false,
        openUntil: 0,
        coolDownMs: this.baseCoolDownMs,
        generation: 0,
        trialOut: false,
        outstanding: 0,
        lastSuccessAt: null,
        touchedAt: 0,
      };
      this.byHost.set(host, b);
    }
    b.touchedAt = this.clock.now();
    let trial = false;
    if (b.open) {
      if (this.clock.now() < b.openUntil || b.trialOut) return null;
      b.trialOut = true;
      trial = true;
    }
    b.outstanding += 1;
    return { host, generation: b.generation, trial };
  }

  /** Records the outcome of a permitted attempt; returns the transition it caused, if any. */
  record(permit: Permit, outcome: BreakerOutcome): BreakerTransition | null {
    const b = this.byHost.get(permit.host);
    if (!b) return null;
    b.outstanding = Math.max(0, b.outstanding - 1);
    b.touchedAt = this.clock.now();
    try {
      // Stragglers that started before the latest opening neither extend nor close it: the trial decides.
      if (permit.generation !== b.generation) return null;
      if (permit.trial) b.trialOut = false;
      if (outcome === "neutral") return null;
      if (outcome === "success") {
        b.failures = 0;
        b.lastSuccessAt = this.clock.now();
        if (!b.open) return null;
        b.open = false;
        b.coolDownMs = this.baseCoolDownMs;
        return { kind: "closed", host: permit.host };
      }
      if (b.open) {
        // While open, only the trial holds a permit of the current generation: it failed.
        b.coolDownMs = cappedBackoff({ attempt: 1, baseMs: b.coolDownMs, maxMs: this.maxCoolDownMs });
        return this.open(permit.host, b, true);
      }
      b.failures += 1;
      return b.failures >= this.failureThreshold && !this.recentlyHealthy(b) ? this.open(permit.host, b, false) : null;
    } finally {
      if (this.forgettable(b)) this.byHost.delete(permit.host);
    }
  }

  /** Keys whose cool-down is over and whose trial is not out: the dispatcher picks each one's trial event. */
  dueTrials(): string[] {
    const now = this.clock.now();
    const due: string[] = [];
    for (const [host, b] of this.byHost) if (b.open && now >= b.openUntil && !b.trialOut) due.push(host);
    return due;
  }

  /** A due trial found nothing to send: it waits another cool-down (the key stays paused). */
  deferTrial(host: string): void {
    const b = this.byHost.get(host);
    if (b?.open && !b.trialOut) b.openUntil = this.clock.now() + b.coolDownMs;
  }

  /** A paused key with nothing left to send: forgotten (its next event starts afresh). */
  forget(host: string): void {
    const b = this.byHost.get(host);
    if (b && b.outstanding === 0) this.byHost.delete(host);
  }

  /** Retry-now: an open circuit's cool-down ends at once, so its next attempt is the trial. */
  endCoolDown(host: string): void {
    const b = this.byHost.get(host);
    if (b?.open) b.openUntil = Math.min(b.openUntil, this.clock.now());
  }

  private recentlyHealthy(b: Breaker): boolean {
    return b.lastSuccessAt !== null && this.clock.now() - b.lastSuccessAt < this.healthyWindowMs;
  }

  private forgettable(b: Breaker): boolean {
    if (b.open || b.outstanding > 0) return false;
    // A few failures and then silence: after the longest pause they no longer say anything.
    if (b.failures > 0) return this.clock.now() - b.touchedAt > this.maxCoolDownMs;
    return !this.recentlyHealthy(b);
  }

  /** Drops the entries of hosts with nothing to remember; grows the threshold if most are still needed. */
  private sweep(): void {
    for (const [host, b] of this.byHost) if (this.forgettable(b)) this.byHost.delete(host);
    this.sweepAt = Math.max(SWEEP_AT, this.byHost.size * 2);
  }

  /** Hosts no attempt may start to now (open, or half-open with the trial out). */
  refusedHosts(): string[] {
    return [...this.byHost.keys()].filter((host) => this.allowance(host) === 0);
  }

  /** The earliest end of a cool-down still ahead, when the loop should wake to send a trial. */
  nextTrialAt(): number | null {
    const now = this.clock.now();
    let next: number | null = null;
    for (const b of this.byHost.values()) {
      if (b.open && b.openUntil > now && (next === null || b.openUntil < next)) next = b.openUntil;
    }
    return next;
  }

  private open(host: string, b: Breaker, afterTrial: boolean): BreakerTransition {
    const failures = b.failures;
    b.open = true;
    b.openUntil = this.clock.now() + b.coolDownMs;
    b.generation += 1;
    b.trialOut = false;
    b.failures = 0;
    return {
      kind: "opened",
      host,
      until: b.openUntil,
      coolDownMs: b.coolDownMs,
      failures: afterTrial ? 1 : failures,
      afterTrial,
    };
  }
}
