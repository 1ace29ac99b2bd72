const UNIT_MS = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 } as const;

/** Parses `250ms`, `5s`, `30m`, `2h` (a bare number is milliseconds). Returns null when malformed. */
export function parseDuration(text: string): number | null {
  const match = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$/.exec(text);
  if (!match) return null;
  const value = Number(match[1]);
  const unit = (match[2] ?? "ms") as keyof typeof UNIT_MS;
  const ms = Math.round(value * UNIT_MS[unit]);
  return Number.isFinite(ms) ? ms : null;
}

/** Parses a comma-separated schedule such as `0s,5s,5m`. Returns null when any entry is malformed or the list is empty. */
export function parseSchedule(text: string): number[] | null {
  const parts = text.split(",").map((p) => p.trim());
  if (parts.length === 0 || parts.some((p) => p === "")) return null;
  const delays: number[] = [];
  for (const part of parts) {
    const ms = parseDuration(part);
    if (ms === null) return null;
    delays.push(ms);
  }
  return delays;
}
