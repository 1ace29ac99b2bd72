import { z } from "@hono/zod-openapi";
import { TASK_STATUSES } from "../statuses.js";
import { TASK_EVENT_TYPES } from "../core/transition.js";
import { callbackHeaderProblems, MAX_CALLBACK_HEADERS } from "../services/callback-headers.js";
import { nearMissProblems } from "../services/intake-fields.js";

const nonBlank3 = (s: string) => s.replace(/\s/g, "").length >= 3;

// Keyed as documented: the validator matches header names case-insensitively, and the OpenAPI
// generator refuses a parameter whose key and documented name differ.
export const IdempotencyHeaders = z.object({
  "Idempotency-Key": z
    .string({ error: "Idempotency-Key header is required" })
    .regex(/^[A-Za-z0-9._:-]{8,128}$/, { error: "must be 8 to 128 characters of A-Za-z0-9 . _ : -" })
    .openapi({ param: { name: "Idempotency-Key", in: "header" }, example: "order-1234-image" }),
});

const hasNul = (s: string) => s.includes("\u0000");

/** Text never contains NUL (section 14): PostgreSQL cannot store it. Every string of the body, at any depth, keys too. */
function noNul(value: unknown, ctx: z.RefinementCtx, path: (string | number)[] = []): void {
  if (typeof value === "string") {
    if (hasNul(value)) ctx.addIssue({ code: "custom", path, message: "must not contain NUL (\\u0000)" });
  } else if (Array.isArray(value)) {
    value.forEach((v, i) => noNul(v, ctx, [...path, i]));
  } else if (typeof value === "object" && value !== null) {
    for (const [k, v] of Object.entries(value)) {
      if (hasNul(k)) ctx.addIssue({ code: "custom", path, message: "field names must not contain NUL (\\u0000)" });
      else noNul(v, ctx, [...path, k]);
    }
  }
}
const noNulBody = (body: Record<string, unknown>, ctx: z.RefinementCtx) => noNul(body, ctx);

const MetadataSchema = z
  .record(z.string().max(256, { error: "keys are at most 256 characters" }), z.string({ error: "values must be strings" }))
  .refine((m) => Object.keys(m).length <= 16, { error: "at most 16 keys" })
  .refine((m) => Buffer.byteLength(JSON.stringify(m)) <= 4096, { error: "at most 4 KiB serialized" })
  .openapi({ example: { order_id: "1234" }, description: "String values, at most 16 keys and 4 KiB; echoed in every webhook and read." });

/** Header name to value; checked by services/callback-headers (names, reserved names, values). */
export const CallbackHeadersSchema = z
  .record(z.string(), z.string({ error: "values must be strings" }))
  .superRefine((headers, ctx) => {
    for (const p of callbackHeaderProblems(headers, "")) ctx.addIssue({ code: "custom", path: p.field ? [p.field.slice(1)] : [], message: p.message });
  })
  .openapi({
    example: { "X-Hook-Token": "3f9c2a7e5b" },
    description: `At most ${MAX_CALLBACK_HEADERS} headers sent with every attempt (a token a catch hook checks). Names: HTTP tokens of at most 64 characters, never host, connection, content-*, transfer-encoding, te, upgrade, user-agent or webhook-*; values: at most 1024 visible ASCII characters. Stored sealed; never shown again (reads show names only).`,
  });

/** A body field that is a near miss of a known one is refused, naming the field meant (section 14). */
const nearMisses = (type: "image" | "video") => (body: Record<string, unknown>, ctx: z.RefinementCtx) => {
  for (const p of nearMissProblems(type, body)) ctx.addIssue({ code: "custom", path: [p.field], message: p.message, params: { did_you_mean: p.did_you_mean } });
};
/** Near misses are named also when other fields failed (`promt` beside "prompt is required"). */
const whenObject = { when: (payload: { value: unknown }) => typeof payload.value === "object" && payload.value !== null && !Array.isArray(payload.value) };

/** Whole-body examples: /docs' "Try it out" sends them as they are, so they must be accepted (no placeholders). */
export const IMAGE_EXAMPLE = {
  model: "p-image",
  mode: "generate",
  prompt: "a lighthouse at dawn, watercolor",
  count: 1,
  callback_url: "https://example.com/hooks/genrelay",
  metadata: { order_id: "1234" },
};
export const VIDEO_EXAMPLE = { model: "v-video", video_mode: "t2v", prompt: "waves at night, slow pan", duration: 5, callback_url: "https://example.com/hooks/genrelay" };

/** The relay's own fields, added to either upstream body. */
const relayFields = {
  callback_url: z
    .string({ error: "must be a string" })
    .max(2048, { error: "at most 2048 characters" })
    .optional()
    .openapi({ example: "https://example.com/hooks/genrelay", description: "Absolute https URL that receives the signed webhooks." }),
  callback_events: z
    .array(z.enum(TASK_EVENT_TYPES), { error: `must be an array of ${TASK_EVENT_TYPES.join(", ")}` })
    .min(1, { error: "must not be empty" })
    .refine((a) => new Set(a).size === a.length, { error: "must not repeat an event type" })
    .optional()
    .openapi({ description: "Event types to send; default: the three terminal ones." }),
  metadata: MetadataSchema.optional(),
  callback_headers: CallbackHeadersSchema.optional(),
  expires_after_seconds: z
    .number()
    .int()
    .min(1)
    .max(7 * 24 * 3600)
    .optional()
    .openapi({ description: "A task still waiting in the relay this long after creation ends canceled (error.code expired), never sent upstream." }),
};

/** Longest prompt accepted (section 14): one client must not fill the disk every tenant shares. */
export const MAX_PROMPT_CHARS = 32_768;

const prompt = z
  .string({ error: "must be a string" })
  .refine(nonBlank3, { error: "must contain at least 3 non-whitespace characters" })
  .max(MAX_PROMPT_CHARS, { error: `must be at most ${MAX_PROMPT_CHARS} characters` })
  .openapi({ example: "a lighthouse at dawn, watercolor" });
const model = z.string({ error: "is required" }).min(1, { error: "is required" });
const mediaUrls = z.array(z.string({ error: "must be a string" }), { error: "must be an array of URLs" }).min(1, { error: "must not be empty" });

export const ImageGenerationBody = z
  .looseObject({
    model: model.openapi({ example: "p-image" }),
    mode: z.enum(["generate", "edit"], { error: "must be generate or edit" }),
    prompt,
    count: z.literal(1, { error: "must be exactly 1" }),
    image_urls: mediaUrls.optional(),
    aspect_ratio: z.string().optional(),
    size: z.string().optional(),
    resolution: z.string().optional(),
    quality: z.string().optional().openapi({ description: "Image quality, for models whose catalog entry lists qualities (low, medium, high, …)." }),
    ...relayFields,
  })
  .superRefine((body, ctx) => {
    if (body.mode === "edit" && !body.image_urls) {
      ctx.addIssue({ code: "custom", path: ["image_urls"], message: "is required when mode is edit" });
    }
  })
  .superRefine(nearMisses("image"), whenObject)
  .superRefine(noNulBody, whenObject)
  .openapi("ImageGenerationRequest", { example: IMAGE_EXAMPLE });

export const VideoGenerationBody = z
  .looseObject({
    model: model.openapi({ example: "v-video" }),
    video_mode: z.string({ error: "is required" }).min(1, { error: "is required" }).openapi({ example: "t2v" }),
    prompt,
    image_urls: mediaUrls.optional(),
    source_video_url: z.string({ error: "must be a string" }).optional(),
    duration: z.number({ error: "must be a number of seconds" }).positive().optional(),
    resolution: z.string().optional(),
    ratio: z.string().optional(),
    aspect_ratio: z.string().optional(),
    ...relayFields,
  })
  .superRefine(nearMisses("video"), whenObject)
  .superRefine(noNulBody, whenObject)
  .openapi("VideoGenerationRequest", { example: VIDEO_EXAMPLE });

export const ErrorSchema = z
  .object({
    error: z.object({
      code: z.string().openapi({ example: "validation_error" }),
      message: z.string(),
      request_id: z.string(),
      details: z.unknown().optional(),
    }),
  })
  .openapi("Error");

const DeliverySummarySchema = z.object({
  status: z.enum(["none", "pending", "succeeded", "failed"]),
  attempts: z.number().int(),
  last_attempt_at: z.string().nullable(),
  last_status_code: z.number().int().nullable(),
});

export const TaskDataSchema = z
  .object({
    id: z.string().openapi({ example: "task_01jf3y8k2m9q7r5t3v1w0x6z4a" }),
    type: z.enum(["image", "video"]),
    status: z.enum(TASK_STATUSES),
    model: z.string(),
    created_at: z.string(),
    updated_at: z.string(),
    completed_at: z.string().nullable(),
    upstream_task_id: z.string().nullable(),
    error: z.object({ code: z.string(), message: z.string(), request_id: z.string().nullable() }).nullable(),
    metadata: z.record(z.string(), z.string()).nullable(),
    callback: z.object({ url: z.string().nullable(), events: z.array(z.string()), delivery: DeliverySummarySchema.optional() }),
    queue_position: z.number().int().optional(),
    files: z
      .array(
        z.object({
          source_url: z.string(),
          url: z.string().optional().openapi({ description: "A presigned GET valid url_expires_in seconds, or public_base_url + key." }),
          key: z.string().optional(),
          bytes: z.number().int().optional(),
          sha256: z.string().optional(),
          content_type: z.string().optional(),
          error: z.string().optional().openapi({ description: "Why this file could not be copied (after retries)." }),
        }),
      )
      .optional()
      .openapi({ description: "With a bucket set (PUT /openapi/v1/storage): the output's files as copied into it, in the output's order." }),
  })
  .openapi("TaskData");

const UsageSchema = z.object({ points_charged: z.number().nullable(), points_refunded: z.number().nullable() }).openapi("Usage");

export const TaskViewSchema = z
  .object({ data: TaskDataSchema, output: z.unknown().openapi({ description: "The upstream output, verbatim." }), usage: UsageSchema })
  .openapi("Task");

export const FlatTaskSchema = TaskDataSchema.extend({ output: z.unknown(), usage: UsageSchema }).openapi("TaskItem");

export const TaskListSchema = z
  .object({ data: z.array(FlatTaskSchema), next_cursor: z.string().nullable() })
  .openapi("TaskList");

export const TaskListQuery = z.object({
  limit: z.coerce
    .number({ error: "must be a number" })
    .int({ error: "must be a whole number" })
    .min(1, { error: "must be at least 1" })
    .max(100, { error: "must be at most 100" })
    .default(20)
    .openapi({ param: { name: "limit", in: "query" }, example: 20 }),
  cursor: z.string().max(200).refine((v) => !hasNul(v), { error: "is not a cursor this relay gave out" }).optional().openapi({ param: { name: "cursor", in: "query" } }),
  type: z.enum(["image", "video"], { error: "must be image or video" }).optional().openapi({ param: { name: "type", in: "query" } }),
  status: z.enum(TASK_STATUSES, { error: `must be one of ${TASK_STATUSES.join(", ")}` }).optional().openapi({ param: { name: "status", in: "query" } }),
});

export const TaskIdParam = z.object({
  id: z
    .string()
    .min(1)
    .max(200)
    .refine((v) => !hasNul(v), { error: "must not contain NUL" })
    .openapi({ param: { name: "id", in: "path" }, example: "task_01jf3y8k2m9q7r5t3v1w0x6z4a" }),
});

/**
 * Standard error responses for a route, by status. 500 is always added: any route can end in
 * internal_error (src/http/errors.ts onError), and callers should know its envelope too.
 */
export function errorResponses(...statuses: number[]) {
  const descriptions: Record<number, string> = {
    400: "Malformed request (invalid_request, invalid_media_url, invalid_callback_url)",
    401: "Missing, unknown or revoked API key (invalid_api_key)",
    402: "insufficient_points: the task's known price does not fit the client's credit limit (points charged + reserved + price > limit), or the limit is used up. Nothing is stored.",
    404: "Unknown task or another client's task (task_not_found)",
    409: "Conflict (idempotency_key_reused, cannot_cancel)",
    413: "Body over 1 MiB (payload_too_large)",
    415: "Body is not application/json (unsupported_media_type)",
    422: "validation_error: invalid fields, or a model or parameter the upstream's cached catalog does not offer (unknown model, unsupported video_mode, size, quality, resolution, duration, aspect ratio); details name each field. Nothing is stored.",
    429: "Too many waiting tasks (concurrent_limit), or too many test pings (rate_limit); see Retry-After",
    500: "Unexpected failure (internal_error)",
    503: "Upstream unavailable (service_unavailable), or the relay cannot store changes now (storage_unavailable; nothing was changed, see Retry-After)",
  };
  return Object.fromEntries(
    [...new Set([...statuses, 500, 503])].map((s) => [s, { description: descriptions[s] ?? "Error", content: { "application/json": { schema: ErrorSchema } } }]),
  );
}
