import { z } from "zod";
import { parseDuration, parseSchedule } from "./duration.js";
import { baseUrlProblem } from "./net/base-url.js";

const LOG_LEVELS = ["fatal", "error", "warn", "info", "debug", "trace", "silent"] as const;

// Case-insensitive: env files written by other tools often say True or FALSE.
const bool = z
  .string()
  .transform((v) => v.toLowerCase())
  .pipe(z.enum(["true", "false", "1", "0", "yes", "no"], { error: "must be true or false" }))
  .transform((v) => v === "true" || v === "1" || v === "yes");

const int = (min: number, max: number) =>
  z
    .string()
    .regex(/^\d+$/, { error: "must be a whole number" })
    .transform(Number)
    .pipe(
      z
        .number()
        .int()
        .min(min, { error: `must be at least ${min}` })
        .max(max, { error: `must be at most ${max}` }),
    );

const url = z
  .string()
  .refine(
    (v) => {
      try {
        const u = new URL(v);
        return u.protocol === "http:" || u.protocol === "https:";
      } catch {
        return false;
      }
    },
    { error: "must be an absolute http(s) URL" },
  )
  .transform((v) => v.replace(/\/+$/, ""));

/**
 * Where callers reach the relay (behind a proxy): an origin, optionally with a path prefix. Location
 * headers are built from it, never from the request's Host header, which any caller can set.
 */
/**
 * Browser origins allowed to read the event streams (docs/contract.md, "Live progress"): a comma-
 * separated list of exact origins (`https://app.example.com`), each scheme, host and port only.
 */
const corsOrigins = z.string().transform((v, ctx) => {
  const origins = v
    .split(",")
    .map((o) => o.trim())
    .filter((o) => o !== "");
  for (const o of origins) {
    let ok = false;
    try {
      const u = new URL(o);
      ok = (u.protocol === "https:" || u.protocol === "http:") && u.origin === o;
    } catch {
      ok = false;
    }
    if (!ok) {
      ctx.addIssue({
        code: "custom",
        message: `"${o}" is not an origin: list origins such as https://app.example.com, comma-separated (scheme, host and port; no path)`,
      });
      return z.NEVER;
    }
  }
  return origins;
});

const publicBaseUrl = z
  .string()
  .superRefine((v, ctx) => {
    let u: URL;
    try {
      u = new URL(v);
    } catch {
      ctx.addIssue({ code: "custom", message: "must be an absolute http(s) URL such as https://relay.example.com" });
      return;
    }
    if (u.protocol !== "http:" && u.protocol !== "https:")
      ctx.addIssue({ code: "custom", message: "must be an absolute http(s) URL such as https://relay.example.com" });
    else {
      const problem = baseUrlProblem(u);
      if (problem !== null) ctx.addIssue({ code: "custom", message: problem });
    }
  })
  .transform((v) => {
    const u = new URL(v);
    return `${u.origin}${u.pathname}`.replace(/\/+$/, "");
  });

/** A bearer token: header-safe and without spaces, so it survives `Authorization: Bearer <token>`. */
const bearerToken = z.string().regex(/^[\x21-\x7e]+$/, { error: "must be printable ASCII without spaces" });

const encryptionKey = z
  .string()
  .refine((v) => Buffer.from(v, "base64").length === 32 && /^[A-Za-z0-9+/]+={0,2}$/.test(v), {
    error: "must be 32 bytes, base64-encoded (try: openssl rand -base64 32)",
  })
  .transform((v) => Buffer.from(v, "base64"));

const schedule = z.string().transform((v, ctx) => {
  const parsed = parseSchedule(v);
  if (!parsed) {
    ctx.addIssue({ code: "custom", message: "must be a comma-separated list of durations such as 0s,5s,5m,2h" });
    return z.NEVER;
  }
  return parsed;
});

const duration = (min: number, max: number) =>
  z.string().transform((v, ctx) => {
    const ms = parseDuration(v);
    if (ms === null || ms < min || ms > max) {
      ctx.addIssue({
        code: "custom",
        message: `must be a duration such as 30m, 1h or 90s, between ${min} ms and ${max / 3_600_000} h`,
      });
      return z.NEVER;
    }
    return ms;
  });

/** A size in bytes: plain bytes, or a number with KiB/MiB/GiB (or KB/MB/GB, read as the binary units). */
const byteSize = (min: number, max: number) =>
  z.string().transform((v, ctx) => {
    const m = /^\s*(\d+)\s*(b|kib|kb|k|mib|mb|m|gib|gb|g)?\s*$/i.exec(v);
    const unit = (m?.[2] ?? "b").toLowerCase()[0]!;
    const bytes = m
      ? Number(m[1]) * ({ b: 1, k: 1024, m: 1024 ** 2, g: 1024 ** 3 } as Record<string, number>)[unit]!
      : NaN;
    if (!Number.isSafeInteger(bytes) || bytes < min || bytes > max) {
      ctx.addIssue({
        code: "custom",
        message: `must be a size between ${min} bytes and ${max / 1024 ** 3} GiB, such as 8MiB, 512KiB or 1048576`,
      });
      return z.NEVER;
    }
    return bytes;
  });

const EnvSchema = z
  .object({
    PORT: int(0, 65535).default(8080),
    HOST: z.string().min(1).default("127.0.0.1"),
    DATABASE_PATH: z.string().min(1).default("./data/genrelay.db"),
    DATABASE_URL: z
      .string()
      .regex(/^postgres(ql)?:\/\/./, "must be a postgres:// (or postgresql://) connection URL")
      .optional(),
    UPSTREAM_BASE_URL: url.optional(),
    UPSTREAM_API_KEY: z.string().min(1).optional(),
    UPSTREAM_READS_PER_MINUTE: int(1, 100_000).default(100),
    WEBHOOK_ALLOW_PRIVATE_NETWORKS: bool.default(false),
    WEBHOOK_TIMEOUT_MS: int(100, 300_000).default(15_000),
    WEBHOOK_MAX_IN_FLIGHT_PER_HOST: int(1, 1_000).default(8),
    WEBHOOK_MAX_IN_FLIGHT: int(1, 10_000).default(64),
    WEBHOOK_FAILING_NOTICE_AFTER: duration(1_000, 7 * 24 * 3_600_000).default(3_600_000),
    WEBHOOK_RETRY_SCHEDULE: schedule.default([
      0, 5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000,
    ]),
    UPSTREAM_MAX_CONCURRENT: int(1, 10_000).optional(),
    UPSTREAM_TIMEOUT_MS: int(100, 300_000).default(30_000),
    UPSTREAM_MAX_BODY_BYTES: byteSize(1024, 1024 ** 3).default(8 * 1024 * 1024),
    RELAY_ENCRYPTION_KEY: encryptionKey.optional(),
    TASK_RETENTION_DAYS: int(1, 36_500).default(30),
    CLIENT_MAX_STORED_BYTES: byteSize(1024 ** 2, 1024 ** 4).default(1024 ** 3),
    LOG_LEVEL: z.enum(LOG_LEVELS, { error: `must be one of ${LOG_LEVELS.join(", ")}` }).default("info"),
    PUBLIC_BASE_URL: publicBaseUrl.optional(),
    METRICS_TOKEN: bearerToken.optional(),
    STREAM_CORS_ORIGINS: corsOrigins.default([]),
    MIRROR_MAX_BYTES: int(1, Number.MAX_SAFE_INTEGER).default(1024 ** 3),
    LEADER_LEASE: duration(500, 10 * 60_000).default(20_000),
    DATABASE_FAILOVER_TIMEOUT: duration(1_000, 60 * 60_000).default(30_000),
    SANDBOX: bool.optional(),
  })
  .superRefine((env, ctx) => {
    if (env.UPSTREAM_BASE_URL && !env.UPSTREAM_API_KEY) {
      ctx.addIssue({
        code: "custom",
        path: ["UPSTREAM_API_KEY"],
        message: "is required when UPSTREAM_BASE_URL is set",
      });
    }
  });

type Env = z.output<typeof EnvSchema>;

export interface Config {
  port: number;
  host: string;
  databasePath: string;
  /** PostgreSQL connection URL (several instances share it); null: the SQLite file at databasePath. */
  databaseUrl: string | null;
  /** null: sandbox mode, the built-in simulator plays the upstream. */
  upstreamBaseUrl: string | null;
  upstreamApiKey: string | null;
  upstreamReadsPerMinute: number;
  upstreamMaxConcurrent: number | null;
  /** One upstream request's whole time limit; worker leases outlast it. */
  upstreamTimeoutMs: number;
  /** Largest upstream response body read; a longer one is refused while it streams. */
  upstreamMaxBodyBytes: number;
  webhookAllowPrivateNetworks: boolean;
  webhookTimeoutMs: number;
  /** Delivery attempts in flight to one destination host at once. */
  webhookMaxInFlightPerHost: number;
  /** Delivery attempts in flight in all, shared fairly among the clients with due deliveries. */
  webhookMaxInFlight: number;
  /** How long a callback host answers no 2xx before its client gets an endpoint.failing notice. */
  webhookFailingNoticeAfterMs: number;
  webhookRetryScheduleMs: number[];
  encryptionKey: Buffer | null;
  taskRetentionDays: number;
  logLevel: (typeof LOG_LEVELS)[number];
  /** Base of the absolute URLs the relay hands out (no trailing slash); null: built from the request. */
  publicBaseUrl: string | null;
  /** null: /metrics is open (keep it off the public internet). */
  metricsToken: string | null;
  /** Browser origins that may read the event streams (CORS on those routes only); empty: none. */
  streamCorsOrigins: string[];
  /** Largest output file copied into a client's bucket (docs/contract.md, "Outputs"); a larger one gets files[i].error. */
  mirrorMaxBytes: number;
  /** The most one client's tasks may store from their requests (bytes); a creation past it is 429 storage_limit (docs/contract.md, "Bounded requests"). */
  clientMaxStoredBytes: number;
  /**
   * PostgreSQL: how long an upstream account's leadership lasts unrenewed. An instance that stops
   * making progress loses it after this long and another takes over (docs/contract.md, "A frozen instance loses its roles").
   */
  leaderLeaseMs: number;
  /**
   * PostgreSQL with several hosts in DATABASE_URL: how long the relay looks for the writable one
   * (503 storage_unavailable meanwhile) before it logs an error, and how long it waits at start
   * while some host does not answer (docs/operations.md, "PostgreSQL failover").
   */
  databaseFailoverTimeoutMs: number;
}

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(problems.join("\n"));
    this.name = "ConfigError";
  }
}

/** Parses the environment once. Throws ConfigError with one line per bad variable. */
export function loadConfig(env: Record<string, string | undefined>): Config {
  // An empty variable means "unset", as in most twelve-factor tooling.
  const cleaned = Object.fromEntries(Object.keys(EnvSchema.shape).map((k) => [k, env[k] === "" ? undefined : env[k]]));
  const result = EnvSchema.safeParse(cleaned);
  if (!result.success) {
    const problems = result.error.issues.map((issue) => {
      const name = String(issue.path[0] ?? "environment");
      const value = cleaned[name];
      const shown = value === undefined || /KEY|SECRET|TOKEN/.test(name) ? "" : ` (got "${value}")`;
      return `invalid environment variable ${name}: ${issue.message}${shown}`;
    });
    throw new ConfigError(problems);
  }
  return toConfig(result.data);
}

/**
 * Sandbox mode in production is a mistake unless said on purpose (docs/contract.md, "Intake"): the one line that
 * refuses to start, or null. Checked by the server only (the CLI needs no upstream).
 */
export function sandboxRefusal(
  env: Record<string, string | undefined>,
  config: Pick<Config, "upstreamBaseUrl">,
): string | null {
  if (env.NODE_ENV !== "production" || config.upstreamBaseUrl) return null;
  if (bool.safeParse(env.SANDBOX ?? "false").data === true) return null;
  return "NODE_ENV=production but UPSTREAM_BASE_URL is not set: refusing to serve simulated results (set UPSTREAM_BASE_URL and UPSTREAM_API_KEY, or SANDBOX=true to run the sandbox on purpose)";
}

function toConfig(env: Env): Config {
  return {
    port: env.PORT,
    host: env.HOST,
    databasePath: env.DATABASE_PATH,
    databaseUrl: env.DATABASE_URL ?? null,
    upstreamBaseUrl: env.UPSTREAM_BASE_URL ?? null,
    upstreamApiKey: env.UPSTREAM_API_KEY ?? null,
    upstreamReadsPerMinute: env.UPSTREAM_READS_PER_MINUTE,
    upstreamMaxConcurrent: env.UPSTREAM_MAX_CONCURRENT ?? null,
    upstreamTimeoutMs: env.UPSTREAM_TIMEOUT_MS,
    upstreamMaxBodyBytes: env.UPSTREAM_MAX_BODY_BYTES,
    webhookAllowPrivateNetworks: env.WEBHOOK_ALLOW_PRIVATE_NETWORKS,
    webhookTimeoutMs: env.WEBHOOK_TIMEOUT_MS,
    webhookMaxInFlightPerHost: env.WEBHOOK_MAX_IN_FLIGHT_PER_HOST,
    webhookMaxInFlight: env.WEBHOOK_MAX_IN_FLIGHT,
    webhookFailingNoticeAfterMs: env.WEBHOOK_FAILING_NOTICE_AFTER,
    webhookRetryScheduleMs: env.WEBHOOK_RETRY_SCHEDULE,
    encryptionKey: env.RELAY_ENCRYPTION_KEY ?? null,
    taskRetentionDays: env.TASK_RETENTION_DAYS,
    logLevel: env.LOG_LEVEL,
    publicBaseUrl: env.PUBLIC_BASE_URL ?? null,
    metricsToken: env.METRICS_TOKEN ?? null,
    streamCorsOrigins: env.STREAM_CORS_ORIGINS,
    mirrorMaxBytes: env.MIRROR_MAX_BYTES,
    clientMaxStoredBytes: env.CLIENT_MAX_STORED_BYTES,
    leaderLeaseMs: env.LEADER_LEASE,
    databaseFailoverTimeoutMs: env.DATABASE_FAILOVER_TIMEOUT,
  };
}

/**
 * Whether to trace (docs/operations.md, "Tracing"). The OpenTelemetry SDK reads its OTEL_* variables
 * itself; this only decides on or off, and off is the default: an operator turns tracing on by naming
 * an exporter (`OTEL_TRACES_EXPORTER`, not `none`) or where to send spans (`OTEL_EXPORTER_OTLP_ENDPOINT`
 * or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`); `OTEL_SDK_DISABLED=true` keeps it off whatever else is set.
 */
export function tracingEnabled(env: Record<string, string | undefined>): boolean {
  const set = (name: string) => (env[name] ?? "").trim() !== "";
  if ((env.OTEL_SDK_DISABLED ?? "").trim().toLowerCase() === "true") return false;
  const exporters = (env.OTEL_TRACES_EXPORTER ?? "").split(",").map((e) => e.trim().toLowerCase());
  if (exporters.includes("none")) return false;
  if (exporters.some((e) => e !== "")) return true;
  return set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
}
