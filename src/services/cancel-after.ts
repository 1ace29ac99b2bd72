import { ApiError } from "./errors.js";

/** The longest deadline a creation may ask for, as expires_after_seconds allows (7 days). */
const MAX_SECONDS = 7 * 24 * 3600;
const FORMAT = /^(?:(\d{1,6})h)?(?:(\d{1,8})m)?(?:(\d{1,9})s)?$/;
const MESSAGE = "must be a duration such as 90s, 5m or 1h30m (hours, minutes, seconds; 1 s to 7 days)";

const invalid = (message: string) =>
  new ApiError("validation_error", `Cancel-After ${message}.`, [{ field: "Cancel-After", message }]);

/**
 * Replicate's `Cancel-After` header (`90s`, `5m`, `1h30m`) as seconds: another spelling of
 * `expires_after_seconds` (docs/contract.md, "Creating a task"). A bad value is 422 naming the format.
 */
export function cancelAfterSeconds(header: string): number {
  const m = FORMAT.exec(header.trim().toLowerCase());
  if (!m || (m[1] === undefined && m[2] === undefined && m[3] === undefined)) throw invalid(MESSAGE);
  const seconds = Number(m[1] ?? 0) * 3600 + Number(m[2] ?? 0) * 60 + Number(m[3] ?? 0);
  if (seconds < 1 || seconds > MAX_SECONDS) throw invalid(MESSAGE);
  return seconds;
}

/**
 * The creation's body with the header's deadline as `expires_after_seconds` (so a replay with the
 * same header is the same body). Both spellings at once must agree.
 */
export function withCancelAfter(body: Record<string, unknown>, header: string | undefined): Record<string, unknown> {
  if (header === undefined) return body;
  const seconds = cancelAfterSeconds(header);
  const given = body.expires_after_seconds;
  if (given !== undefined && given !== seconds)
    throw invalid(`says ${seconds} s while expires_after_seconds says ${String(given)}: send one of them`);
  return { ...body, expires_after_seconds: seconds };
}
