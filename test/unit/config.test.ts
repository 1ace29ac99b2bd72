import { describe, expect, it } from "vitest";
import { ConfigError, loadConfig, type Config } from "../../src/config.js";
import { parseDuration, parseSchedule } from "../../src/duration.js";

/** The lines of the ConfigError that loadConfig throws for this environment. */
function problems(env: Record<string, string | undefined>): string[] {
  try {
    loadConfig(env);
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    const e = err as ConfigError;
    expect(e.message).toBe(e.problems.join("\n"));
    return e.problems;
  }
  throw new Error(`expected ${JSON.stringify(env)} to be refused`);
}

const KEY32 = Buffer.alloc(32, 7).toString("base64");

describe("loadConfig defaults", () => {
  it("gives the documented defaults for an empty environment (sandbox mode)", () => {
    expect(loadConfig({})).toEqual({
      port: 8080,
      host: "127.0.0.1",
      databasePath: "./data/genrelay.db",
      databaseUrl: null,
      upstreamBaseUrl: null,
      upstreamApiKey: null,
      upstreamReadsPerMinute: 100,
      upstreamMaxConcurrent: null,
      upstreamTimeoutMs: 30_000,
      upstreamMaxBodyBytes: 8 * 1024 * 1024,
      webhookAllowPrivateNetworks: false,
      webhookTimeoutMs: 15_000,
      webhookMaxInFlightPerHost: 8,
      webhookMaxInFlight: 64,
      webhookFailingNoticeAfterMs: 3_600_000,
      webhookRetryScheduleMs: [0, 5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000],
      encryptionKey: null,
      taskRetentionDays: 30,
      logLevel: "info",
      publicBaseUrl: null,
      metricsToken: null,
      streamCorsOrigins: [],
      mirrorMaxBytes: 1024 ** 3,
      clientMaxStoredBytes: 1024 ** 3,
      leaderLeaseMs: 20_000,
      databaseFailoverTimeoutMs: 30_000,
    } satisfies Config);
  });

  it("the default schedule is the documented string, parsed", () => {
    expect(loadConfig({}).webhookRetryScheduleMs).toEqual(parseSchedule("0s,5s,5m,30m,2h,5h,10h,10h"));
  });

  it("treats an empty variable as unset", () => {
    const env = Object.fromEntries(
      [
        "PORT",
        "HOST",
        "DATABASE_PATH",
        "UPSTREAM_BASE_URL",
        "UPSTREAM_API_KEY",
        "UPSTREAM_READS_PER_MINUTE",
        "WEBHOOK_ALLOW_PRIVATE_NETWORKS",
        "WEBHOOK_TIMEOUT_MS",
        "WEBHOOK_MAX_IN_FLIGHT_PER_HOST",
        "WEBHOOK_RETRY_SCHEDULE",
        "UPSTREAM_MAX_CONCURRENT",
        "UPSTREAM_TIMEOUT_MS",
        "RELAY_ENCRYPTION_KEY",
        "TASK_RETENTION_DAYS",
        "LOG_LEVEL",
        "PUBLIC_BASE_URL",
        "METRICS_TOKEN",
        "STREAM_CORS_ORIGINS",
      ].map((k) => [k, ""]),
    );
    expect(loadConfig(env)).toEqual(loadConfig({}));
  });

  it("ignores variables it does not know", () => {
    expect(loadConfig({ HOME: "/root", NODE_ENV: "production", PORT_X: "nope" })).toEqual(loadConfig({}));
  });

  it("reads every variable", () => {
    expect(
      loadConfig({
        PORT: "9090",
        HOST: "0.0.0.0",
        DATABASE_PATH: "/var/lib/genrelay/db.sqlite",
        DATABASE_URL: "postgres://genrelay:pw@db.internal:5432/genrelay",
        UPSTREAM_BASE_URL: "https://api.example.com/",
        UPSTREAM_API_KEY: "sk_live_x",
        UPSTREAM_READS_PER_MINUTE: "60",
        WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
        WEBHOOK_TIMEOUT_MS: "5000",
        WEBHOOK_MAX_IN_FLIGHT_PER_HOST: "3",
        WEBHOOK_MAX_IN_FLIGHT: "16",
        WEBHOOK_FAILING_NOTICE_AFTER: "30m",
        WEBHOOK_RETRY_SCHEDULE: "1s, 10s ,1m",
        UPSTREAM_MAX_CONCURRENT: "4",
        UPSTREAM_TIMEOUT_MS: "20000",
        UPSTREAM_MAX_BODY_BYTES: "512KiB",
        RELAY_ENCRYPTION_KEY: KEY32,
        TASK_RETENTION_DAYS: "7",
        LOG_LEVEL: "debug",
        PUBLIC_BASE_URL: "https://relay.example.com/genrelay/",
        METRICS_TOKEN: "prom-scrape-token-1",
        STREAM_CORS_ORIGINS: "https://app.example.com, http://localhost:5173",
        MIRROR_MAX_BYTES: "5000000",
        CLIENT_MAX_STORED_BYTES: "64MiB",
        LEADER_LEASE: "5s",
      }),
    ).toEqual({
      port: 9090,
      host: "0.0.0.0",
      databasePath: "/var/lib/genrelay/db.sqlite",
      databaseUrl: "postgres://genrelay:pw@db.internal:5432/genrelay",
      // Trailing slashes go: paths /openapi/v1/... are appended.
      upstreamBaseUrl: "https://api.example.com",
      upstreamApiKey: "sk_live_x",
      upstreamReadsPerMinute: 60,
      upstreamMaxConcurrent: 4,
      upstreamTimeoutMs: 20_000,
      upstreamMaxBodyBytes: 512 * 1024,
      webhookAllowPrivateNetworks: true,
      webhookTimeoutMs: 5000,
      webhookMaxInFlightPerHost: 3,
      webhookMaxInFlight: 16,
      webhookFailingNoticeAfterMs: 1_800_000,
      webhookRetryScheduleMs: [1_000, 10_000, 60_000],
      encryptionKey: Buffer.alloc(32, 7),
      taskRetentionDays: 7,
      logLevel: "debug",
      publicBaseUrl: "https://relay.example.com/genrelay",
      metricsToken: "prom-scrape-token-1",
      streamCorsOrigins: ["https://app.example.com", "http://localhost:5173"],
      mirrorMaxBytes: 5_000_000,
      clientMaxStoredBytes: 64 * 1024 * 1024,
      leaderLeaseMs: 5_000,
      databaseFailoverTimeoutMs: 30_000,
    } satisfies Config);
  });

  it.each([
    ["true", true],
    ["false", false],
    ["1", true],
    ["0", false],
    ["yes", true],
    ["no", false],
    ["TRUE", true],
    ["False", false],
  ])("WEBHOOK_ALLOW_PRIVATE_NETWORKS=%s is %s", (value, expected) => {
    expect(loadConfig({ WEBHOOK_ALLOW_PRIVATE_NETWORKS: value }).webhookAllowPrivateNetworks).toBe(expected);
  });

  it.each([
    ["8MiB", 8 * 1024 * 1024],
    ["512KiB", 512 * 1024],
    ["1048576", 1_048_576],
    ["2 mb", 2 * 1024 * 1024],
    ["1GiB", 1024 ** 3],
  ])("UPSTREAM_MAX_BODY_BYTES=%s is %d bytes", (value, bytes) => {
    expect(loadConfig({ UPSTREAM_MAX_BODY_BYTES: value }).upstreamMaxBodyBytes).toBe(bytes);
  });

  it("accepts every pino level", () => {
    for (const level of ["fatal", "error", "warn", "info", "debug", "trace", "silent"])
      expect(loadConfig({ LOG_LEVEL: level }).logLevel).toBe(level);
  });
});

describe("loadConfig refuses a bad variable with one line naming it", () => {
  it.each([
    ["PORT", { PORT: "http" }],
    ["PORT", { PORT: "70000" }],
    ["PORT", { PORT: "-1" }],
    ["PORT", { PORT: "80.5" }],
    ["UPSTREAM_BASE_URL", { UPSTREAM_BASE_URL: "api.example.com", UPSTREAM_API_KEY: "k" }],
    ["UPSTREAM_BASE_URL", { UPSTREAM_BASE_URL: "ftp://api.example.com", UPSTREAM_API_KEY: "k" }],
    ["UPSTREAM_API_KEY", { UPSTREAM_BASE_URL: "https://api.example.com" }],
    ["UPSTREAM_READS_PER_MINUTE", { UPSTREAM_READS_PER_MINUTE: "0" }],
    ["WEBHOOK_TIMEOUT_MS", { WEBHOOK_TIMEOUT_MS: "15s" }],
    ["WEBHOOK_RETRY_SCHEDULE", { WEBHOOK_RETRY_SCHEDULE: "5x" }],
    ["WEBHOOK_RETRY_SCHEDULE", { WEBHOOK_RETRY_SCHEDULE: "1s,,5s" }],
    ["WEBHOOK_RETRY_SCHEDULE", { WEBHOOK_RETRY_SCHEDULE: "," }],
    ["WEBHOOK_RETRY_SCHEDULE", { WEBHOOK_RETRY_SCHEDULE: "-5s" }],
    ["WEBHOOK_RETRY_SCHEDULE", { WEBHOOK_RETRY_SCHEDULE: "5 minutes" }],
    ["UPSTREAM_MAX_CONCURRENT", { UPSTREAM_MAX_CONCURRENT: "0" }],
    ["UPSTREAM_TIMEOUT_MS", { UPSTREAM_TIMEOUT_MS: "10" }],
    ["UPSTREAM_MAX_BODY_BYTES", { UPSTREAM_MAX_BODY_BYTES: "8 megs" }],
    ["UPSTREAM_MAX_BODY_BYTES", { UPSTREAM_MAX_BODY_BYTES: "1.5MiB" }],
    ["UPSTREAM_MAX_BODY_BYTES", { UPSTREAM_MAX_BODY_BYTES: "2GiB" }],
    ["RELAY_ENCRYPTION_KEY", { RELAY_ENCRYPTION_KEY: "too-short" }],
    ["RELAY_ENCRYPTION_KEY", { RELAY_ENCRYPTION_KEY: Buffer.alloc(16).toString("base64") }],
    ["RELAY_ENCRYPTION_KEY", { RELAY_ENCRYPTION_KEY: Buffer.alloc(32).toString("hex") }],
    ["TASK_RETENTION_DAYS", { TASK_RETENTION_DAYS: "0" }],
    ["LOG_LEVEL", { LOG_LEVEL: "verbose" }],
    ["WEBHOOK_ALLOW_PRIVATE_NETWORKS", { WEBHOOK_ALLOW_PRIVATE_NETWORKS: "maybe" }],
    ["PUBLIC_BASE_URL", { PUBLIC_BASE_URL: "relay.example.com" }],
    ["PUBLIC_BASE_URL", { PUBLIC_BASE_URL: "/genrelay" }],
    ["PUBLIC_BASE_URL", { PUBLIC_BASE_URL: "ftp://relay.example.com" }],
    ["PUBLIC_BASE_URL", { PUBLIC_BASE_URL: "https://relay.example.com/?x=1" }],
    ["PUBLIC_BASE_URL", { PUBLIC_BASE_URL: "https://relay.example.com/?" }],
    ["PUBLIC_BASE_URL", { PUBLIC_BASE_URL: "https://relay.example.com/#top" }],
    ["PUBLIC_BASE_URL", { PUBLIC_BASE_URL: "https://user:pw@relay.example.com" }],
    ["METRICS_TOKEN", { METRICS_TOKEN: "has a space" }],
    ["METRICS_TOKEN", { METRICS_TOKEN: "tab\tinside" }],
    ["STREAM_CORS_ORIGINS", { STREAM_CORS_ORIGINS: "app.example.com" }],
    ["STREAM_CORS_ORIGINS", { STREAM_CORS_ORIGINS: "https://app.example.com/page" }],
    ["STREAM_CORS_ORIGINS", { STREAM_CORS_ORIGINS: "https://a.example.com,*" }],
  ])("%s (%j)", (name, env) => {
    const lines = problems(env);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(new RegExp(`^invalid environment variable ${name}: \\S`));
    expect(lines[0]).not.toContain("\n");
  });

  it("shows the bad value, except for keys", () => {
    expect(problems({ PORT: "http" })).toEqual([
      'invalid environment variable PORT: must be a whole number (got "http")',
    ]);
    const [line] = problems({ RELAY_ENCRYPTION_KEY: "c2VjcmV0LWJ1dC1zaG9ydA==" });
    expect(line).toMatch(/^invalid environment variable RELAY_ENCRYPTION_KEY: must be 32 bytes/);
    expect(line).not.toContain("c2VjcmV0LWJ1dC1zaG9ydA==");
  });

  it("never shows a METRICS_TOKEN", () => {
    expect(problems({ METRICS_TOKEN: "almost secret" })).toEqual([
      "invalid environment variable METRICS_TOKEN: must be printable ASCII without spaces",
    ]);
  });

  it("lists every bad variable, one line each", () => {
    const lines = problems({
      PORT: "x",
      LOG_LEVEL: "loud",
      WEBHOOK_RETRY_SCHEDULE: "soon",
      RELAY_ENCRYPTION_KEY: "k",
      WEBHOOK_ALLOW_PRIVATE_NETWORKS: "perhaps",
      UPSTREAM_BASE_URL: "nope",
    });
    expect(lines.map((l) => /^invalid environment variable (\w+): /.exec(l)?.[1]).sort()).toEqual(
      [
        "LOG_LEVEL",
        "PORT",
        "RELAY_ENCRYPTION_KEY",
        "UPSTREAM_BASE_URL",
        "WEBHOOK_ALLOW_PRIVATE_NETWORKS",
        "WEBHOOK_RETRY_SCHEDULE",
      ].sort(),
    );
  });

  it("names UPSTREAM_API_KEY beside other problems", () => {
    const lines = problems({ UPSTREAM_BASE_URL: "https://api.example.com", PORT: "x" });
    expect(lines.map((l) => /^invalid environment variable (\w+): /.exec(l)?.[1]).sort()).toEqual([
      "PORT",
      "UPSTREAM_API_KEY",
    ]);
  });
});

describe("PUBLIC_BASE_URL", () => {
  it.each([
    ["https://relay.example.com", "https://relay.example.com"],
    ["https://relay.example.com/", "https://relay.example.com"],
    ["https://Relay.Example.com:8443//", "https://relay.example.com:8443"],
    ["http://127.0.0.1:8080/", "http://127.0.0.1:8080"],
    ["https://example.com/tools/genrelay/", "https://example.com/tools/genrelay"],
  ])("%j is kept as %j", (value, expected) => {
    expect(loadConfig({ PUBLIC_BASE_URL: value }).publicBaseUrl).toBe(expected);
  });
});

describe("schedule parsing", () => {
  it.each([
    ["0s,5s,5m,30m,2h,5h,10h,10h", [0, 5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000]],
    ["250ms", [250]],
    ["100", [100]],
    ["1.5s", [1_500]],
    [" 1s , 2m ", [1_000, 120_000]],
    ["0", [0]],
    ["1h,1h", [3_600_000, 3_600_000]],
  ])("%j → %j", (text, expected) => {
    expect(parseSchedule(text)).toEqual(expected);
    expect(loadConfig({ WEBHOOK_RETRY_SCHEDULE: text }).webhookRetryScheduleMs).toEqual(expected);
  });

  it.each(["", " ", ",", "1s,", ",1s", "1s,,2s", "5x", "-1s", "1d", "s", "1 2s", "1e3", "NaN", "Infinity"])(
    "%j is refused",
    (text) => {
      expect(parseSchedule(text)).toBeNull();
    },
  );

  it.each([
    ["5m", 300_000],
    ["5 m", 300_000],
    ["2h", 7_200_000],
    ["0.5s", 500],
    ["7ms", 7],
  ])("parseDuration(%j) = %d", (text, ms) => {
    expect(parseDuration(text)).toBe(ms);
  });
});
