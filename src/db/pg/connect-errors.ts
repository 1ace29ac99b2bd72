import { type PgHost, parsePgUrl, showHost } from "./hosts.js";

/**
 * Why the relay (or the CLI) could not open DATABASE_URL, as one line that names the variable and
 * what to check, instead of node-postgres's own words (`SASL: SCRAM-SERVER-FIRST-MESSAGE: client
 * password must be a string`, a bare `ECONNREFUSED`). Null for an error that is not about
 * connecting: the caller shows it as it is.
 */
export function pgConnectProblem(err: unknown, url: string, env: { PGPASSWORD?: string } = {}): string | null {
  const address = parsePgUrl(url);
  const e = (err instanceof AggregateError ? err.errors[0] : err) as
    | { code?: string; message?: string; address?: string; port?: number }
    | undefined;
  const message = e?.message ?? String(err);
  if ((e as { noWritableHost?: boolean } | undefined)?.noWritableHost) return message;
  const code = e?.code;
  // The host the failing connection went to, when the error says; else the URL's (first) host.
  const host: PgHost =
    e?.address && e.port ? { host: e.address, port: e.port } : (address.hosts[0] ?? { host: "?", port: 5432 });
  const where = `PostgreSQL at ${showHost(host)} (DATABASE_URL)`;
  const noPassword = !address.password && !env.PGPASSWORD;
  // Without a password node-postgres fails inside SCRAM in its own words; md5 servers answer 28P01.
  if (/client password must be a (non-empty )?string/.test(message) || (noPassword && code === "28P01"))
    return `DATABASE_URL has no password, but ${where} asks for one: write it into the URL (postgres://${address.user || "USER"}:PASSWORD@${showHost(host)}/${address.database || "DATABASE"}, percent-encoded) or set PGPASSWORD`;
  if (code === "28P01")
    return `${where} refused the password of user "${address.user}": check the user and password in DATABASE_URL`;
  if (code === "28000")
    return `${where} does not let user "${address.user}" in (pg_hba.conf): check the user in DATABASE_URL and the server's pg_hba.conf`;
  if (code === "3D000")
    return `${where} has no database "${address.database}": create it (createdb ${address.database}) or fix the database name in DATABASE_URL`;
  if (code === "ECONNREFUSED")
    return `cannot connect to ${where}: connection refused; check the host and port in DATABASE_URL and that the server is running (for development, npm run db:dev starts one and prints its DATABASE_URL)`;
  if (code === "ENOTFOUND" || code === "EAI_AGAIN")
    return `cannot resolve the PostgreSQL host in DATABASE_URL (${showHost(address.hosts[0] ?? host)}): check the host name`;
  if (/timeout exceeded when trying to connect|Connection terminated due to connection timeout/.test(message))
    return `${where} did not answer in time: check the host and port in DATABASE_URL, and any firewall between`;
  return null;
}
