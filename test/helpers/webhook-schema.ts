import { Ajv2020, type ValidateFunction } from "ajv/dist/2020.js";
import { webhookDocument } from "../../src/http/webhook-schemas.js";

/**
 * Validates a body the relay sent against its OpenAPI `webhooks` schema with ajv (not the relay's
 * own zod): the document is generated once, and each event type's request body schema compiled.
 */

export function webhookValidators(doc: Record<string, any> = webhookDocument()): Map<string, ValidateFunction> {
  const ajv = new Ajv2020({ strict: false, allErrors: true });
  ajv.addFormat("date-time", (s: string) => !Number.isNaN(Date.parse(s)) && /^\d{4}-\d{2}-\d{2}T/.test(s));
  // Without it ajv warns `unknown format "uri"` once per compile, hundreds of lines in a run.
  ajv.addFormat("uri", (s: string) => URL.canParse(s));
  ajv.addSchema({ ...doc, $id: "openapi.json" });
  const out = new Map<string, ValidateFunction>();
  for (const type of Object.keys(doc.webhooks ?? {})) {
    out.set(
      type,
      ajv.compile({ $ref: `openapi.json#/webhooks/${type}/post/requestBody/content/application~1json/schema` }),
    );
  }
  return out;
}

/** Problems of one body (empty when valid); a body of no documented type is a problem too. */
export function webhookBodyProblems(body: string): string[] {
  let parsed: { type?: unknown };
  try {
    parsed = JSON.parse(body) as { type?: unknown };
  } catch {
    return ["body is not JSON"];
  }
  const validate = typeof parsed.type === "string" ? validators.get(parsed.type) : undefined;
  if (!validate) return [`no webhooks schema for type ${JSON.stringify(parsed.type)}`];
  const type = parsed.type as string;
  return validate(parsed)
    ? []
    : (validate.errors ?? []).map((e) => `${type}${e.instancePath} ${e.message ?? ""} ${JSON.stringify(e.params)}`);
}

/** Compiled when the helper is imported: compiling inside a receiver's handler would cost an attempt its time limit. */
const validators = webhookValidators();
