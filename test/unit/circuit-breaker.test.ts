import { describe, expect, it } from "vitest";
import {
  breakerOutcome,
  CircuitBreakers,
  type BreakerOutcome,
  type Permit,
} from "../../src/webhooks/circuit-breaker.js";
import { destinationHost, hostUrlPrefixes } from "../../src/webhooks/destination.js";
import { sendResult, type SendResult } from "../../src/webhooks/sender.js";
import { FakeClock } from "../helpers/fake-clock.js";

const HOST = "hooks.example.com:443";

/** One attempt: acquire a permit (which must be granted) and record its outcome. */
function attempt(b: CircuitBreakers, outcome: BreakerOutcome, host = HOST) {
  const permit = b.acquire(host);
  expect(permit, `a permit for ${host}`).not.toBeNull();
  return b.record(permit!, outcome);
}

function fail(b: CircuitBreakers, times: number, host = HOST) {
  const transitions = [];
  for (let i = 0; i < times; i++) transitions.push(attempt(b, "failure", host));
  return transitions;
}

describe("CircuitBreakers", () => {
  it("stays closed below the threshold; a success resets the count", () => {
    const clock = new FakeClock();
    const b = new CircuitBreakers(clock);
    expect(fail(b, 4)).toEqual([null, null, null, null]);
    expect(b.state(HOST)).toBe("closed");
    expect(b.failures(HOST)).toBe(4);
    expect(attempt(b, "success")).toBeNull();
    expect(b.failures(HOST)).toBe(0);
    expect(fail(b, 4).every((t) => t === null)).toBe(true);
    expect(b.state(HOST)).toBe("closed");
  });

  it("opens after 5 consecutive failures for 30 s, refusing every attempt until then", () => {
    const clock = new FakeClock();
    const b = new CircuitBreakers(clock);
    const transitions = fail(b, 5);
    expect(transitions.slice(0, 4)).toEqual([null, null, null, null]);
    expect(transitions[4]).toEqual({
      kind: "opened",
      host: HOST,
      until: clock.now() + 30_000,
      coolDownMs: 30_000,
      failures: 5,
      afterTrial: false,
    });
    expect(b.state(HOST)).toBe("open");
    expect(b.allowance(HOST)).toBe(0);
    expect(b.refusedHosts()).toEqual([HOST]);
    expect(b.nextTrialAt()).toBe(clock.now() + 30_000);
    expect(b.acquire(HOST)).toBeNull();

    clock.advance(29_999);
    expect(b.acquire(HOST)).toBeNull();
    expect(b.state(HOST)).toBe("open");
  });

  it("half-open after the cool-down: exactly one trial; its success closes the circuit", () => {
    const clock = new FakeClock();
    const b = new CircuitBreakers(clock);
    fail(b, 5);
    clock.advance(30_000);
    expect(b.state(HOST)).toBe("half-open");
    expect(b.allowance(HOST)).toBe(1);
    expect(b.refusedHosts()).toEqual([]);
    expect(b.nextTrialAt()).toBeNull();

    const trial = b.acquire(HOST)!;
    expect(trial.trial).toBe(true);
    // While the trial is out, nothing else goes.
    expect(b.acquire(HOST)).toBeNull();
    expect(b.allowance(HOST)).toBe(0);
    expect(b.refusedHosts()).toEqual([HOST]);

    expect(b.record(trial, "success")).toEqual({ kind: "closed", host: HOST });
    expect(b.state(HOST)).toBe("closed");
    expect(b.allowance(HOST)).toBe(Number.POSITIVE_INFINITY);
    expect(b.acquire(HOST)!.trial).toBe(false);
  });

  it("a failed trial re-opens with a doubled cool-down, capped at 10 min; closing resets it to 30 s", () => {
    const clock = new FakeClock();
    const b = new CircuitBreakers(clock);
    fail(b, 5);
    const coolDowns: number[] = [];
    for (let i = 0; i < 7; i++) {
      clock.advance(b.nextTrialAt()! - clock.now());
      const t = attempt(b, "failure");
      expect(t).toMatchObject({
        kind: "opened",
        afterTrial: true,
        until: clock.now() + (t as { coolDownMs: number }).coolDownMs,
      });
      coolDowns.push((t as { coolDownMs: number }).coolDownMs);
    }
    expect(coolDowns).toEqual([60_000, 120_000, 240_000, 480_000, 600_000, 600_000, 600_000]);

    clock.advance(600_000);
    expect(attempt(b, "success")).toEqual({ kind: "closed", host: HOST });
    // Within the healthy window after that 2xx, failures do not pause the host; past it, they do.
    expect(fail(b, 5).every((t) => t === null)).toBe(true);
    clock.advance(30_000);
    expect(attempt(b, "failure")).toMatchObject({ kind: "opened", coolDownMs: 30_000 });
  });

  it("a host that answered 2xx within the healthy window is not paused, however many failures follow", () => {
    const clock = new FakeClock();
    const b = new CircuitBreakers(clock);
    // A receiver that fails every first attempt and takes the retry: failures interleave with 2xx.
    for (let i = 0; i < 50; i++) {
      expect(fail(b, 3).every((t) => t === null)).toBe(true);
      clock.advance(1_000);
      expect(attempt(b, "success")).toBeNull();
    }
    expect(b.state(HOST)).toBe("closed");
    // One that never answers 2xx is paused after the threshold.
    const dead = new CircuitBreakers(clock);
    expect(fail(dead, 5)[4]).toMatchObject({ kind: "opened" });
  });

  it("dueTrials lists open keys whose cool-down is over; endCoolDown makes one due at once", () => {
    const clock = new FakeClock();
    const b = new CircuitBreakers(clock);
    fail(b, 5);
    expect(b.dueTrials()).toEqual([]);
    b.endCoolDown(HOST);
    expect(b.dueTrials()).toEqual([HOST]);
    expect(b.acquire(HOST)).toMatchObject({ trial: true });
    expect(b.dueTrials()).toEqual([]);
  });

  it("a neutral trial (blocked, never sent) hands the trial back without deciding", () => {
    const clock = new FakeClock();
    const b = new CircuitBreakers(clock);
    fail(b, 5);
    clock.advance(30_000);
    expect(attempt(b, "neutral")).toBeNull();
    expect(b.state(HOST)).toBe("half-open");
    expect(b.allowance(HOST)).toBe(1);
    expect(attempt(b, "success")).toEqual({ kind: "closed", host: HOST });
  });

  it("attempts that started before the circuit opened neither extend nor close it", () => {
    const clock = new FakeClock();
    const b = new CircuitBreakers(clock);
    const stragglers: Permit[] = [b.acquire(HOST)!, b.acquire(HOST)!, b.acquire(HOST)!];
    fail(b, 5);
    const openUntil = b.nextTrialAt();
    clock.advance(10_000);
    expect(b.record(stragglers[0]!, "failure")).toBeNull();
    expect(b.record(stragglers[1]!, "success")).toBeNull();
    expect(b.state(HOST)).toBe("open");
    expect(b.nextTrialAt()).toBe(openUntil);

    // Nor does a straggler settle the trial once half-open.
    clock.advance(20_000);
    const trial = b.acquire(HOST)!;
    expect(b.record(stragglers[2]!, "success")).toBeNull();
    expect(b.state(HOST)).toBe("half-open");
    expect(b.acquire(HOST)).toBeNull();
    expect(b.record(trial, "failure")).toMatchObject({ kind: "opened", coolDownMs: 60_000 });
  });

  it("hosts are independent", () => {
    const clock = new FakeClock();
    const b = new CircuitBreakers(clock);
    fail(b, 5, "a.test:443");
    expect(b.state("a.test:443")).toBe("open");
    expect(b.state("b.test:443")).toBe("closed");
    expect(attempt(b, "failure", "b.test:443")).toBeNull();
    expect(b.refusedHosts()).toEqual(["a.test:443"]);
  });

  it("honours its options", () => {
    const clock = new FakeClock();
    const b = new CircuitBreakers(clock, { failureThreshold: 2, coolDownMs: 1_000, maxCoolDownMs: 3_000 });
    expect(fail(b, 2)[1]).toMatchObject({ kind: "opened", coolDownMs: 1_000, failures: 2 });
    const coolDowns = [];
    for (let i = 0; i < 3; i++) {
      clock.advance(b.nextTrialAt()! - clock.now());
      coolDowns.push((attempt(b, "failure") as { coolDownMs: number }).coolDownMs);
    }
    expect(coolDowns).toEqual([2_000, 3_000, 3_000]);
  });
});

describe("breakerOutcome", () => {
  const result = (fields: Partial<SendResult>): SendResult => sendResult({ latencyMs: 1, ...fields });

  it.each([
    ["2xx", result({ ok: true, statusCode: 204 }), "success"],
    ["4xx: the receiver is up", result({ statusCode: 400, error: "HTTP 400" }), "success"],
    ["410", result({ statusCode: 410, gone: true, error: "gone (410)" }), "success"],
    ["429", result({ statusCode: 429, error: "HTTP 429" }), "success"],
    ["redirect", result({ statusCode: 302, error: "redirect (302) not followed" }), "success"],
    ["500", result({ statusCode: 500, error: "HTTP 500" }), "failure"],
    ["503", result({ statusCode: 503, error: "HTTP 503" }), "failure"],
    ["timeout", result({ error: "timeout after 2000 ms" }), "failure"],
    ["timeout after the headers", result({ statusCode: 200, error: "timeout after 2000 ms" }), "failure"],
    ["connection refused", result({ error: "connection refused" }), "failure"],
    ["connection reset", result({ error: "connection reset" }), "failure"],
    ["dns", result({ error: "host not found" }), "failure"],
    ["tls", result({ error: "tls error: CERT_HAS_EXPIRED" }), "failure"],
    ["blocked by the SSRF guard", result({ blocked: true, error: "blocked: loopback" }), "neutral"],
    ["sender closed", result({ error: "sender closed" }), "neutral"],
    ["internal error", result({ error: "internal error: boom" }), "neutral"],
  ] as const)("%s → %s", (_name, r, expected) => {
    expect(breakerOutcome(r)).toBe(expected);
  });
});

describe("destinationHost", () => {
  it.each([
    ["https://Hooks.Example.com/x", "hooks.example.com:443"],
    ["https://hooks.example.com:443/y?z=1", "hooks.example.com:443"],
    ["http://hooks.example.com/", "hooks.example.com:80"],
    ["https://hooks.example.com:8443/", "hooks.example.com:8443"],
    ["http://127.0.0.1:4000/hook", "127.0.0.1:4000"],
    ["http://[::1]:4000/hook", "[::1]:4000"],
  ])("%s → %s", (url, host) => {
    expect(destinationHost(url)).toBe(host);
  });

  it("every normalised URL of a host starts with one of its prefixes", () => {
    for (const url of [
      "https://a.test/",
      "https://a.test:443/x",
      "http://a.test:443/?q",
      "http://[::1]:4000/h",
      "https://a.test:8443/p",
    ]) {
      const href = new URL(url).href;
      expect(
        hostUrlPrefixes(destinationHost(href)).some((p) => href.startsWith(p)),
        href,
      ).toBe(true);
    }
    expect(hostUrlPrefixes("a.test:443")).toEqual(["http://a.test:443/", "https://a.test/"]);
    expect(hostUrlPrefixes("a.test:80")).toEqual(["http://a.test/", "https://a.test:80/"]);
  });
});
