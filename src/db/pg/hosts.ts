/**
 * DATABASE_URL as libpq reads it, hosts included: `postgres://u:p@h1:5432,h2:5432/db?target_session_attrs=read-write`
 * lists several servers, of which the relay uses the one that takes writes (docs/operations.md,
 * "Failover"). node-postgres reads one host only, so the list is split here and each connection is
 * made to one host's own URL (failover.ts picks which).
 */
export interface PgHost {
  host: string;
  port: number;
}

export interface PgAddress {
  hosts: PgHost[];
  /** libpq's target_session_attrs (`any` when unset). */
  target: string;
  user: string;
  /** Whether the URL carries a password. */
  password: boolean;
  database: string;
  /** The URL of one host, the rest as written (target_session_attrs left out: node-postgres does not know it). */
  urlFor(host: PgHost): string;
}

const DEFAULT_PORT = 5432;
/** scheme, credentials, the host list, then the path and query. */
const PARTS = /^(postgres(?:ql)?:\/\/)(?:([^@/?#]*)@)?([^/?#]*)(.*)$/s;

/** `h`, `h:5432`, `[::1]:5432`. */
function parseHost(text: string): PgHost {
  const v6 = /^\[([^\]]+)\](?::(\d+))?$/.exec(text);
  if (v6) return { host: v6[1]!, port: v6[2] ? Number(v6[2]) : DEFAULT_PORT };
  const at = text.lastIndexOf(":");
  if (at < 0) return { host: decodeURIComponent(text), port: DEFAULT_PORT };
  return { host: decodeURIComponent(text.slice(0, at)), port: Number(text.slice(at + 1)) || DEFAULT_PORT };
}

const hostText = (h: PgHost) => `${h.host.includes(":") ? `[${h.host}]` : encodeURIComponent(h.host)}:${h.port}`;

/** A host as people write it, for messages. */
export const showHost = (h: PgHost) => `${h.host.includes(":") ? `[${h.host}]` : h.host}:${h.port}`;

export function parsePgUrl(url: string): PgAddress {
  const m = PARTS.exec(url);
  const scheme = m?.[1] ?? "postgres://";
  const credentials = m?.[2];
  const hostList = m?.[3] ?? "";
  const rest = m?.[4] ?? "";
  const [path = "", query = ""] = rest.split(/\?(.*)/s);
  const params = new URLSearchParams(query);
  const target = params.get("target_session_attrs") ?? "any";
  params.delete("target_session_attrs");
  const kept = params.toString();
  const tail = `${path}${kept ? `?${kept}` : ""}`;
  const hosts = hostList === "" ? [{ host: "localhost", port: DEFAULT_PORT }] : hostList.split(",").map(parseHost);
  const user = credentials ? decodeURIComponent(credentials.split(":")[0] ?? "") : "";
  return {
    hosts,
    target,
    user,
    password: (credentials?.split(":")[1] ?? "") !== "",
    database: decodeURIComponent(path.replace(/^\//, "")) || user,
    // One host as written: the URL itself, so a plain DATABASE_URL reaches node-postgres untouched.
    urlFor: (h) =>
      hosts.length === 1 && target === "any" && hostList !== ""
        ? url
        : `${scheme}${credentials !== undefined ? `${credentials}@` : ""}${hostText(h)}${tail}`,
  };
}
