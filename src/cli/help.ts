/** Usage texts: the top-level overview, and one entry per subcommand for `<group> <sub> --help`. */

interface CommandHelp {
  usage: string;
  summary: string;
  /** More lines shown by the subcommand's own --help. */
  details?: string;
}

export const COMMANDS: Record<string, { summary: string; commands: Record<string, CommandHelp> }> = {
  clients: {
    summary: "API clients: keys, webhook secrets and limits.",
    commands: {
      create: {
        usage:
          "clients create --name NAME [--json] [--max-waiting N] [--max-running N] [--credit-limit N]\n                 [--upstream-key-env VAR | --upstream-key-stdin]",
        summary: "Creates a client; prints its API key (shown once) and webhook secret.",
        details: `--json prints one object {"id","name","api_key","webhook_secret"}. The API key is stored only as a
hash: keep it now. --upstream-key-env/--upstream-key-stdin give the client its own upstream account
(the key is encrypted with RELAY_ENCRYPTION_KEY, which must be set).`,
      },
      list: { usage: "clients list [--json]", summary: "Lists clients (never their keys or secrets)." },
      update: {
        usage:
          "clients update ID [--name NAME] [--max-waiting N|none] [--max-running N|none] [--credit-limit N|none] [--notification-url URL|none] [--callback-header NAME=VALUE]... [--clear-callback-headers] [--signature hmac|ed25519] [--json]",
        summary:
          "Changes a client's name, limits or webhook settings (as PUT /openapi/v1/webhooks/settings); `none` removes a limit or the notification URL. --callback-header (repeatable) replaces the default callback headers; only their names are ever printed.",
      },
      revoke: { usage: "clients revoke ID", summary: "Revokes the client's API key at once." },
      "rotate-secret": {
        usage: "clients rotate-secret ID [--json]",
        summary: "New webhook secret; the old one signs beside it for 24 hours.",
      },
      storage: {
        usage:
          "clients storage ID [--json] | --clear |\n                 --endpoint URL --bucket B --region R [--prefix P] --access-key-id K (--secret-key-env VAR | --secret-key-stdin)\n                 [--force-path-style] [--public-base-url URL] [--url-expires-in SECONDS]",
        summary: "Shows, sets or removes the client's bucket: outputs are copied into it before task.succeeded.",
        details: `The same as PUT/GET/DELETE /openapi/v1/storage. The secret access key is read from an environment\nvariable or standard input (never the command line) and sealed with RELAY_ENCRYPTION_KEY, which must be set;\nit is never shown again. The endpoint passes the callback URL checks (loopback only with\nWEBHOOK_ALLOW_PRIVATE_NETWORKS=true). Objects go to <prefix><task_id>/<n><ext>.`,
      },
    },
  },
  db: {
    summary: "The SQLite database: online backups and statistics.",
    commands: {
      backup: {
        usage: "db backup FILE [--force] [--json]",
        summary: "Copies the database to FILE, consistently, while the server keeps running.",
        details: `Uses SQLite's online backup API: the copy is the database as of one moment, writers are not
blocked, and the copy is checked (PRAGMA quick_check) before it is put in place. An existing FILE is
never replaced unless --force is given. The copy is a single self-contained file.
To restore: stop the server, replace DATABASE_PATH with the copy (and delete DATABASE_PATH-wal and
DATABASE_PATH-shm if present), start the server.`,
      },
      stats: {
        usage: "db stats [--json]",
        summary: "Row counts per table, tasks by status, pending/failed deliveries, file sizes.",
      },
    },
  },
  tasks: {
    summary: "Support: look at tasks across every client, and cancel unsubmitted ones.",
    commands: {
      list: {
        usage: "tasks list [--client ID] [--status S] [--limit N] [--json]",
        summary: "Lists tasks, newest first (default limit 20, at most 1000).",
        details: "S is one of queued, processing, succeeded, failed, canceled.",
      },
      show: {
        usage: "tasks show ID [--json]",
        summary: "Shows one task (by relay task id or upstream task id) with its events and delivery attempts.",
        details: "Never shows the client's API key or webhook secret.",
      },
      cancel: {
        usage: "tasks cancel ID",
        summary:
          "Cancels any client's task not yet submitted upstream (never charged); its task.canceled webhook follows.",
        details: "A task already offered upstream cannot be canceled (the upstream has no cancel): exit 1.",
      },
    },
  },
};

export function overview(): string {
  const lines = [
    "genrelay CLI — uses the same DATABASE_PATH as the server, and works while it runs.",
    "",
    "Usage: npm run cli -- <command> [options]      (or: node dist/cli.js <command> [options])",
  ];
  for (const group of Object.values(COMMANDS)) {
    lines.push("");
    for (const cmd of Object.values(group.commands)) {
      lines.push(`  ${cmd.usage}`, `      ${cmd.summary}`);
    }
  }
  lines.push(
    "",
    "Options: --help on any command or subcommand.",
    "Exit codes: 0 done, 1 usage error or not found, 2 bad configuration (environment or database file).",
  );
  return lines.join("\n");
}

export function groupHelp(group: string): string {
  const g = COMMANDS[group]!;
  const lines = [`genrelay ${group} — ${g.summary}`, "", "Usage: npm run cli -- <command> [options]", ""];
  for (const cmd of Object.values(g.commands)) lines.push(`  ${cmd.usage}`, `      ${cmd.summary}`);
  return lines.join("\n");
}

/** The subcommand in detail, then the rest of its group. */
export function commandHelp(group: string, sub: string): string {
  const g = COMMANDS[group]!;
  const cmd = g.commands[sub];
  if (!cmd) return groupHelp(group);
  const lines = [`Usage: npm run cli -- ${cmd.usage}`, "", cmd.summary];
  if (cmd.details) lines.push("", cmd.details);
  const others = Object.entries(g.commands).filter(([name]) => name !== sub);
  if (others.length > 0) {
    lines.push("", `Other ${group} commands:`);
    for (const [, other] of others) lines.push(`  ${other.usage}`);
  }
  return lines.join("\n");
}
