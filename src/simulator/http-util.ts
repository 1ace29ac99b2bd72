/** Small request helpers shared by the simulator's routes. */
import type { Context } from "hono";
import { invalidRequest } from "./errors.js";

const MAX_BODY_CHARS = 1024 * 1024;
const JSON_CONTENT_TYPE = /^application\/(?:[\w.+-]+\+)?json\s*(?:;|$)/iu;

/** Reads the body as a JSON object; every malformed shape is a 400, never a 500. */
export async function readJsonObject(c: Context): Promise<Record<string, unknown>> {
  const contentType = c.req.header("content-type") ?? "";
  if (!JSON_CONTENT_TYPE.test(contentType.trim())) throw invalidRequest("Content-Type must be application/json");
  let text: string;
  try {
    text = await c.req.text();
  } catch {
    throw invalidRequest("Request body could not be read");
  }
  if (text.length > MAX_BODY_CHARS) throw invalidRequest("Request body is too large");
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw invalidRequest("Request body is not valid JSON");
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) {
    throw invalidRequest("Request body must be a JSON object");
  }
  return parsed as Record<string, unknown>;
}

export function encodeCursor(taskId: string): string {
  return Buffer.from(taskId, "utf8").toString("base64url");
}

export function decodeCursor(cursor: string): string {
  return Buffer.from(cursor, "base64url").toString("utf8");
}
