import type { Hono } from "hono";
import { html } from "hono/html";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";

/**
 * GET /docs: Swagger UI over /openapi.json, with its files served by the relay from the
 * swagger-ui-dist package. Loading them from a CDN rendered a blank page on machines without
 * internet, and would let a third party's script run next to the API reference.
 */
const DIST = dirname(createRequire(import.meta.url).resolve("swagger-ui-dist/package.json"));

const INIT = `window.addEventListener("load", function () {
  window.ui = SwaggerUIBundle({ url: "/openapi.json", dom_id: "#swagger-ui", deepLinking: true });
});
`;

const FILES: Record<string, { file?: string; text?: string; type: string }> = {
  "swagger-ui.css": { file: "swagger-ui.css", type: "text/css; charset=utf-8" },
  "swagger-ui-bundle.js": { file: "swagger-ui-bundle.js", type: "text/javascript; charset=utf-8" },
  "init.js": { text: INIT, type: "text/javascript; charset=utf-8" },
};

/** Swagger UI sets inline styles and data: icons; scripts still come only from the relay. */
const DOCS_CSP =
  "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'";

export function registerDocs(app: Hono<any>): void {
  // eslint-disable-line @typescript-eslint/no-explicit-any
  const cache = new Map<string, string>();
  app.get("/docs/assets/:name", (c) => {
    const name = c.req.param("name");
    const entry = Object.hasOwn(FILES, name) ? FILES[name]! : undefined;
    if (!entry) return c.notFound();
    let body = cache.get(name);
    if (body === undefined) {
      body = entry.text ?? readFileSync(join(DIST, entry.file!), "utf8");
      cache.set(name, body);
    }
    return c.body(body, 200, {
      "Content-Type": entry.type,
      "Cache-Control": "public, max-age=3600",
      "X-Content-Type-Options": "nosniff",
    });
  });
  app.get("/docs", (c) => {
    c.header("Content-Security-Policy", DOCS_CSP);
    return c.html(html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>genrelay API</title>
<link rel="stylesheet" href="/docs/assets/swagger-ui.css">
</head>
<body>
<div id="swagger-ui"></div>
<noscript>The rendered reference needs JavaScript; the document itself is at <a href="/openapi.json">/openapi.json</a>.</noscript>
<script src="/docs/assets/swagger-ui-bundle.js"></script>
<script src="/docs/assets/init.js"></script>
</body>
</html>`);
  });
}
