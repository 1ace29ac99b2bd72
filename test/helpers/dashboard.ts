import { expect } from "vitest";
import type { TestRelay } from "./relay.js";

/** The cookies a response sets, by name, with their raw attribute strings. */
export function setCookies(res: Response): Map<string, { value: string; raw: string }> {
  const out = new Map<string, { value: string; raw: string }>();
  for (const raw of res.headers.getSetCookie()) {
    const [pair] = raw.split(";");
    const eq = pair!.indexOf("=");
    out.set(pair!.slice(0, eq).trim(), { value: pair!.slice(eq + 1).trim(), raw });
  }
  return out;
}

/** The CSRF token of the first form on a page. */
export function csrfOf(page: string): string {
  const m = /name="csrf" value="([^"]+)"/.exec(page);
  if (!m) throw new Error("no csrf field on the page");
  return m[1]!;
}

/** A browser-like visitor: keeps cookies, sends forms URL-encoded, never follows redirects. */
export class Visitor {
  readonly cookies = new Map<string, string>();
  constructor(
    readonly t: TestRelay,
    readonly base = "http://relay.test",
  ) {}

  async request(path: string, init: RequestInit = {}): Promise<Response> {
    const headers = new Headers(init.headers);
    if (this.cookies.size > 0) headers.set("Cookie", [...this.cookies].map(([k, v]) => `${k}=${v}`).join("; "));
    const res = await this.t.relay.app.request(`${this.base}${path}`, { ...init, headers, redirect: "manual" });
    for (const [name, { value, raw }] of setCookies(res)) {
      if (/max-age=0/i.test(raw) || value === "") this.cookies.delete(name);
      else this.cookies.set(name, value);
    }
    return res;
  }

  get(path: string): Promise<Response> {
    return this.request(path);
  }

  post(path: string, fields: Record<string, string>): Promise<Response> {
    return this.request(path, {
      method: "POST",
      body: new URLSearchParams(fields),
      headers: { "Content-Type": "application/x-www-form-urlencoded" },
    });
  }

  /** GETs a page (expects 200) and returns its HTML. */
  async page(path: string): Promise<string> {
    const res = await this.get(path);
    const text = await res.text();
    expect(res.status, text.slice(0, 500)).toBe(200);
    return text;
  }

  /** Posts a form found on `fromPath`, with that page's CSRF token. */
  async submit(fromPath: string, action: string, fields: Record<string, string> = {}): Promise<Response> {
    const csrf = csrfOf(await this.page(fromPath));
    return this.post(action, { csrf, ...fields });
  }

  async signIn(apiKey: string): Promise<Response> {
    const form = await this.page("/dashboard");
    return this.post("/dashboard/sign-in", { csrf: csrfOf(form), api_key: apiKey });
  }
}

/** A visitor signed in as the client with this key (expects the 303 to /dashboard). */
export async function signedIn(t: TestRelay, apiKey: string, base?: string): Promise<Visitor> {
  const v = new Visitor(t, base);
  const res = await v.signIn(apiKey);
  expect(res.status).toBe(303);
  expect(res.headers.get("location")).toBe("/dashboard");
  return v;
}
