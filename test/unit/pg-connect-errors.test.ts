import { describe, expect, it } from "vitest";
import { pgConnectProblem } from "../../src/db/pg/connect-errors.js";
import { parsePgUrl } from "../../src/db/pg/hosts.js";

/** docs/deployment.md, "When PostgreSQL does not answer at start": each connection failure is one line naming DATABASE_URL and what to check. */
describe("PostgreSQL connection errors name their fix", () => {
  const refused = Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:6543"), {
    code: "ECONNREFUSED",
    address: "127.0.0.1",
    port: 6543,
  });

  it("no password in the URL: SCRAM's own words, or an md5 server's 28P01", () => {
    const line =
      "DATABASE_URL has no password, but PostgreSQL at db.internal:5432 (DATABASE_URL) asks for one: write it into the URL (postgres://app:PASSWORD@db.internal:5432/relay, percent-encoded) or set PGPASSWORD";
    const sasl = new Error("SASL: SCRAM-SERVER-FIRST-MESSAGE: client password must be a string");
    expect(pgConnectProblem(sasl, "postgres://app@db.internal/relay")).toBe(line);
    const md5 = Object.assign(new Error('password authentication failed for user "app"'), { code: "28P01" });
    expect(pgConnectProblem(md5, "postgres://app@db.internal/relay")).toBe(line);
    // With a password (in the URL or PGPASSWORD) the same 28P01 is a wrong one.
    expect(pgConnectProblem(md5, "postgres://app:x@db.internal/relay")).toBe(
      'PostgreSQL at db.internal:5432 (DATABASE_URL) refused the password of user "app": check the user and password in DATABASE_URL',
    );
    expect(pgConnectProblem(md5, "postgres://app@db.internal/relay", { PGPASSWORD: "x" })).toMatch(
      /refused the password/,
    );
  });

  it("a closed port, alone or as the first of several addresses", () => {
    const line =
      "cannot connect to PostgreSQL at 127.0.0.1:6543 (DATABASE_URL): connection refused; check the host and port in DATABASE_URL and that the server is running (for development, npm run db:dev starts one and prints its DATABASE_URL)";
    expect(pgConnectProblem(refused, "postgres://u:p@localhost:6543/db")).toBe(line);
    expect(pgConnectProblem(new AggregateError([refused]), "postgres://u:p@localhost:6543/db")).toBe(line);
  });

  it("a missing database, an unknown host; anything else is left as it is", () => {
    const missing = Object.assign(new Error('database "relay" does not exist'), { code: "3D000" });
    expect(pgConnectProblem(missing, "postgres://u:p@h:5433/relay")).toBe(
      'PostgreSQL at h:5433 (DATABASE_URL) has no database "relay": create it (createdb relay) or fix the database name in DATABASE_URL',
    );
    const unknown = Object.assign(new Error("getaddrinfo ENOTFOUND dbb"), { code: "ENOTFOUND" });
    expect(pgConnectProblem(unknown, "postgres://u:p@dbb/relay")).toBe(
      "cannot resolve the PostgreSQL host in DATABASE_URL (dbb:5432): check the host name",
    );
    expect(pgConnectProblem(new Error("relation tasks does not exist"), "postgres://u:p@h/db")).toBeNull();
  });
});

describe("DATABASE_URL with several hosts (libpq's form)", () => {
  it("lists each host with its port, the target, and one URL per host without target_session_attrs", () => {
    const a = parsePgUrl(
      "postgres://u:p%40ss@h1:5432,[::1]:5433,h3/db?sslmode=disable&target_session_attrs=read-write",
    );
    expect(a.hosts).toEqual([
      { host: "h1", port: 5432 },
      { host: "::1", port: 5433 },
      { host: "h3", port: 5432 },
    ]);
    expect(a).toMatchObject({ target: "read-write", user: "u", password: true, database: "db" });
    expect(a.urlFor(a.hosts[1]!)).toBe("postgres://u:p%40ss@[::1]:5433/db?sslmode=disable");
  });

  it("one host as written is passed on untouched", () => {
    const url = "postgresql://u:p@db.example:6432/relay?application_name=x";
    const a = parsePgUrl(url);
    expect(a.hosts).toEqual([{ host: "db.example", port: 6432 }]);
    expect(a.urlFor(a.hosts[0]!)).toBe(url);
  });
});
