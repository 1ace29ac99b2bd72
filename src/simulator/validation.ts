/**
 * Body rules of docs/upstream.md, "Image body" and "Video body". Field problems are collected, not
 * thrown one at a time, so one 422 names every field to correct. Media URLs are
 * checked only once the body is otherwise valid: a 400 invalid_media_url then
 * means "fix the URL", never "fix the URL and then three more fields".
 */
import { findImageModel, findVideoModel, P_IMAGE_QUALITIES, type PImageQuality } from "./catalog.js";
import { SimError, type FieldProblem } from "./errors.js";

export interface ImageRequest {
  type: "image";
  model: string;
  mode: string;
  prompt: string;
  imageUrls: string[];
  size: string;
  quality: PImageQuality;
  aspectRatio: string | null;
}

export interface VideoRequest {
  type: "video";
  model: string;
  videoMode: string;
  prompt: string;
  imageUrls: string[];
  sourceVideoUrl: string | null;
  duration: number;
  resolution: string;
  aspectRatio: string | null;
}

export type GenerationRequest = ImageRequest | VideoRequest;
type Body = Record<string, unknown>;

const VIDEO_MODES_NEEDING_IMAGES = new Set(["i2v_first", "i2v_last", "multimodal_ref"]);
const VIDEO_MODES_NEEDING_SOURCE = new Set(["v2v_edit"]);

class Problems {
  readonly list: FieldProblem[] = [];
  add(field: string, message: string): void {
    this.list.push({ field, message });
  }
  has(field: string): boolean {
    return this.list.some((x) => x.field === field);
  }
  throwIfAny(): void {
    if (this.list.length === 0) return;
    const fields = this.list.map((p) => p.field).join(", ");
    throw new SimError(422, "validation_error", `Request fields are invalid: ${fields}`, this.list);
  }
}

function requiredString(body: Body, field: string, p: Problems): string | undefined {
  const v = body[field];
  if (v === undefined || v === null) p.add(field, "is required");
  else if (typeof v !== "string" || v.trim() === "") p.add(field, "must be a non-empty string");
  else return v;
  return undefined;
}

/** Returns the value when it is absent (undefined) or a string; records a problem otherwise. */
function optionalString(body: Body, field: string, p: Problems): string | undefined {
  const v = body[field];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "string") {
    p.add(field, "must be a string");
    return undefined;
  }
  return v;
}

function oneOf(field: string, value: string | undefined, allowed: readonly string[], p: Problems, what: string): void {
  if (value !== undefined && !allowed.includes(value)) p.add(field, `${what}; one of ${allowed.join(", ")}`);
}

function checkPrompt(body: Body, p: Problems): string {
  const prompt = body.prompt;
  if (prompt === undefined || prompt === null) p.add("prompt", "is required");
  else if (typeof prompt !== "string") p.add("prompt", "must be a string");
  else if (prompt.replace(/\s/gu, "").length < 3) p.add("prompt", "must contain at least 3 non-whitespace characters");
  else return prompt;
  return "";
}

function stringArray(body: Body, field: string, p: Problems): string[] {
  const v = body[field];
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v) || !v.every((x) => typeof x === "string")) {
    p.add(field, "must be an array of URL strings");
    return [];
  }
  return v as string[];
}

function isHttpsUrl(value: string): boolean {
  try {
    const u = new URL(value);
    return u.protocol === "https:" && u.hostname !== "";
  } catch {
    return false;
  }
}

function checkMediaUrls(urls: string[], field: string, single = false): void {
  const bad: FieldProblem[] = [];
  urls.forEach((u, i) => {
    if (!isHttpsUrl(u)) bad.push({ field: single ? field : `${field}[${i}]`, message: "must be a public https URL" });
  });
  if (bad.length > 0)
    throw new SimError(400, "invalid_media_url", "Invalid media URL: must be a public https URL", bad);
}

export function validateImageRequest(body: Body): ImageRequest {
  const p = new Problems();
  const modelId = requiredString(body, "model", p);
  const model = modelId === undefined ? undefined : findImageModel(modelId);
  if (modelId !== undefined && !model) p.add("model", "is not an image model of the catalog");
  const mode = requiredString(body, "mode", p);
  oneOf(
    "mode",
    mode,
    model?.modes ?? ["generate", "edit"],
    p,
    model ? "is not supported by this model" : "is not a mode",
  );
  const prompt = checkPrompt(body, p);
  if (body.count === undefined || body.count === null) p.add("count", "is required");
  else if (body.count !== 1) p.add("count", "must be 1");
  const imageUrls = stringArray(body, "image_urls", p);
  if (mode === "edit" && imageUrls.length === 0 && !p.has("image_urls")) {
    p.add("image_urls", "is required when mode is edit (at least one URL)");
  }
  const size = optionalString(body, "size", p);
  const aspectRatio = optionalString(body, "aspect_ratio", p);
  let quality: PImageQuality = "medium";
  if (model) {
    oneOf("size", size, model.sizes, p, "is not a size of this model");
    oneOf("aspect_ratio", aspectRatio, model.aspect_ratios, p, "is not an aspect ratio of this model");
    if (model.qualities) {
      const q = optionalString(body, "quality", p);
      oneOf("quality", q, P_IMAGE_QUALITIES, p, "is not a quality of this model");
      if (q !== undefined && (P_IMAGE_QUALITIES as readonly string[]).includes(q)) quality = q as PImageQuality;
    }
  }
  p.throwIfAny();
  checkMediaUrls(imageUrls, "image_urls");
  const defaultSize = model!.sizes.includes("1K") ? "1K" : model!.sizes[0]!;
  return {
    type: "image",
    model: modelId!,
    mode: mode!,
    prompt,
    imageUrls,
    size: size ?? defaultSize,
    quality,
    aspectRatio: aspectRatio ?? null,
  };
}

export function validateVideoRequest(body: Body): VideoRequest {
  const p = new Problems();
  const modelId = requiredString(body, "model", p);
  const model = modelId === undefined ? undefined : findVideoModel(modelId);
  if (modelId !== undefined && !model) p.add("model", "is not a video model of the catalog");
  const videoMode = requiredString(body, "video_mode", p);
  if (model) oneOf("video_mode", videoMode, model.video_modes, p, "is not supported by this model");
  const prompt = checkPrompt(body, p);
  const imageUrls = stringArray(body, "image_urls", p);
  const sourceVideoUrl = optionalString(body, "source_video_url", p);
  // Requirements of a mode only make sense once the mode itself is accepted.
  const mode = p.has("video_mode") ? undefined : videoMode;
  if (mode && VIDEO_MODES_NEEDING_IMAGES.has(mode) && imageUrls.length === 0 && !p.has("image_urls")) {
    p.add("image_urls", `is required when video_mode is ${mode} (at least one URL)`);
  }
  if (mode && VIDEO_MODES_NEEDING_SOURCE.has(mode) && sourceVideoUrl === undefined && !p.has("source_video_url")) {
    p.add("source_video_url", `is required when video_mode is ${mode}`);
  }
  let duration: number | undefined;
  if (body.duration !== undefined && body.duration !== null) {
    if (typeof body.duration !== "number" || !Number.isFinite(body.duration))
      p.add("duration", "must be a number of seconds");
    else if (model && !model.durations.includes(body.duration)) {
      p.add("duration", `is not a duration of this model; one of ${model.durations.join(", ")}`);
    } else duration = body.duration;
  }
  const resolution = optionalString(body, "resolution", p);
  const aspectRatio = optionalString(body, "aspect_ratio", p);
  const ratio = optionalString(body, "ratio", p);
  if (model) {
    oneOf("resolution", resolution, model.resolutions, p, "is not a resolution of this model");
    oneOf("aspect_ratio", aspectRatio, model.aspect_ratios, p, "is not an aspect ratio of this model");
    oneOf("ratio", ratio, model.aspect_ratios, p, "is not a ratio of this model");
  }
  p.throwIfAny();
  checkMediaUrls(imageUrls, "image_urls");
  if (sourceVideoUrl !== undefined) checkMediaUrls([sourceVideoUrl], "source_video_url", true);
  return {
    type: "video",
    model: modelId!,
    videoMode: videoMode!,
    prompt,
    imageUrls,
    sourceVideoUrl: sourceVideoUrl ?? null,
    duration: duration ?? model!.durations[0]!,
    resolution: resolution ?? model!.resolutions[0]!,
    aspectRatio: aspectRatio ?? ratio ?? null,
  };
}
