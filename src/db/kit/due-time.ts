/**
 * When a loop sleeping on a phase's tasks should wake (TaskStore.nextDueAt, both drivers): at the first
 * unleased task's due time, or just after the first live lease runs out (its holder may have died, and
 * the row is due again then), whichever is first; null when there is neither.
 */
export function wakeAt(due: number | null, leaseEnd: number | null): number | null {
  const expiry = leaseEnd === null ? null : leaseEnd + 1;
  if (due === null) return expiry;
  return expiry === null ? due : Math.min(due, expiry);
}
