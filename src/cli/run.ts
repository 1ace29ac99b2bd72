import { existsSync } from "node:fs";
import { ConfigError, loadConfig, type Config } from "../config.js";
import { meantField } from "../services/intake-fields.js";
import { openDatabase, type Database_ } from "../db/sqlite/open.js";
import { pgConnectProblem } from "../db/pg/connect-errors.js";
import { pgStore, sqliteStore } from "../open-store.js";
import type { Store } from "../store/store.js";
import { runClients } from "./clients.js";
import { ConfigProblem, EXIT_CONFIG, EXIT_OK, EXIT_USAGE, HELP_WORDS, UsageError } from "./common.js";
import type { CliContext } from "./context.js";
import { runDb } from "./db.js";
import { COMMANDS, commandHelp, groupHelp, overview } from "./help.js";
import { runTasks } from "./tasks.js";

const HANDLERS: Record<string, (sub: string, args: string[], ctx: CliContext) => number | Promise<number>> = {
  clients: runClients,
  db: runDb,
  tasks: runTasks,
};

/** `unknown command: clients craete (did you mean "create"?)`: a typo names the command it was most likely meant as. */
function unknownCommand(typed: string, prefix: string, known: string[]): number {
  const meant = meantField(typed, known);
  return fail(`unknown command: ${prefix}${typed}${meant ? ` (did you mean "${prefix}${meant}"?)` : ""}`, EXIT_USAGE);
}

function fail(message: string, code: number, hint = true): number {
  process.stderr.write(`genrelay: ${message}\n${hint ? "Run with --help for usage.\n" : ""}`);
  return code;
}

/**
 * Runs one CLI command and returns its exit code: 0 done, 1 usage error or not found, 2 bad
 * configuration. Help never needs the environment or the database.
 */
export async function runCli(argv: string[], env: NodeJS.ProcessEnv = process.env): Promise<number> {
  const [group, sub, ...rest] = argv;
  if (!group || HELP_WORDS.has(group)) {
    if (!group) {
      process.stderr.write(`${overview()}\n`);
      return EXIT_USAGE;
    }
    process.stdout.write(`${overview()}\n`);
    return EXIT_OK;
  }
  const handler = HANDLERS[group];
  if (!handler || !COMMANDS[group]) return unknownCommand(group, "", Object.keys(HANDLERS));
  if (!sub) {
    process.stderr.write(`${groupHelp(group)}\n`);
    return EXIT_USAGE;
  }
  if (HELP_WORDS.has(sub)) {
    process.stdout.write(`${groupHelp(group)}\n`);
    return EXIT_OK;
  }
  if (!COMMANDS[group].commands[sub]) return unknownCommand(sub, `${group} `, Object.keys(COMMANDS[group].commands));
  if (rest.includes("--help") || rest.includes("-h")) {
    process.stdout.write(`${commandHelp(group, sub)}\n`);
    return EXIT_OK;
  }

  let config: Config;
  try {
    config = loadConfig(env);
  } catch (err) {
    if (err instanceof ConfigError) {
      for (const line of err.problems) process.stderr.write(`genrelay: ${line}\n`);
      return EXIT_CONFIG;
    }
    throw err;
  }

  let database: Database_ | null = null;
  let store: Store | null = null;
  const ctx: CliContext = {
    config,
    env,
    open(opts = {}) {
      if (database) return database;
      const path = config.databasePath;
      if (opts.mustExist && path !== ":memory:" && !path.startsWith("file:") && !existsSync(path)) {
        throw new ConfigProblem(`no database at ${path}: set DATABASE_PATH to the server's database file`);
      }
      try {
        database = openDatabase(path, { migrate: opts.migrate !== false });
      } catch (err) {
        throw new ConfigProblem(`cannot open the database at ${path}: ${(err as Error).message}`);
      }
      return database;
    },
    async store(opts = {}) {
      if (config.databaseUrl) {
        try {
          store ??= await pgStore(config.databaseUrl);
        } catch (err) {
          throw new ConfigProblem(
            pgConnectProblem(err, config.databaseUrl, env) ??
              `cannot open the database at DATABASE_URL: ${(err as Error).message}`,
          );
        }
        return store;
      }
      return sqliteStore(ctx.open(opts));
    },
  };
  try {
    return await handler(sub, rest, ctx);
  } catch (err) {
    if (err instanceof UsageError) return fail(err.message, EXIT_USAGE);
    if (err instanceof ConfigProblem) return fail(err.message, EXIT_CONFIG, false);
    // A bug or an environment failure (disk full, permissions): one line, not a stack trace.
    return fail(`${group} ${sub} failed: ${err instanceof Error ? err.message : String(err)}`, EXIT_USAGE, false);
  } finally {
    (database as Database_ | null)?.close();
    await (store as Store | null)?.close();
  }
}
