/** A worker loop as readiness sees it. */
export interface LoopBeat {
  name: string;
  isRunning: boolean;
  lastBeatAt: number;
}

/** A loop silent this long while running is reported stalled (its ticks hang). */
export const STALLED_AFTER_MS = 120_000;
/** Loops that legitimately sleep for longer than STALLED_AFTER_MS between ticks (hourly, every 10 minutes). */
const SLEEPERS = new Set(["pruner", "catalog"]);

/**
 * Why the relay is not ready (/readyz), from what was observed: the write probe's answer (null:
 * writable), the database health's recent failure (null: none), and each loop's beat. A failed
 * probe already says the database cannot take writes, so a recent failure is reported only
 * without it.
 */
export function readinessProblems(
  probe: string | null,
  recentFailure: string | null,
  loops: readonly LoopBeat[],
  now: number,
): string[] {
  const problems: string[] = [];
  if (probe) problems.push(probe);
  if (recentFailure && !probe) problems.push(recentFailure);
  for (const loop of loops) {
    if (!loop.isRunning) problems.push(`worker ${loop.name} not running`);
    else if (!SLEEPERS.has(loop.name) && now - loop.lastBeatAt > STALLED_AFTER_MS)
      problems.push(`worker ${loop.name} stalled for ${Math.round((now - loop.lastBeatAt) / 1000)} s`);
  }
  return problems;
}
