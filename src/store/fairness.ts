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
