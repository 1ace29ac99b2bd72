/**
 * How many more events of a key one claim may lease (the store applies this inside its claim, with
 * the key's leases counted there): within `limit`, and within the cap less the key's leases while
 * another claimer holds any of them; only a claimer that holds every lease of the key may lease
 * up to `ahead` (≥ the cap). So either one claimer holds a key's leases, and its own pool keeps
 * at most `cap` of them in flight, or every claimer's leases together are within the cap: a second
 * instance that finds the key leased ahead sees its leases at or past the cap and takes none
 * (the proof, and the property test of it: test/unit/lease-ahead.test.ts).
 */
export function leaseRoom(k: { limit: number; cap: number; ahead: number; leased: number; mine: number }): number {
  const bound = k.leased - k.mine > 0 ? k.cap : Math.max(k.cap, k.ahead);
  return Math.max(0, Math.min(k.limit, bound - k.leased));
}
