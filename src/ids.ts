import { randomBytes } from "node:crypto";

// Crockford base32: sortable, case-insensitive, no ambiguous letters.
const ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz";

let lastTime = -1;
let lastRandom: number[] = [];

/**
 * `n` CSPRNG bytes (n ≤ 4096) from a pool drawn 4 KiB at a time: one call into it per 256 new
 * milliseconds of ids, or per 512 attempts' span ids, not one per id. The bytes are a view of the
 * pool: read them before the next call.
 */
let pool = Buffer.alloc(0);
let poolAt = 0;
export function pooledRandomBytes(n: number): Buffer {
  if (poolAt + n > pool.length) {
    pool = randomBytes(4096);
    poolAt = 0;
  }
  poolAt += n;
  return pool.subarray(poolAt - n, poolAt);
}

/**
 * Prefixed, time-ordered identifier: `<prefix>_` + 10 chars of millisecond time + 16 chars of
 * randomness (ULID layout). Within one millisecond the random part is incremented (monotonic ULID),
 * so ids made by this process sort in creation order, which the list cursors and feeds rely on.
 */
export function newId(prefix: string, nowMs: number = Date.now()): string {
  const ms = Math.floor(nowMs);
  if (ms === lastTime) {
    let i = 15;
    while (i >= 0 && lastRandom[i] === 31) lastRandom[i--] = 0;
    if (i >= 0) lastRandom[i]! += 1;
  } else {
    const bytes = pooledRandomBytes(16);
    // Top digit kept below 16 so 2^80 increments can never overflow the 16 digits.
    lastRandom = Array.from(bytes, (b, i) => (i === 0 ? b % 16 : b % 32));
    lastTime = ms;
    lastTimeText = timeText(ms);
  }
  let random = "";
  for (const d of lastRandom) random += ALPHABET[d];
  return `${prefix}_${lastTimeText}${random}`;
}

/** The id's 10 time digits, made once per millisecond (ids of one batch share them). */
let lastTimeText = "";
function timeText(ms: number): string {
  let time = "";
  let t = ms;
  for (let i = 0; i < 10; i++) {
    time = ALPHABET[t % 32] + time;
    t = Math.floor(t / 32);
  }
  return time;
}

export const ID_PATTERN = /^[a-z]{2,5}_[0-9a-hjkmnp-tv-z]{26}$/;
