import type { FieldProblem } from "./errors.js";

/**
 * Checks a creation request against the upstream's cached model catalog, so a request the upstream
 * would refuse gets 422 at once instead of a 201 and a task.failed webhook later.
 *
 * The catalog's shape is "not shown" in the reference, so it is read tolerantly: a model entry is
 * any object with a string `id` found in an array (up to a few levels deep), typed image or video by
 * the array's key or by the entry's own `type`; a capability is an array of plain values under the
 * field's plural (`sizes`, `qualities`, `video_modes`, …) in the entry or its `capabilities` object.
 * Whatever is not recognised is not checked: the upstream decides.
 */

interface CatalogModel {
  id: string;
  type: "image" | "video" | null;
  entry: Record<string, unknown>;
}

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

function typeOf(hint: string): "image" | "video" | null {
  const h = hint.toLowerCase();
  if (h.includes("video")) return "video";
  if (h.includes("image")) return "image";
  return null;
}

export function catalogModels(body: unknown): CatalogModel[] {
  const found: CatalogModel[] = [];
  const walk = (value: unknown, key: string, depth: number) => {
    if (depth > 4) return;
    if (Array.isArray(value)) {
      for (const item of value) {
        if (isObj(item) && typeof item.id === "string") {
          const own = typeof item.type === "string" ? typeOf(item.type) : null;
          found.push({ id: item.id, type: own ?? typeOf(key), entry: item });
        }
      }
      return;
    }
    if (isObj(value)) for (const [k, v] of Object.entries(value)) walk(v, k, depth + 1);
  };
  walk(body, "", 0);
  return found;
}

/** Request fields checked against a capability list, and where the list may be found. */
const CAPABILITIES: Record<string, string[]> = {
  mode: ["modes"],
  video_mode: ["video_modes", "modes"],
  size: ["sizes"],
  quality: ["qualities"],
  resolution: ["resolutions"],
  duration: ["durations"],
  aspect_ratio: ["aspect_ratios", "ratios"],
  ratio: ["ratios", "aspect_ratios"],
};

function listOf(entry: Record<string, unknown>, keys: string[]): unknown[] | null {
  const places = [entry, isObj(entry.capabilities) ? entry.capabilities : {}];
  for (const place of places) {
    for (const key of keys) {
      const v = place[key];
      if (Array.isArray(v) && v.length > 0 && v.every((x) => typeof x === "string" || typeof x === "number")) return v;
    }
  }
  return null;
}

const shown = (values: unknown[]) => values.map(String).join(", ");

export function checkAgainstCatalog(catalog: unknown, type: "image" | "video", body: Record<string, unknown>): FieldProblem[] {
  const models = catalogModels(catalog).filter((m) => m.type === type || m.type === null);
  // Only a catalog that lists models of this type can say a model is unknown.
  if (!models.some((m) => m.type === type)) return [];
  const model = models.find((m) => m.id === body.model);
  if (!model) {
    const ids = models.filter((m) => m.type === type).map((m) => m.id);
    return [{ field: "model", message: `is not a ${type} model in the upstream's catalog; one of: ${ids.join(", ")}` }];
  }
  const problems: FieldProblem[] = [];
  for (const [field, keys] of Object.entries(CAPABILITIES)) {
    const value = body[field];
    if (value === undefined || value === null) continue;
    const allowed = listOf(model.entry, keys);
    if (!allowed) continue;
    if (!allowed.some((a) => a === value || (typeof a === "number" && typeof value === "string" && String(a) === value))) {
      problems.push({ field, message: `is not supported by ${model.id}; one of: ${shown(allowed)}` });
    }
  }
  return problems;
}
