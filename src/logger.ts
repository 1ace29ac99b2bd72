import { pino, type Logger, type LevelWithSilent } from "pino";
import { telemetry } from "./telemetry/index.js";

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
 * file or pipe that is slow to take them would otherwise stall every request). pino writes what is
 * still buffered when the process exits.
 */
export function createLogger(level: LevelWithSilent = "info", destination?: pino.DestinationStream): Logger {
  return pino(
    {
      level,
      base: { service: "genrelay" },
      timestamp: pino.stdTimeFunctions.isoTime,
      redact: { paths: REDACT, censor: "[redacted]" },
      formatters: { level: (label) => ({ level: label }) },
      // `trace_id`/`span_id` of the span a line is written under (tracing on); nothing when off.
      mixin: () => telemetry().logFields(),
    },
    destination ?? pino.destination({ dest: 1, sync: false }),
  );
}

export const silentLogger: Logger = pino({ level: "silent" });
