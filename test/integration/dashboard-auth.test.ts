import { createHash } from "node:crypto";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { find as findSession } from "../../src/db/sqlite/sessions.js";
import { revokeClient } from "../../src/services/clients.js";
import { csrfOf, setCookies, signedIn, Visitor } from "../helpers/dashboard.js";
import { createTestRelay, type TestRelay } from "../helpers/relay.js";

let t: TestRelay;
beforeEach(() => {
  t = createTestRelay();
});
afterEach(async () => {
  await t.close();
});

const CSP =
  "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; media-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";
const sha256 = (s: string) => createHash("sha256").update(s).digest("hex");

describe("dashboard sign-in", () => {
  it("GET /dashboard without a session is the sign-in form: a password field named api_key, posted, under a strict CSP", async () => {
    const res = await t.relay.app.request("http://relay.test/dashboard");
    const page = await res.text();
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^text\/html/);
    expect(res.headers.get("content-security-policy")).toBe(CSP);
    expect(res.headers.get("x-frame-options")).toBe("DENY");
    expect(res.headers.get("cache-control")).toBe("no-store");
    expect(page).toMatch(/<form class="panel" method="post" action="\/dashboard\/sign-in"/);
    expect(page).toMatch(
      /<label for="api_key">API key<\/label>\s*<input id="api_key" name="api_key" type="password" required/,
    );
    // No external resource: every src/href is a relay path.
    for (const [, url] of page.matchAll(/(?:src|href)="([^"]+)"/g)) expect(url).toMatch(/^(\/|#)/);
    // The sign-in form's own CSRF token is a double-submit cookie, HttpOnly and SameSite=Strict.
    const pre = setCookies(res).get("genrelay_signin")!;
    expect(pre.value).toBe(csrfOf(page));
    expect(pre.raw).toMatch(/; HttpOnly/);
    expect(pre.raw).toMatch(/; SameSite=Strict/);
    expect(pre.raw).toMatch(/; Path=\/dashboard/);
  });

  it("a good key opens a session: HttpOnly, SameSite=Strict, Path=/dashboard cookie; only its hash is stored; the key is shown nowhere", async () => {
    const { apiKey, id } = t.client("acme");
    const v = new Visitor(t);
    const res = await v.signIn(apiKey);
    expect(res.status).toBe(303);
    expect(res.headers.get("location")).toBe("/dashboard");
    const cookie = setCookies(res).get("genrelay_session")!;
    expect(cookie.raw).toMatch(
      /^genrelay_session=[\w-]{43}; Max-Age=43200; Path=\/dashboard; HttpOnly; SameSite=Strict$/,
    );
    expect(cookie.raw).not.toMatch(/Secure/);
    const row = findSession(t.database.db, sha256(cookie.value))!;
    expect(row).toMatchObject({
      clientId: id,
      createdAt: t.clock.now(),
      expiresAt: t.clock.now() + 12 * 3600_000,
      revokedAt: null,
    });
    const raw = t.database.sqlite.prepare("select * from dashboard_sessions").all();
    expect(JSON.stringify(raw)).not.toContain(cookie.value);

    const page = await v.page("/dashboard");
    expect(page).toContain("<h1>Tasks</h1>");
    expect(page).toContain('<span class="who">acme</span>');
    expect(page).not.toContain(apiKey);
    expect(res.headers.get("location")).not.toContain(apiKey);
  });

  it("over https the cookie is also Secure", async () => {
    const { apiKey } = t.client();
    const v = new Visitor(t, "https://relay.test");
    const res = await v.signIn(apiKey);
    expect(setCookies(res).get("genrelay_session")!.raw).toMatch(/; Secure/);
  });

  it("a bad key is 401 with the form again, no session, and the key not echoed", async () => {
    t.client();
    const v = new Visitor(t);
    const res = await v.signIn("grk_not-a-real-key-at-all");
    const page = await res.text();
    expect(res.status).toBe(401);
    expect(page).toContain("That API key is not valid, or its client was revoked.");
    expect(page).not.toContain("grk_not-a-real-key");
    expect(setCookies(res).has("genrelay_session")).toBe(false);
  });

  it("refuses a sign-in without the form's CSRF token (403), even with a good key", async () => {
    const { apiKey } = t.client();
    const v = new Visitor(t);
    await v.page("/dashboard");
    const res = await v.post("/dashboard/sign-in", { csrf: "forged", api_key: apiKey });
    expect(res.status).toBe(403);
    expect(await res.text()).toContain("did not come from the dashboard");
    const bare = await new Visitor(t).post("/dashboard/sign-in", { api_key: apiKey });
    expect(bare.status).toBe(403);
  });

  it("slows failed sign-ins per address (the 11th wrong key in 15 minutes is 429), but a valid key always signs in", async () => {
    const { apiKey } = t.client();
    const v = new Visitor(t);
    for (let i = 0; i < 10; i++) expect((await v.signIn(`grk_wrong${i}`)).status).toBe(401);
    const limited = await v.signIn("grk_wrong10");
    expect(limited.status).toBe(429);
    expect(Number(limited.headers.get("retry-after"))).toBeGreaterThan(0);
    // Everyone behind one proxy shares the address: the right key is never locked out.
    expect((await v.signIn(apiKey)).status).toBe(303);
    t.clock.advance(15 * 60_000 + 1);
    expect((await new Visitor(t).signIn("grk_wrong11")).status).toBe(401);
  });
});

describe("dashboard sessions", () => {
  it("every POST needs the session's CSRF token: missing or wrong is 403 and changes nothing", async () => {
    const { apiKey, secret } = t.client();
    const v = await signedIn(t, apiKey);
    for (const fields of [{}, { csrf: "x".repeat(43) }] as Record<string, string>[]) {
      const res = await v.post("/dashboard/webhooks/rotate", fields);
      expect(res.status).toBe(403);
      expect(await res.text()).toContain("did not come from the dashboard");
    }
    const row = t.database.sqlite.prepare("select webhook_secret from clients").get() as { webhook_secret: string };
    expect(row.webhook_secret).toBe(secret);
    // Another session's token does not work either.
    const other = await signedIn(t, apiKey);
    const foreign = csrfOf(await other.page("/dashboard/webhooks"));
    expect((await v.post("/dashboard/webhooks/rotate", { csrf: foreign })).status).toBe(403);
    expect((await v.submit("/dashboard/webhooks", "/dashboard/webhooks/rotate")).status).toBe(200);
  });

  it("sign-out revokes the session and clears the cookie; the old cookie then opens nothing", async () => {
    const { apiKey } = t.client();
    const v = await signedIn(t, apiKey);
    const token = v.cookies.get("genrelay_session")!;
    const res = await v.submit("/dashboard", "/dashboard/sign-out");
    expect(res.status).toBe(303);
    expect(setCookies(res).get("genrelay_session")!.raw).toMatch(/Max-Age=0/);
    expect(findSession(t.database.db, sha256(token))!.revokedAt).toBe(t.clock.now());

    const replay = new Visitor(t);
    replay.cookies.set("genrelay_session", token);
    expect(await replay.page("/dashboard")).toContain('name="api_key"');
    const usage = await replay.get("/dashboard/usage");
    expect(usage.status).toBe(303);
    expect(usage.headers.get("location")).toBe("/dashboard");
    expect((await replay.post("/dashboard/webhooks/rotate", { csrf: "x" })).status).toBe(401);
  });

  it("revoking the client ends its sessions at once", async () => {
    const { apiKey, id } = t.client();
    const v = await signedIn(t, apiKey);
    expect(await v.page("/dashboard/usage")).toContain("<h1>Usage</h1>");
    await revokeClient(t.relay.deps, id);
    const res = await v.get("/dashboard/usage");
    expect(res.status).toBe(303);
    expect(await v.page("/dashboard")).toContain('name="api_key"');
    expect((await new Visitor(t).signIn(apiKey)).status).toBe(401);
  });

  it("expires after 2 h idle, and after 12 h even when in use", async () => {
    const { apiKey } = t.client();
    const idle = await signedIn(t, apiKey);
    t.clock.advance(2 * 3600_000);
    expect((await idle.get("/dashboard/usage")).status).toBe(303);

    const busy = await signedIn(t, apiKey);
    for (let h = 0; h < 11; h++) {
      t.clock.advance(3600_000);
      expect((await busy.get("/dashboard/usage")).status, `hour ${h + 1}`).toBe(200);
    }
    t.clock.advance(3600_000);
    expect((await busy.get("/dashboard/usage")).status).toBe(303);
  });

  it("serves its CSS and JS itself, cacheable, and pages link only to those", async () => {
    const { apiKey } = t.client();
    const v = await signedIn(t, apiKey);
    const page = await v.page("/dashboard");
    const css = /<link rel="stylesheet" href="(\/dashboard\/assets\/app\.[0-9a-f]{10}\.css)">/.exec(page)![1]!;
    const js = /<script src="(\/dashboard\/assets\/app\.[0-9a-f]{10}\.js)" defer>/.exec(page)![1]!;
    for (const [path, type] of [
      [css, "text/css"],
      [js, "text/javascript"],
    ] as const) {
      const res = await t.relay.app.request(path);
      expect(res.status).toBe(200);
      expect(res.headers.get("content-type")).toContain(type);
      expect(res.headers.get("cache-control")).toContain("immutable");
    }
  });
});
