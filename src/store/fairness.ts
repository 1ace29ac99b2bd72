import { deliveryKey } from "./delivery-key.js";

/**
 * Round-robin over per-client queues, each already in its own order: every client's first item
 * before any client's second, and so on, up to `limit` items. Both stores pick the tasks to submit
 * with it (a flood from one client cannot starve another).
 */
export function interleave<T>(queues: T[][], limit: number): T[] {
  const picked: T[] = [];
  for (let depth = 0; picked.length < limit && queues.some((q) => q.length > depth); depth++) {
    for (const q of queues) {
      if (picked.length >= limit) break;
      if (q.length > depth) picked.push(q[depth]!);
    }
  }
  return picked;
}

/**
 * Picks candidates (oldest due first) within each key's and each client's room: a client's events
 * are taken in turns with the other clients' (round-robin over clients, each in due order), so a
 * client with a long backlog due earlier does not fill the claim ahead of one that became due later.
 * Shared by both drivers.
 */
export function pickWithinRoom<C extends { clientId: string; host: string }>(
  candidates: C[],
  limit: number,
  keyRoom: (key: string) => number,
  clientRoom?: ClientRoom,
): C[] {
  const queues = new Map<string, C[]>();
  for (const c of candidates) {
    const q = queues.get(c.clientId);
    if (q) q.push(c);
    else queues.set(c.clientId, [c]);
  }
  const byKey = new Map<string, number>();
  const byClient = new Map<string, number>();
  const picked: C[] = [];
  while (picked.length < limit && queues.size > 0) {
    for (const [clientId, queue] of queues) {
      // Asked before every pick: the room depends on what this claim already took for others.
      if (clientRoom && clientRoom(clientId, byClient) <= 0) {
        queues.delete(clientId);
        continue;
      }
      let took = false;
      while (queue.length > 0 && !took) {
        const c = queue.shift()!;
        const key = deliveryKey(c.clientId, c.host);
        const n = byKey.get(key) ?? 0;
        if (n >= keyRoom(key)) continue;
        byKey.set(key, n + 1);
        byClient.set(clientId, (byClient.get(clientId) ?? 0) + 1);
        picked.push(c);
        took = true;
      }
      if (queue.length === 0) queues.delete(clientId);
      if (picked.length >= limit) break;
    }
  }
  return picked;
}

/** How many more events a client may take in this claim, given what the claim took so far per client. */
export type ClientRoom = (clientId: string, pickedSoFar: ReadonlyMap<string, number>) => number;
