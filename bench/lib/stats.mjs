export function median(values) {
  const v = values.filter((x) => typeof x === "number" && Number.isFinite(x)).sort((a, b) => a - b);
  if (v.length === 0) return null;
  const mid = Math.floor(v.length / 2);
  return v.length % 2 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
}

/** Nearest-rank percentile of an unsorted array (p in 0..100). */
export function percentile(values, p) {
  if (values.length === 0) return null;
  const v = [...values].sort((a, b) => a - b);
  const rank = Math.min(v.length, Math.max(1, Math.ceil((p / 100) * v.length)));
  return v[rank - 1];
}

export function distribution(values) {
  if (values.length === 0) return { n: 0, p50: null, p95: null, p99: null, max: null };
  return {
    n: values.length,
    p50: percentile(values, 50),
    p95: percentile(values, 95),
    p99: percentile(values, 99),
    max: Math.max(...values),
  };
}

export function round(x, digits = 0) {
  if (x === null || x === undefined || !Number.isFinite(x)) return null;
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}

export function ratio(a, b) {
  if (a === null || b === null || !b) return null;
  return round(a / b, 3);
}
