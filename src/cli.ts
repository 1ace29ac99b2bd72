#!/usr/bin/env node
import { parseArgs } from "node:util";
import { readFileSync } from "node:fs";
import { systemClock } from "./clock.js";
import { ConfigError, loadConfig, type Config } from "./config.js";
import { openDatabase, type Database_ } from "./db/open.js";
import { clientSpend } from "./db/usage.js";
import { createClient, listClients, revokeClient, rotateSecret, updateClientLimits } from "./services/clients.js";

const HELP = `genrelay CLI — uses the same DATABASE_PATH as the server, and works while it runs.

Usage: npm run cli -- <command> [options]

  clients create --name NAME [--json] [--max-waiting N] [--max-running N] [--credit-limit N]
                 [--upstream-key-env VAR | --upstream-key-stdin]
      Creates a client; prints its API key (shown once) and webhook secret.
  clients list [--json]                 Lists clients (never their keys).
  clients update ID [--name NAME] [--max-waiting N|none] [--max-running N|none] [--credit-limit N|none]
  clients revoke ID                     Revokes the client's API key at once.
  clients rotate-secret ID [--json]     New webhook secret; the old one signs beside it for 24 hours.

Options: --help on any command.`;

class UsageError extends Error {}

function out(line: string): void {
  process.stdout.write(`${line}\n`);
}

function limitArg(value: string | undefined, name: string): number | null | undefined {
  if (value === undefined) return undefined;
  if (value === "none") return null;
  if (!/^\d+$/.test(value)) throw new UsageError(`--${name} must be a whole number or "none"`);
  return Number(value);
}

function readUpstreamKey(values: { "upstream-key-env"?: string | undefined; "upstream-key-stdin"?: boolean | undefined }, env: NodeJS.ProcessEnv): string | null {
  if (values["upstream-key-env"]) {
    const key = env[values["upstream-key-env"]];
    if (!key) throw new UsageError(`environment variable ${values["upstream-key-env"]} is empty or unset`);
    return key.trim();
  }
  if (values["upstream-key-stdin"]) {
    const key = readFileSync(0, "utf8").trim();
    if (!key) throw new UsageError("no upstream key on standard input");
    return key;
  }
  return null;
}

const HELP_WORDS = new Set(["--help", "-h", "help"]);

function clientsCommand(args: string[], database: Database_, config: Config): number {
  const [sub, ...rest] = args;
  // `clients --help` asks for help; it is not a subcommand called "--help".
  if (sub !== undefined && HELP_WORDS.has(sub)) {
    out(HELP);
    return 0;
  }
  const { values, positionals } = parseArgs({
    args: rest,
    allowPositionals: true,
    options: {
      name: { type: "string" },
      json: { type: "boolean" },
      help: { type: "boolean", short: "h" },
      "max-waiting": { type: "string" },
      "max-running": { type: "string" },
      "credit-limit": { type: "string" },
      "upstream-key-env": { type: "string" },
      "upstream-key-stdin": { type: "boolean" },
    },
  });
  if (values.help || !sub) {
    out(HELP);
    return sub ? 0 : 1;
  }
  const { db } = database;
  switch (sub) {
    case "create": {
      if (!values.name?.trim()) throw new UsageError("clients create needs --name NAME");
      const upstreamKey = readUpstreamKey(values, process.env);
      if (upstreamKey && !config.encryptionKey) throw new UsageError("set RELAY_ENCRYPTION_KEY (32 bytes, base64) to store a client's own upstream key");
      const { client, apiKey } = createClient(db, systemClock, {
        name: values.name.trim(),
        upstreamKey,
        encryptionKey: config.encryptionKey,
        maxWaiting: limitArg(values["max-waiting"], "max-waiting") ?? null,
        maxRunning: limitArg(values["max-running"], "max-running") ?? null,
        creditLimit: limitArg(values["credit-limit"], "credit-limit") ?? null,
      });
      if (values.json) {
        out(JSON.stringify({ id: client.id, name: client.name, api_key: apiKey, webhook_secret: client.webhookSecret }));
      } else {
        out(`created client ${client.id} (${client.name})`);
        out(`api key:        ${apiKey}`);
        out(`webhook secret: ${client.webhookSecret}`);
        out("The API key is shown only now: store it safely.");
      }
      return 0;
    }
    case "list": {
      const rows = listClients(db).map((c) => ({
        id: c.id,
        name: c.name,
        key_prefix: `${c.apiKeyPrefix}…`,
        status: c.revokedAt === null ? "active" : "revoked",
        upstream_account: c.upstreamAccount,
        max_waiting: c.maxWaiting,
        max_running: c.maxRunning,
        credit_limit: c.creditLimit,
        points_spent: clientSpend(db, c.id),
        created_at: new Date(c.createdAt).toISOString(),
      }));
      if (values.json) out(JSON.stringify(rows));
      else if (rows.length === 0) out("no clients yet: npm run cli -- clients create --name NAME");
      else for (const r of rows) out(`${r.id}  ${r.status.padEnd(7)}  ${r.key_prefix}  spent=${r.points_spent}${r.credit_limit !== null ? `/${r.credit_limit}` : ""}  ${r.name}`);
      return 0;
    }
    case "update": {
      const id = positionals[0];
      if (!id) throw new UsageError("clients update needs a client id");
      const updated = updateClientLimits(db, id, {
        ...(values.name ? { name: values.name } : {}),
        maxWaiting: limitArg(values["max-waiting"], "max-waiting"),
        maxRunning: limitArg(values["max-running"], "max-running"),
        creditLimit: limitArg(values["credit-limit"], "credit-limit"),
      });
      if (!updated) throw new UsageError(`no client ${id}`);
      out(`updated ${updated.id}: max_waiting=${updated.maxWaiting ?? "none"} max_running=${updated.maxRunning ?? "none"} credit_limit=${updated.creditLimit ?? "none"}`);
      return 0;
    }
    case "revoke": {
      const id = positionals[0];
      if (!id) throw new UsageError("clients revoke needs a client id");
      const revoked = revokeClient(db, systemClock, id);
      if (!revoked) throw new UsageError(`no client ${id}`);
      out(`revoked ${revoked.id}: its API key is refused from now on`);
      return 0;
    }
    case "rotate-secret": {
      const id = positionals[0];
      if (!id) throw new UsageError("clients rotate-secret needs a client id");
      const rotated = rotateSecret(db, systemClock, id);
      if (!rotated) throw new UsageError(`no client ${id}`);
      const expires = new Date(rotated.previousExpiresAt).toISOString();
      if (values.json) out(JSON.stringify({ id, webhook_secret: rotated.secret, previous_secret_expires_at: expires }));
      else {
        out(`new webhook secret: ${rotated.secret}`);
        out(`the previous secret keeps signing beside it until ${expires}`);
      }
      return 0;
    }
    default:
      throw new UsageError(`unknown command: clients ${sub}`);
  }
}

export function runCli(argv: string[]): number {
  const [group, ...rest] = argv;
  if (!group || HELP_WORDS.has(group)) {
    out(HELP);
    return group ? 0 : 1;
  }
  let config: Config;
  try {
    config = loadConfig(process.env);
  } catch (err) {
    if (err instanceof ConfigError) {
      for (const line of err.problems) process.stderr.write(`genrelay: ${line}\n`);
      return 2;
    }
    throw err;
  }
  const database = openDatabase(config.databasePath);
  try {
    switch (group) {
      case "clients":
        return clientsCommand(rest, database, config);
      default:
        throw new UsageError(`unknown command: ${group}`);
    }
  } catch (err) {
    // Every parseArgs complaint (unknown option, missing value, stray argument) is a usage error too.
    if (err instanceof UsageError || String((err as { code?: unknown }).code).startsWith("ERR_PARSE_ARGS_")) {
      process.stderr.write(`genrelay: ${(err as Error).message}\nRun with --help for usage.\n`);
      return 1;
    }
    throw err;
  } finally {
    database.close();
  }
}

process.exitCode = runCli(process.argv.slice(2));
