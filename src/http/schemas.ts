import { z } from "@hono/zod-openapi";
import { TASK_STATUSES } from "../statuses.js";
import { TASK_EVENT_TYPES } from "../core/transition.js";
import { CAPABILITIES } from "../services/catalog-check.js";
import {
  callbackHeaderProblems,
  HEADER_NAME,
  HEADER_VALUE,
  MAX_CALLBACK_HEADERS,
} from "../services/callback-headers.js";
import { RESERVED_HEADER_PREFIXES, RESERVED_HEADERS } from "../webhooks/callback-headers.js";
import { ERROR_STATUS, type ErrorCode } from "../services/errors.js";
import { REQUEST_BOUNDS } from "../services/request-bounds.js";
import {
  MEDIA_URL_PATTERN,
  meantField,
  nearMissProblems,
  type IMAGE_BODY_FIELDS,
  type RELAY_BODY_FIELDS,
  type VIDEO_BODY_FIELDS,
} from "../services/intake-fields.js";
import {
  caseless,
  closedBody,
  headerRefs,
  keywords,
  matching,
  maxKeys,
  requiredWhen,
  uniqueItems,
  whenObject,
} from "./schema-rules.js";

/** A creation's Idempotency-Key, with an example of its own per endpoint (one key is one request). */
export function idempotencyHeaders(type: "image" | "video") {
  // Keyed as documented: the validator matches header names case-insensitively, and the OpenAPI
  // generator refuses a parameter whose key and documented name differ.
  return z.object({
    "Idempotency-Key": z
      .string({ error: "Idempotency-Key header is required" })
      .regex(/^[A-Za-z0-9._:-]{8,128}$/, { error: "must be 8 to 128 characters of A-Za-z0-9 . _ : -" })
      .openapi({
        param: {
          name: "Idempotency-Key",
          in: "header",
          description:
            "Your id for this request: the same key with the same body answers the same task, never a second one.",
          example: `order-1234-${type}`,
        },
        example: `order-1234-${type}`,
      }),
    Prefer: PreferHeader,
    "Cancel-After": z
      .string()
      .max(100)
      .optional()
      .openapi({
        param: {
          name: "Cancel-After",
          in: "header",
          description:
            "Replicate's spelling of expires_after_seconds: a duration such as 90s, 5m or 1h30m (1 s to 7 days). A task still waiting in the relay this long after creation ends canceled (error.code expired).",
          example: "5m",
        },
      }),
  });
}

/**
 * Prefer (RFC 7240) on creation and task reads: `wait=N` (1 to 60) holds the answer until the task
 * ends (or, on a read with ?status=, changes) or N seconds pass. Any string is accepted: a value the
 * relay cannot honour is ignored, as RFC 7240 asks, never refused.
 */
export const PreferHeader = z
  .string()
  .max(1_000)
  .optional()
  .openapi({
    param: {
      name: "Prefer",
      in: "header",
      description:
        "wait=N (1 to 60): answer once the task has ended (a read with ?status=: once its status differs from that one), or after N seconds, whichever comes first; the answer is the same as without it, plus Preference-Applied: wait=N. Another value is ignored. One API key may hold 20 such requests at once (429 rate_limit beyond).",
      example: "wait=30",
    },
    example: "wait=30",
  });

const hasNul = (s: string) => s.includes("\u0000");

/** Text never contains NUL (docs/contract.md, "Intake"): PostgreSQL cannot store it. Every string of the body, at any depth, keys too. */
function noNul(value: unknown, ctx: z.RefinementCtx, path: (string | number)[] = []): void {
  if (typeof value === "string") {
    if (hasNul(value)) ctx.addIssue({ code: "custom", path, message: "must not contain NUL (\\u0000)" });
  } else if (Array.isArray(value)) {
    value.forEach((v, i) => {
      noNul(v, ctx, [...path, i]);
    });
  } else if (typeof value === "object" && value !== null) {
    for (const [k, v] of Object.entries(value)) {
      if (hasNul(k)) ctx.addIssue({ code: "custom", path, message: "field names must not contain NUL (\\u0000)" });
      else noNul(v, ctx, [...path, k]);
    }
  }
}
const noNulBody = (body: Record<string, unknown>, ctx: z.RefinementCtx) => noNul(body, ctx);

/**
 * How a URL the relay will call is published: intake's production checks
 * (src/net/address-guard.ts, validateCallbackUrl) as far as JSON Schema can say them: an absolute
 * https URI whose host is a dotted name (not an address, not a single label), with no user or
 * password. Private names (*.local, *.internal, …) are refused too, which the description says; with
 * WEBHOOK_ALLOW_PRIVATE_NETWORKS=true (development only) intake also takes http and private hosts.
 */
const PUBLIC_HOST = "(?:[A-Za-z0-9-]+\\.)+[A-Za-z][A-Za-z0-9-]*\\.?";
const PORT = "(?::(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3}|0))?";
const CALLBACK_URL_DOC = {
  format: "uri",
  pattern: `^https://${PUBLIC_HOST}${PORT}(?:[/?#]|$)`,
  maxLength: 2048,
} as const;
/** An origin (no path or query) of the same kind: an S3 endpoint. */
export const ORIGIN_PATTERN = `^https://${PUBLIC_HOST}${PORT}/?$`;
/**
 * The served document of a relay started with WEBHOOK_ALLOW_PRIVATE_NETWORKS=true (development, as the
 * quick start runs it): intake then also takes http and loopback or private hosts, so the published
 * patterns of the URLs the relay calls say so too, and `info["x-genrelay-development-mode"]` marks the
 * document as describing a development relay. A production relay serves the strict patterns.
 */
export function developmentDocument<T extends object>(document: T): T {
  const strict = new Set([CALLBACK_URL_DOC.pattern, ORIGIN_PATTERN]);
  const relax = (node: unknown): unknown => {
    if (Array.isArray(node)) return node.map(relax);
    if (node === null || typeof node !== "object") return node;
    const out: Record<string, unknown> = {};
    for (const [key, value] of Object.entries(node)) {
      out[key] =
        key === "pattern" && typeof value === "string" && strict.has(value) ? DEVELOPMENT_URL_PATTERN : relax(value);
    }
    return out;
  };
  const relaxed = relax(document) as T & { info?: Record<string, unknown> };
  relaxed.info = {
    ...relaxed.info,
    "x-genrelay-development-mode": true,
    description:
      `${String(relaxed.info?.description ?? "")} This relay runs with WEBHOOK_ALLOW_PRIVATE_NETWORKS=true (development): URLs it calls may be http and name loopback or private hosts. A production relay publishes https URLs of public hosts only.`.trim(),
  };
  return relaxed;
}
/** A URL the relay calls, as a development relay takes it: http or https, any host, no user or password. */
export const DEVELOPMENT_URL_PATTERN = "^https?://[^\\s/?#@]+(?:[/?#]|$)";
const CALLBACK_URL_RULE =
  "An absolute https URL of a public host (no user or password, no private or loopback address, no single-label or private name such as localhost or *.internal), at most 2048 characters; http and private hosts only with WEBHOOK_ALLOW_PRIVATE_NETWORKS=true (development).";
/** A media URL the upstream fetches: absolute https (src/services/intake.ts, checkMediaUrls; 400 invalid_media_url otherwise). */
const MEDIA_URL_DOC = { format: "uri", pattern: MEDIA_URL_PATTERN.source } as const;

const MAX_METADATA_KEYS = 16;
const MetadataSchema = maxKeys(
  z.record(
    z.string().max(256, { error: "keys are at most 256 characters" }),
    z.string({ error: "values must be strings" }),
  ),
  MAX_METADATA_KEYS,
  `at most ${MAX_METADATA_KEYS} keys`,
)
  .refine((m) => Buffer.byteLength(JSON.stringify(m)) <= 4096, { error: "at most 4 KiB serialized" })
  .openapi({
    ...keywords({ propertyNames: { maxLength: 256 } }),
    example: { order_id: "1234" },
    description: `String values, at most ${MAX_METADATA_KEYS} keys of at most 256 characters, and at most 4 KiB as JSON; echoed in every webhook and read.`,
  });

const RESERVED_NAMES = [...RESERVED_HEADERS, ...RESERVED_HEADER_PREFIXES.map((p) => `${p}*`)].join(", ");
const RESERVED_HEADER_PATTERN = `^(?:${RESERVED_HEADERS.map(caseless).join("|")})$|^(?:${RESERVED_HEADER_PREFIXES.map(caseless).join("|")})`;

/** Header name to value; checked by services/callback-headers (names, reserved names, values), which the document publishes. */
export const CallbackHeadersSchema = z
  .record(
    z.string(),
    z.string({ error: "values must be strings" }).openapi({ pattern: HEADER_VALUE.source, maxLength: 1024 }),
  )
  .superRefine((headers, ctx) => {
    for (const p of callbackHeaderProblems(headers, ""))
      ctx.addIssue({ code: "custom", path: p.field ? [p.field.slice(1)] : [], message: p.message });
  })
  .openapi({
    maxProperties: MAX_CALLBACK_HEADERS,
    ...keywords({ propertyNames: { pattern: HEADER_NAME.source, not: { pattern: RESERVED_HEADER_PATTERN } } }),
    example: { "X-Hook-Token": "3f9c2a7e5b" },
    description: `At most ${MAX_CALLBACK_HEADERS} headers sent with every attempt (a token a catch hook checks). Names: HTTP tokens of at most 64 characters, never ${RESERVED_NAMES}, and no name twice in another case; values: at most 1024 visible ASCII characters. Stored sealed; never shown again (reads show names only).`,
  });

/** Fields outside a generation body's own: a near miss is refused naming the field meant; any other is left to the catalog check. */
const nearMisses = (type: "image" | "video") => (body: Record<string, unknown>) => nearMissProblems(type, body);

/** Whole-body examples: /docs' "Try it out" sends them as they are, so they must be accepted (no placeholders). */
export const IMAGE_EXAMPLE = {
  model: "p-image",
  mode: "generate",
  prompt: "a lighthouse at dawn, watercolor",
  count: 1,
  callback_url: "https://example.com/hooks/genrelay",
  metadata: { order_id: "1234" },
};
export const VIDEO_EXAMPLE = {
  model: "v-video",
  video_mode: "t2v",
  prompt: "waves at night, slow pan",
  duration: 5,
  callback_url: "https://example.com/hooks/genrelay",
};

/** Documented as intake checks it; the checks themselves are the service's (validateCallbackUrl, 400 invalid_callback_url). */
const urlString = z
  .string({ error: "must be a string" })
  .openapi({ ...CALLBACK_URL_DOC, example: "https://example.com/hooks/genrelay" });
const callbackUrl = urlString.max(2048, { error: "at most 2048 characters" });

/** The relay's own fields, added to either upstream body. */
const relayFields = {
  callback_url: callbackUrl.optional().openapi({ description: `Receives the signed webhooks. ${CALLBACK_URL_RULE}` }),
  callback_events: uniqueItems(
    z
      .array(z.enum(TASK_EVENT_TYPES), { error: `must be an array of ${TASK_EVENT_TYPES.join(", ")}` })
      .min(1, { error: "must not be empty" }),
    "must not repeat an event type",
  )
    .optional()
    .openapi({ description: "Event types to send, each once; default: the three terminal ones." }),
  metadata: MetadataSchema.optional(),
  callback_headers: CallbackHeadersSchema.optional().openapi({
    description:
      "Headers sent with every attempt of this task's webhooks (the rules of CallbackHeaders). They need somewhere to go: a callback_url on the task or at least one endpoint of the client (POST /openapi/v1/webhooks/endpoints); otherwise 422 validation_error naming callback_headers. The schema cannot see the client's endpoints, so it does not require callback_url.",
  }),
  expires_after_seconds: z
    .number()
    .int()
    .min(1)
    .max(7 * 24 * 3600)
    .optional()
    .openapi({
      description:
        "A task still waiting in the relay this long after creation ends canceled (error.code expired), never sent upstream.",
    }),
} satisfies Record<(typeof RELAY_BODY_FIELDS)[number], z.ZodType>;

/** Longest prompt accepted (docs/contract.md, "Intake"): one client must not fill the disk every tenant shares. */
export const MAX_PROMPT_CHARS = 32_768;
/** At least 3 non-whitespace characters, anywhere in the prompt. */
export const PROMPT_PATTERN = /^(?:\s*\S){3}/u;

const prompt = matching(
  z.string({ error: "must be a string" }),
  PROMPT_PATTERN,
  "must contain at least 3 non-whitespace characters",
)
  .max(MAX_PROMPT_CHARS, { error: `must be at most ${MAX_PROMPT_CHARS} characters` })
  .openapi({
    example: "a lighthouse at dawn, watercolor",
    description: `At least 3 non-whitespace characters, at most ${MAX_PROMPT_CHARS} characters.`,
  });
/**
 * Intake bounds every string a task stores by its UTF-8 bytes (services/request-bounds.ts); JSON
 * Schema counts characters. A short parameter is held to the characters that always fit those
 * bytes (4 a character at most), by intake and the document alike; a URL to the bytes themselves,
 * which its characters are (`format: uri` is ASCII).
 */
const MAX_TEXT = Math.floor(REQUEST_BOUNDS.maxStringBytes / 4);
const text = () =>
  z.string({ error: "must be a string" }).max(MAX_TEXT, { error: `must be at most ${MAX_TEXT} characters` });
const url = () =>
  z
    .string({ error: "must be a string" })
    .max(REQUEST_BOUNDS.maxStringBytes, { error: `must be at most ${REQUEST_BOUNDS.maxStringBytes} characters` })
    .openapi(MEDIA_URL_DOC);

const model = (example: string) =>
  z
    .string({ error: "is required" })
    .min(1, { error: "is required" })
    .max(MAX_TEXT, { error: `must be at most ${MAX_TEXT} characters` })
    .openapi({
      example,
      description:
        "A model id of the upstream's catalog (GET /openapi/v1/models); checked at intake when the catalog is cached.",
    });
const mediaUrls = z
  .array(url(), { error: "must be an array of URLs" })
  .min(1, { error: "must not be empty" })
  .max(REQUEST_BOUNDS.maxArrayItems, { error: `must have at most ${REQUEST_BOUNDS.maxArrayItems} items` })
  .openapi({ description: "Absolute https URLs the upstream fetches." });

/** A parameter whose allowed values the model's catalog entry lists: said where the document names it. */
const fromCatalog = (field: keyof typeof CAPABILITIES, what: string) =>
  `${what} One of the values the model's catalog entry lists under ${CAPABILITIES[field]!.join(" or ")} (GET /openapi/v1/models); checked at intake when the catalog is cached.`;

/**
 * The rule for fields a body does not list: /openapi.json publishes `additionalProperties: false`,
 * and this says what intake does beyond it, so the document never promises more than intake takes.
 */
const PASS_THROUGH = `Fields not listed here are refused by this schema, and a near miss of a listed one (callbak_url, promt) always by the relay (422, naming the field meant). The one exception is a model parameter this document does not list yet: the relay passes it to the upstream when the model's entry in GET /openapi/v1/models names it (as a key such as seeds, or in its parameters list), or when no catalog is cached (then the upstream decides). No text, field names included, may contain NUL (\\u0000). A passed-through value is bounded like every value (strings ${REQUEST_BOUNDS.maxStringBytes} bytes of UTF-8, lists ${REQUEST_BOUNDS.maxArrayItems} items, objects ${REQUEST_BOUNDS.maxObjectKeys} keys), and a task stores at most ${REQUEST_BOUNDS.maxStoredBytes / 1024} KiB in all (413 payload_too_large).`;
const passThrough = (type: "image" | "video") => ({
  description: `${type === "image" ? "An image" : "A video"} generation: the upstream's body plus the relay's callback fields. ${PASS_THROUGH}`,
  "x-pass-through": {
    source: "GET /openapi/v1/models",
    rule: "a field the model's catalog entry names is passed to the upstream",
  },
});

const imageShape = {
  model: model("p-image"),
  mode: z
    .enum(["generate", "edit"], { error: "must be generate or edit" })
    .openapi({ description: fromCatalog("mode", "generate, or edit (needs image_urls).") }),
  prompt,
  count: z.literal(1, { error: "must be exactly 1" }),
  image_urls: mediaUrls.optional(),
  aspect_ratio: text()
    .optional()
    .openapi({ description: fromCatalog("aspect_ratio", "Aspect ratio such as 16:9.") }),
  size: text()
    .optional()
    .openapi({ description: fromCatalog("size", "Output size such as 1K.") }),
  resolution: text()
    .optional()
    .openapi({ description: fromCatalog("resolution", "Output resolution, for models that take it instead of size.") }),
  quality: text()
    .optional()
    .openapi({ description: fromCatalog("quality", "Image quality (low, medium, high, …).") }),
  ...relayFields,
} satisfies Record<(typeof IMAGE_BODY_FIELDS)[number], z.ZodType>;

const editNeedsImages = requiredWhen("image_urls", "mode", "edit");

export const ImageGenerationBody = closedBody(imageShape, nearMisses("image"))
  .superRefine(editNeedsImages.check)
  .superRefine(noNulBody, whenObject)
  .openapi("ImageGenerationRequest", { ...editNeedsImages.schema, ...passThrough("image"), example: IMAGE_EXAMPLE });

const videoShape = {
  model: model("v-video"),
  video_mode: z
    .string({ error: "is required" })
    .min(1, { error: "is required" })
    .max(MAX_TEXT, { error: `must be at most ${MAX_TEXT} characters` })
    .openapi({
      example: "t2v",
      description: fromCatalog(
        "video_mode",
        "How the video is made: t2v (text), i2v_* and *ref modes (need image_urls), v2v_* modes (need source_video_url).",
      ),
    }),
  prompt,
  image_urls: mediaUrls.optional(),
  source_video_url: url()
    .optional()
    .openapi({ description: "Absolute https URL of the video a v2v mode starts from." }),
  duration: z
    .number({ error: "must be a number of seconds" })
    .positive()
    .optional()
    .openapi({ description: fromCatalog("duration", "Seconds.") }),
  resolution: text()
    .optional()
    .openapi({ description: fromCatalog("resolution", "Output resolution such as 720p.") }),
  ratio: text()
    .optional()
    .openapi({
      description: fromCatalog("ratio", "Aspect ratio such as 16:9 (the upstream's other name for aspect_ratio)."),
    }),
  aspect_ratio: text()
    .optional()
    .openapi({ description: fromCatalog("aspect_ratio", "Aspect ratio such as 16:9.") }),
  ...relayFields,
} satisfies Record<(typeof VIDEO_BODY_FIELDS)[number], z.ZodType>;

export const VideoGenerationBody = closedBody(videoShape, nearMisses("video"))
  .superRefine(noNulBody, whenObject)
  .openapi("VideoGenerationRequest", { ...passThrough("video"), example: VIDEO_EXAMPLE });

/** Problems named for a body of the relay's own: enough to say what is wrong, bounded whatever the body holds. */
const MAX_UNKNOWN_FIELDS_NAMED = 16;

/** A body of the relay's own (no upstream fields, nothing passed through): every field outside it is refused, a near miss naming the field meant. */
export function ownBody<S extends z.ZodRawShape>(shape: S, noun = "field of this request") {
  return closedBody(shape, (body, known) =>
    Object.keys(body)
      .filter((field) => !known.includes(field))
      .slice(0, MAX_UNKNOWN_FIELDS_NAMED)
      .map((field) => {
        const meant = meantField(field, known);
        return meant
          ? { field, message: `is not a ${noun}; did you mean "${meant}"?`, did_you_mean: meant }
          : { field, message: `is not a ${noun}` };
      }),
  );
}

/** A URL the relay will call (a webhook test, a notification URL): documented as intake checks it. */
export const publicUrl = (description: string) =>
  urlString.openapi({ description: `${description} ${CALLBACK_URL_RULE}` });

export const ERROR_CODES = Object.keys(ERROR_STATUS) as [ErrorCode, ...ErrorCode[]];

export const ErrorSchema = z
  .object({
    error: z.object({
      code: z.enum(ERROR_CODES).openapi({
        example: "validation_error",
        description: "What went wrong, one of the relay's codes (the upstream's table plus the relay's own).",
      }),
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
    callback: z.object({
      url: z.string().nullable(),
      events: z.array(z.string()),
      delivery: DeliverySummarySchema.optional(),
    }),
    queue_position: z.number().int().optional(),
    estimated_completion_at: z.string().nullable().openapi({
      format: "date-time",
      description:
        "When the task should end (ISO-8601, UTC), from the model's recent durations and, while waiting, its place in the upstream account's queue; never in the past. Null while unknown (too few tasks of the model have finished) and once the task has ended.",
      example: "2026-01-01T12:00:40.000Z",
    }),
    files: z
      .array(
        z.object({
          source_url: z.string(),
          url: z
            .string()
            .optional()
            .openapi({ description: "A presigned GET valid url_expires_in seconds, or public_base_url + key." }),
          key: z.string().optional(),
          bytes: z.number().int().optional(),
          sha256: z.string().optional(),
          content_type: z.string().optional(),
          link: z.string().optional().openapi({
            format: "uri",
            description:
              "With PUBLIC_BASE_URL set on the relay: the copy's lasting link, {PUBLIC_BASE_URL}/files/{token} (GET /files/{token}). It redirects to a freshly presigned URL for as long as the file is kept, so it outlives url; it ends (404) when the task is pruned or the bucket removed. Unguessable and for this file only: share it as you would the file.",
          }),
          error: z.string().optional().openapi({ description: "Why this file could not be copied (after retries)." }),
        }),
      )
      .optional()
      .openapi({
        description:
          "With a bucket set (PUT /openapi/v1/storage): the output's files as copied into it, in the output's order.",
      }),
  })
  .openapi("TaskData");

const UsageSchema = z
  .object({ points_charged: z.number().nullable(), points_refunded: z.number().nullable() })
  .openapi("Usage");

export const TaskViewSchema = z
  .object({
    data: TaskDataSchema,
    output: z.unknown().openapi({ description: "The upstream output, verbatim." }),
    usage: UsageSchema,
  })
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
  cursor: z
    .string()
    .max(200)
    .refine((v) => !hasNul(v), { error: "is not a cursor this relay gave out" })
    .optional()
    .openapi({ param: { name: "cursor", in: "query" } }),
  type: z
    .enum(["image", "video"], { error: "must be image or video" })
    .optional()
    .openapi({ param: { name: "type", in: "query" } }),
  status: z
    .enum(TASK_STATUSES, { error: `must be one of ${TASK_STATUSES.join(", ")}` })
    .optional()
    .openapi({ param: { name: "status", in: "query" } }),
});

/** A task read: the status the caller last saw, which a `Prefer: wait` waits to change. */
export const TaskReadQuery = z.object({
  status: z
    .enum(TASK_STATUSES, { error: `must be one of ${TASK_STATUSES.join(", ")}` })
    .optional()
    .openapi({
      param: {
        name: "status",
        in: "query",
        description: "With Prefer: wait=N, the status you last saw: the answer comes as soon as the task's differs.",
      },
    }),
});

/** A position in the client's event feed: GET /openapi/v1/events's next_cursor (its event stream starts there too). */
export const FeedAfterParam = z
  .string()
  .max(100)
  .optional()
  .openapi({ param: { name: "after", in: "query" } });

export const TaskIdParam = z.object({
  id: z
    .string()
    .min(1)
    .max(200)
    .refine((v) => !hasNul(v), { error: "must not contain NUL" })
    .openapi({
      param: { name: "id", in: "path", description: "The task's id (task_…), as the creation answered it." },
      example: "task_01jf3y8k2m9q7r5t3v1w0x6z4a",
    }),
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
  // 429 and 503 say when to come back where the relay knows (concurrent_limit, rate_limit, storage_unavailable).
  const headers = (s: number) => (s === 429 || s === 503 ? { headers: headerRefs("Retry-After") } : {});
  return Object.fromEntries(
    [...new Set([...statuses, 500, 503])].map((s) => [
      s,
      {
        description: descriptions[s] ?? "Error",
        ...headers(s),
        content: { "application/json": { schema: ErrorSchema } },
      },
    ]),
  );
}

/** Every /openapi/v1 operation but the public ones takes an API key (app.ts installs bearerAuth). */
export const apiKeySecurity = [{ bearerAuth: [] }];
/** A JSON request or response body of this schema. */
export const json = <T extends z.ZodType>(schema: T) => ({ "application/json": { schema } });
/** A required JSON request body of this schema. */
export const jsonBody = <T extends z.ZodType>(schema: T) => ({ required: true, content: json(schema) });
