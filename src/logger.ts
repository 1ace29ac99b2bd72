import { pino, type Logger, type LevelWithSilent } from "pino";
import { telemetry } from "./telemetry/index.js";

// The one re-export kept on purpose: every layer takes its Logger type from here, so pino is named in this file only.
export type { Logger };

/**
 * Paths that may carry a credential anywhere in a log object. pino replaces them
 * before serialisation, so a careless `log.info({ headers })` cannot leak a key.
 */
const REDACT = [
  "authorization",
  "*.authorization",
  "headers.authorization",
  "*.headers.authorization",
  "api_key",
  "*.api_key",
  "apiKey",
  "*.apiKey",
  "secret",
  "*.secret",
  "webhook_secret",
  "*.webhook_secret",
  "upstreamApiKey",
  "*.upstreamApiKey",
  "key",
  "*.key",
];

/**
 * Without a destination, lines go to stdout written asynchronously: a busy relay writes the lines
 * of many requests in one write, off the event loop, instead of one blocking write per line (a
 * file or pipe that is slow to take them would otherwise stall every request). Lines are gathered
 * up to LOG_WRITE_BYTES before a write, and whatever is gathered is written every LOG_FLUSH_MS: one
 * write for some twenty request lines rather than one each (a write and its callback cost about as
 * much as building the line). pino writes what is still buffered when the process exits.
 */
/** Bytes of lines gathered before stdout is written (sonic-boom's minLength; below its 16 KiB maxWrite). */
export const LOG_WRITE_BYTES = 4096;
/** The longest a line waits for LOG_WRITE_BYTES to gather before it is written all the same (ms). */
export const LOG_FLUSH_MS = 50;

/** The default destinations made so far: writeLogsNow writes what they hold. */
const gathering = new Set<{ flushSync(): void }>();

/** The default destination's writer on a file descriptor (stdout: 1), as described above. */
export function logDestination(fd: number): pino.DestinationStream {
  const destination = pino.destination({
    dest: fd,
    sync: false,
    minLength: LOG_WRITE_BYTES,
    periodicFlush: LOG_FLUSH_MS,
  });
  gathering.add(destination);
  return destination;
}

/**
 * Writes the lines the default destinations still hold, before the process says something on
 * stderr and exits: a reader of both streams sees the log lines first, in the order they happened.
 */
export function writeLogsNow(): void {
  for (const destination of gathering) destination.flushSync();
}

export function createLogger(level: LevelWithSilent = "info", destination?: pino.DestinationStream): Logger {
  const logger = pino(
    {
      level,
      base: { service: "genrelay" },
      timestamp: pino.stdTimeFunctions.isoTime,
      redact: { paths: REDACT, censor: "[redacted]" },
      formatters: { level: (label) => ({ level: label }) },
      // `trace_id`/`span_id` of the span a line is written under (tracing on); nothing when off.
      mixin: () => telemetry().logFields(),
    },
    destination ?? logDestination(1),
  );
  houseFormat.add(logger);
  return logger;
}

/** Loggers made by createLogger: their lines' format is known (requestLines writes it by hand). */
const houseFormat = new WeakSet<Logger>();

export const silentLogger: Logger = pino({ level: "silent" });

/** The fields of the one line per request (docs/operations.md, "Logs"). */
export interface RequestLine {
  request_id?: string | undefined;
  method: string;
  path: string;
  status: number;
  ms: number;
  client_id?: string | undefined;
}

type LineLevel = "info" | "warn" | "error";

/** `,"name":"value"`, or nothing for undefined (pino leaves an undefined field out). */
const text = (name: string, value: string | undefined) =>
  value === undefined ? "" : `,"${name}":${JSON.stringify(value)}`;

/**
 * Writes the request line as `logger` would (`logger[level](line, "request")`, the same bytes but
 * the time), built by hand: its fields are fixed and hold no credential, so pino's redaction pass,
 * mixin and generic serialisation are left out. Measured against pino writing the same line on a
 * child without redaction (`node bench/log-line.mjs 11`: 200,000 lines to a file per run, every
 * thread's CPU), this is the cheaper of the two in 10 of 11 paired runs, 8.0 against 9.5 µs a line
 * (load 15): about 1.4 µs of a creation's 280, so it stays.
 */
export function requestLines(logger: Logger): (level: LineLevel, line: RequestLine) => void {
  return fixedLines<RequestLine>(
    logger,
    "request",
    (line) =>
      `${text("request_id", line.request_id)},"method":${JSON.stringify(line.method)},"path":${JSON.stringify(line.path)},"status":${line.status},"ms":${line.ms}${text("client_id", line.client_id)}`,
  );
}

/** The fields of the one line per delivery attempt (docs/operations.md, "Logs"): ids, status, latency, outcome. */
export interface AttemptLine {
  event_id: string;
  destination: string;
  task_id: string | null;
  client_id: string;
  type: string;
  attempt: number;
  status_code: number | null;
  latency_ms: number;
  outcome: string;
  error?: string | undefined;
  /** The ids of the `traceparent` the attempt carried. */
  trace_id?: string | undefined;
  span_id?: string | undefined;
}

/** A number as pino writes it: null when not finite. */
const num = (value: number | null) => (value !== null && Number.isFinite(value) ? String(value) : "null");
/** A string or null as JSON. */
const str = (value: string | null) => (value === null ? "null" : JSON.stringify(value));

/**
 * Writes the attempt line (`"webhook attempt"`) as requestLines writes the request line: by hand,
 * the bytes pino would write but the time, at the prototype's cost (issue #43: pino's generic
 * serialisation and mixin were 5–8 µs of an attempt's line, its redaction pass 25 µs before
 * fixedFieldsLogger). No field is a secret; an error message never holds header values (sender.ts).
 */
export function attemptLines(logger: Logger): (level: LineLevel, line: AttemptLine) => void {
  return fixedLines<AttemptLine>(
    logger,
    "webhook attempt",
    (line) =>
      `,"event_id":${JSON.stringify(line.event_id)},"destination":${JSON.stringify(line.destination)},"task_id":${str(line.task_id)},"client_id":${JSON.stringify(line.client_id)},"type":${JSON.stringify(line.type)},"attempt":${num(line.attempt)},"status_code":${num(line.status_code)},"latency_ms":${num(line.latency_ms)},"outcome":${JSON.stringify(line.outcome)}${text("error", line.error)}${text("trace_id", line.trace_id)}${text("span_id", line.span_id)}`,
  );
}

/**
 * A line of fixed fields written by hand: `fields` gives them as JSON, each after a comma. Through
 * pino (a child without redaction) instead while tracing is on, whose mixin adds the span's ids,
 * and for every logger createLogger did not make (its format is not known here).
 */
function fixedLines<T extends object>(
  logger: Logger,
  msg: string,
  fields: (line: T) => string,
): (level: LineLevel, line: T) => void {
  const viaPino = fixedFieldsLogger(logger);
  const symbols = pino.symbols as unknown as { streamSym: symbol; chindingsSym: symbol };
  const target = logger as unknown as Record<symbol, unknown>;
  const stream = target[symbols.streamSym] as { write(line: string): unknown };
  const bindings = target[symbols.chindingsSym] as string;
  const byHand = houseFormat.has(logger);
  const end = `,"msg":${JSON.stringify(msg)}}\n`;
  return (level, line) => {
    if (!logger.isLevelEnabled(level)) return;
    if (!byHand || telemetry().on) {
      viaPino[level](line as Record<string, unknown>, msg);
      return;
    }
    stream.write(`{"level":"${level}","time":"${new Date().toISOString()}"${bindings}${fields(line)}${end}`);
  };
}

/**
 * The same logger (destination, level, base and trace fields) without pino's redaction pass, for a
 * hot line whose fields are fixed and named by its caller, none of them a path REDACT names (the
 * delivery attempt's line: ids, status, latency, outcome). The pass walks every wildcard path on
 * every line (about 25 µs of the attempt line's 36, measured in-process); a line that could carry
 * a caller's object (headers, an error's context) keeps the redacting logger.
 */
export function fixedFieldsLogger(logger: Logger): Logger {
  return logger.child({}, { redact: [] });
}
