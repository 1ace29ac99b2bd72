import type { FieldProblem } from "./errors.js";
import { unknownFields } from "./intake-fields.js";

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
export const CAPABILITIES: Record<string, string[]> = {
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

/**
 * The models of a cached catalog that may serve `type`, found once per catalog copy: the cache
 * hands intake the same parsed body until it refreshes it (a new object), and nothing changes a
 * body it holds, so walking the catalog for every creation finds the same list each time.
 */
const modelsByCatalog = new WeakMap<object, Partial<Record<"image" | "video", CatalogModel[]>>>();
function modelsFor(catalog: unknown, type: "image" | "video"): CatalogModel[] {
  const of = (): CatalogModel[] => catalogModels(catalog).filter((m) => m.type === type || m.type === null);
  if (typeof catalog !== "object" || catalog === null) return of();
  let byType = modelsByCatalog.get(catalog);
  if (!byType) modelsByCatalog.set(catalog, (byType = {}));
  return (byType[type] ??= of());
}

export function checkAgainstCatalog(
  catalog: unknown,
  type: "image" | "video",
  body: Record<string, unknown>,
): FieldProblem[] {
  const models = modelsFor(catalog, type);
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
    if (
      !allowed.some((a) => a === value || (typeof a === "number" && typeof value === "string" && String(a) === value))
    ) {
      problems.push({ field, message: `is not supported by ${model.id}; one of: ${shown(allowed)}` });
    }
  }
  problems.push(...modeRequirements(type, body, problems));
  // A parameter the relay does not know is the model's own only where its entry names it (the catalog evolves).
  for (const field of unknownFields(type, body)) {
    if (!namesField(model.entry, field)) {
      problems.push({
        field,
        message: `is not a field of this request, and ${model.id}'s catalog entry does not name it`,
      });
    }
  }
  return problems;
}

/**
 * What a video mode needs, by the reference's mode names (t2v, i2v_first, multimodal_ref, v2v_edit):
 * image-to-video and reference modes need image_urls, video-to-video modes a source_video_url.
 * Decided only for a mode the catalog accepted, so the upstream's refusal is known in advance.
 */
function modeRequirements(
  type: "image" | "video",
  body: Record<string, unknown>,
  already: FieldProblem[],
): FieldProblem[] {
  const mode = body.video_mode;
  if (type !== "video" || typeof mode !== "string" || already.some((p) => p.field === "video_mode")) return [];
  const images = Array.isArray(body.image_urls) && body.image_urls.length > 0;
  if (/^(i2v|img2v|image)|(^|_)ref(erence)?($|_)/.test(mode) && !images) {
    return [{ field: "image_urls", message: `is required when video_mode is ${mode} (at least one URL)` }];
  }
  if (/^v2v/.test(mode) && (body.source_video_url === undefined || body.source_video_url === null)) {
    return [{ field: "source_video_url", message: `is required when video_mode is ${mode}` }];
  }
  return [];
}

/** Keys of an entry that describe the model, not a parameter a request may carry. */
const DESCRIPTIVE = new Set([
  "id",
  "name",
  "type",
  "description",
  "capabilities",
  "parameters",
  "params",
  "fields",
  "options",
  "inputs",
  "pricing",
  "price",
]);
const PARAMETER_LISTS = ["parameters", "params", "fields", "options", "inputs"];

/** Whether a catalog entry names a request field: as a key (or its plural) of the entry or its capabilities, or in a parameter list. */
export function namesField(entry: Record<string, unknown>, field: string): boolean {
  if (DESCRIPTIVE.has(field)) return false;
  const places = [entry, isObj(entry.capabilities) ? entry.capabilities : {}];
  const spellings = [field, `${field}s`, `${field}es`, field.replace(/y$/, "ies")];
  for (const place of places) {
    if (spellings.some((s) => Object.hasOwn(place, s))) return true;
    for (const key of PARAMETER_LISTS) {
      const list = place[key];
      if (
        Array.isArray(list) &&
        list.some((p) => p === field || (isObj(p) && [p.name, p.id, p.key, p.field].includes(field)))
      )
        return true;
      if (isObj(list) && Object.hasOwn(list, field)) return true;
    }
  }
  return false;
}
