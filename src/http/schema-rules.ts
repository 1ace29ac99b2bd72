import { createRoute, z, type RouteConfig } from "@hono/zod-openapi";
import { fieldCountProblem, REQUEST_BOUNDS } from "../services/request-bounds.js";

/**
 * Rules that intake checks and /openapi.json publishes, each declared once: the zod check that
 * refuses a request and the JSON Schema keyword a client validates with come from the same call,
 * so the document cannot be looser or stricter than intake (docs/contract.md, "The published
 * contract"). zod-to-openapi renders only a schema's own structure (properties, `.regex`, `.max`);
 * what a refinement checks is published here beside it.
 */

export interface UnknownFieldProblem {
  field: string;
  message: string;
  did_you_mean?: string;
}

/** Refinements that name problems also when other fields failed (`promt` beside "prompt is required"). */
export const whenObject = {
  when: (payload: { value: unknown }) =>
    typeof payload.value === "object" && payload.value !== null && !Array.isArray(payload.value),
};

/**
 * An object body whose document lists exactly its fields (`additionalProperties: false`).
 * `unknownFields` names the problems of the fields outside them (given the body and the known
 * names): a field it names is refused; one it leaves out goes through to a later check (a
 * generation body's model parameter, which the catalog check decides on).
 */
export function closedBody<S extends z.ZodRawShape>(
  shape: S,
  unknownFields: (body: Record<string, unknown>, known: readonly string[]) => UnknownFieldProblem[],
) {
  const known = Object.keys(shape);
  return z
    .looseObject(shape)
    .superRefine((body, ctx) => {
      // Counted before any per-field work, so a body of thousands of names costs one bounded pass.
      const tooMany = fieldCountProblem(body);
      if (tooMany) {
        ctx.addIssue({ code: "custom", path: [tooMany.field], message: tooMany.message });
        return;
      }
      for (const p of unknownFields(body, known)) {
        ctx.addIssue({
          code: "custom",
          path: [p.field],
          message: p.message,
          params: p.did_you_mean ? { did_you_mean: p.did_you_mean } : {},
        });
      }
    }, whenObject)
    .openapi({ additionalProperties: false, maxProperties: REQUEST_BOUNDS.maxFields });
}

/**
 * JSON Schema keywords that zod-to-openapi's metadata type does not list (it predates JSON Schema
 * 2020-12 in OpenAPI 3.1: `propertyNames`, `if`/`then`); the generator copies metadata as given.
 */
export const keywords = (k: Record<string, unknown>) => k as { description?: string };

/** `field` is required when `when` is `value`: the intake check and its JSON Schema `if`/`then`. */
export function requiredWhen(field: string, when: string, value: string) {
  return {
    check: (body: Record<string, unknown>, ctx: z.RefinementCtx) => {
      if (body[when] === value && body[field] === undefined)
        ctx.addIssue({ code: "custom", path: [field], message: `is required when ${when} is ${value}` });
    },
    schema: keywords({
      if: { properties: { [when]: { const: value } }, required: [when] },
      then: { required: [field] },
    }),
  };
}

/** An array without repeats: refused by intake, `uniqueItems` in the document. */
export function uniqueItems<T extends z.ZodArray<z.ZodType>>(array: T, message: string) {
  return array.refine((a) => new Set(a).size === a.length, { error: message }).openapi({ uniqueItems: true });
}

/** An object of at most `max` keys: refused by intake, `maxProperties` in the document. */
export function maxKeys<T extends z.ZodRecord>(record: T, max: number, message: string) {
  return record
    .refine((m) => Object.keys(m as object).length <= max, { error: message })
    .openapi({ maxProperties: max });
}

/**
 * A string matching `pattern`, checked with the pattern's own flags and published as its source.
 * JSON Schema validators read patterns as Unicode (ajv compiles them with the `u` flag), so the
 * patterns given here carry it too: intake and a client count characters alike.
 */
export function matching<T extends z.ZodString>(schema: T, pattern: RegExp, message: string): T {
  return schema.regex(pattern, { error: message }).openapi({ pattern: pattern.source }) as T;
}

/** A JSON Schema pattern matching `word` in any case (`[Hh][Oo][Ss][Tt]`): patterns have no flags. Valid as a Unicode pattern (no `\-`). */
export function caseless(word: string): string {
  return [...word]
    .map((ch) =>
      ch.toLowerCase() !== ch.toUpperCase()
        ? `[${ch.toUpperCase()}${ch.toLowerCase()}]`
        : ch.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"),
    )
    .join("");
}

export type ResponseHeaderName =
  | "X-Request-Id"
  | "Location"
  | "Idempotent-Replayed"
  | "Retry-After"
  | "Age"
  | "Cache-Control"
  | "ETag"
  | "Preference-Applied";

/** Response headers, documented once under components.headers and referenced by name. */
export const RESPONSE_HEADERS: Record<ResponseHeaderName, { description: string; schema: Record<string, unknown> }> = {
  "X-Request-Id": {
    description:
      "This request's id (req_…), also in error.request_id: quote it to support. Always the relay's own; a caller's X-Request-Id is ignored.",
    schema: { type: "string", pattern: "^req_[A-Za-z0-9_-]+$" },
  },
  Location: {
    description:
      "On a creation, the absolute URL of the task (GET /openapi/v1/tasks/{id}), under PUBLIC_BASE_URL when the relay has one. On GET /files/{token}, a URL of the copied file: presigned for 15 minutes, or the bucket's public_base_url + key.",
    schema: { type: "string", format: "uri" },
  },
  "Idempotent-Replayed": {
    description:
      "true when this answer replays an earlier request with the same Idempotency-Key and body, false for a new task.",
    schema: { type: "string", enum: ["true", "false"] },
  },
  "Retry-After": {
    description: "Seconds to wait before retrying, when the relay knows.",
    schema: { type: "integer", minimum: 0 },
  },
  Age: {
    description: "Seconds since the catalog was fetched from the upstream (served stale while the upstream fails).",
    schema: { type: "integer", minimum: 0 },
  },
  "Cache-Control": {
    description:
      "How long a cache may keep this answer (public keys: five minutes; a file link's redirect: no-store, never kept).",
    schema: { type: "string", example: "public, max-age=300" },
  },
  ETag: {
    description: "This answer's version: send it back in If-None-Match to get 304 while it has not changed.",
    schema: { type: "string" },
  },
  "Preference-Applied": {
    description:
      "wait=N when the request's Prefer: wait was honoured (RFC 7240): the answer waited up to N seconds for the task to end or change. N is what was honoured: a wait over 60 is honoured as wait=60.",
    schema: { type: "string", pattern: "^wait=\\d+$", example: "wait=30" },
  },
};

export const headerRefs = (...names: ResponseHeaderName[]) =>
  Object.fromEntries(names.map((n) => [n, { $ref: `#/components/headers/${n}` }]));

/**
 * createRoute for the published API: an operationId is required (generated SDKs name their methods
 * by it), and every response documents X-Request-Id, which every answer carries.
 */
export function apiRoute<R extends RouteConfig & { operationId: string }>(route: R): R {
  const responses = Object.fromEntries(
    Object.entries(route.responses).map(([status, response]) => {
      if ("$ref" in response) return [status, response];
      return [
        status,
        {
          ...response,
          headers: { ...headerRefs("X-Request-Id"), ...(response.headers as Record<string, unknown> | undefined) },
        },
      ];
    }),
  );
  return createRoute({ ...route, responses }) as R;
}
