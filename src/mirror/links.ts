import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";

/**
 * Links that last (docs/contract.md, "Links that last"): `data.files[i].link` is
 * `{PUBLIC_BASE_URL}/files/{token}`, and GET on it answers 302 to a freshly presigned URL of the
 * copy for as long as the file is kept.
 *
 * The token is `<task_id>.<n>.<mac>`, `mac` the HMAC-SHA256 of `<task_id>.<n>` under the client's
 * link key: 256 random bits kept (sealed) with its bucket setting. Nothing is stored per file, so a
 * link works on every instance and after restarts; it names one file (the MAC covers the task and
 * the index); it ends when the task is pruned (no task) or the client's storage is removed (no
 * key: a bucket set again gets a new one, so old links stay ended).
 */

/** How long the URL a link redirects to stays valid: a browser or a tool follows the 302 at once. */
export const LINK_URL_EXPIRES_IN = 15 * 60;

/** A new link key (what the bucket setting keeps, sealed). */
export function newLinkKey(): string {
  return randomBytes(32).toString("base64url");
}

const TOKEN = /^(task_[0-9a-hjkmnp-tv-z]{26})\.(0|[1-9][0-9]{0,2})\.([A-Za-z0-9_-]{43})$/;
/** The token's shape, for the published document. */
export const LINK_TOKEN_PATTERN = TOKEN.source;

export interface LinkToken {
  taskId: string;
  n: number;
  mac: string;
}

function macOf(linkKey: string, taskId: string, n: number): string {
  return createHmac("sha256", Buffer.from(linkKey, "base64url")).update(`${taskId}.${n}`).digest("base64url");
}

export function linkToken(linkKey: string, taskId: string, n: number): string {
  return `${taskId}.${n}.${macOf(linkKey, taskId, n)}`;
}

/** The link of file `n` of a task, under the relay's PUBLIC_BASE_URL. */
export function fileLink(publicBaseUrl: string, linkKey: string, taskId: string, n: number): string {
  return `${publicBaseUrl.replace(/\/+$/, "")}/files/${linkToken(linkKey, taskId, n)}`;
}

/** The token's parts, or null when it is not a token at all. */
export function parseLinkToken(token: string): LinkToken | null {
  const m = TOKEN.exec(token);
  return m ? { taskId: m[1]!, n: Number(m[2]), mac: m[3]! } : null;
}

/** Whether the token's MAC is the one this key gives (compared in constant time). */
export function linkTokenValid(linkKey: string, token: LinkToken): boolean {
  const want = Buffer.from(macOf(linkKey, token.taskId, token.n));
  const got = Buffer.from(token.mac);
  return want.length === got.length && timingSafeEqual(want, got);
}
