import { parseArgs, type ParseArgsConfig } from "node:util";

/** Exit codes: 0 done, 1 usage error or not found, 2 bad configuration (environment, database file). */
export const EXIT_OK = 0;
export const EXIT_USAGE = 1;
export const EXIT_CONFIG = 2;

/** A command line that cannot be run as written, or a thing it names that does not exist: exit 1. */
export class UsageError extends Error {}

/** The environment or the database it points to is unusable: exit 2. */
export class ConfigProblem extends Error {}

export const HELP_WORDS = new Set(["--help", "-h", "help"]);

export function out(line: string): void {
  process.stdout.write(`${line}\n`);
}

export function iso(ms: number | null | undefined): string | null {
  return ms === null || ms === undefined ? null : new Date(ms).toISOString();
}

type Options = NonNullable<ParseArgsConfig["options"]>;

/** parseArgs with positionals allowed; its complaints (unknown option, missing value) are usage errors. */
export function parse<O extends Options>(args: string[], options: O) {
  try {
    return parseArgs({ args, allowPositionals: true, strict: true, options });
  } catch (err) {
    if (String((err as { code?: unknown }).code).startsWith("ERR_PARSE_ARGS_"))
      throw new UsageError((err as Error).message);
    throw err;
  }
}

/** At most `max` positionals: a stray word is more likely a mistake than something to ignore. */
export function positionalsAtMost(positionals: string[], max: number, command: string): void {
  if (positionals.length > max)
    throw new UsageError(`${command}: unexpected argument ${JSON.stringify(positionals[max])}`);
}

export function wholeNumber(
  value: string | undefined,
  name: string,
  range: { min: number; max: number },
): number | undefined {
  if (value === undefined) return undefined;
  if (!/^\d+$/.test(value) || Number(value) < range.min || Number(value) > range.max) {
    throw new UsageError(`--${name} must be a whole number from ${range.min} to ${range.max}`);
  }
  return Number(value);
}
