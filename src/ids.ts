import { randomBytes } from "node:crypto";

// Crockford base32: sortable, case-insensitive, no ambiguous letters.
const ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz";

/**
 * Prefixed, time-ordered identifier: `<prefix>_` + 10 chars of millisecond time
 * + 16 chars of randomness (ULID layout). Lexical order follows creation time,
 * which the list endpoints and the event feed rely on for their cursors.
 */
export function newId(prefix: string, nowMs: number = Date.now()): string {
  let time = "";
  let t = Math.floor(nowMs);
  for (let i = 0; i < 10; i++) {
    time = ALPHABET[t % 32] + time;
    t = Math.floor(t / 32);
  }
  const bytes = randomBytes(16);
  let rand = "";
  for (let i = 0; i < 16; i++) rand += ALPHABET[bytes[i]! % 32];
  return `${prefix}_${time}${rand}`;
}

export const ID_PATTERN = /^[a-z]{2,5}_[0-9a-hjkmnp-tv-z]{26}$/;
