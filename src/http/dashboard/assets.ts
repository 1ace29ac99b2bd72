import { createHash } from "node:crypto";
import type { Hono } from "hono";

/**
 * The dashboard's only two assets, kept in TypeScript so `tsc` ships them in dist/ with no copy
 * step, and served by the relay itself: the machines that run it may have no internet, and the
 * CSP allows scripts and styles from 'self' only. The content hash in the path lets them be cached
 * for a year: a new build changes the path.
 */

const CSS = `
:root{--fg:#1a1a1a;--muted:#555;--bg:#fff;--panel:#f5f6f8;--line:#d0d4da;--accent:#0b57d0;--ok:#0a6b2e;--bad:#a4161a;--warn:#7a4d00;--info:#0b57d0;font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:var(--bg);line-height:1.45}
*{box-sizing:border-box}
body{margin:0}
a{color:var(--accent)}
:focus-visible{outline:3px solid #ffbf47;outline-offset:2px}
.skip{position:absolute;left:-999px;top:0;background:#fff;padding:.5rem}
.skip:focus{left:.5rem}
.top{display:flex;flex-wrap:wrap;align-items:center;gap:.5rem 1.25rem;padding:.6rem 1rem;background:#16213e;color:#fff}
.top a{color:#fff;text-decoration:none;padding:.2rem .1rem}
.top a:hover,.top a[aria-current=page]{text-decoration:underline;text-underline-offset:4px}
.brand{font-weight:700;font-size:1.1rem}
.top nav{display:flex;gap:1rem;flex-wrap:wrap}
.signout{margin-left:auto;display:flex;gap:.6rem;align-items:center}
.who{opacity:.9;font-size:.9rem}
button.link{background:none;border:1px solid #fff;color:#fff;border-radius:4px;padding:.25rem .6rem;font:inherit;cursor:pointer}
main{max-width:1120px;margin:0 auto;padding:1rem}
h1{font-size:1.5rem;margin:.5rem 0 1rem}
h2{font-size:1.15rem;margin:1.5rem 0 .6rem}
.panel{background:var(--panel);border:1px solid var(--line);border-radius:6px;padding:1rem;margin-bottom:1rem}
.signin{max-width:420px;margin:3rem auto}
label{display:block;font-weight:600;margin-bottom:.25rem}
input,select,button{font:inherit}
input[type=text],input[type=url],input[type=password],input[type=search],input[type=datetime-local],select{width:100%;padding:.45rem .5rem;border:1px solid #767676;border-radius:4px;background:#fff;color:var(--fg)}
.btn{display:inline-block;background:var(--accent);color:#fff;border:0;border-radius:4px;padding:.5rem 1rem;cursor:pointer;text-decoration:none}
.btn.secondary{background:#fff;color:var(--accent);border:1px solid var(--accent)}
.btn.danger{background:var(--bad)}
.row{display:flex;flex-wrap:wrap;gap:.75rem;align-items:flex-end}
.row>div{flex:1 1 160px}
.row>.grow{flex:3 1 240px}
.actions{display:flex;gap:.6rem;flex-wrap:wrap;margin:.5rem 0 1rem}
.actions form{margin:0}
.table-wrap{overflow-x:auto;border:1px solid var(--line);border-radius:6px}
table{border-collapse:collapse;width:100%;font-size:.92rem}
th,td{text-align:left;padding:.45rem .6rem;border-bottom:1px solid var(--line);vertical-align:top}
th{background:var(--panel);font-weight:600}
tr:last-child td{border-bottom:0}
code,pre,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.86rem}
pre{background:var(--panel);border:1px solid var(--line);border-radius:6px;padding:.75rem;overflow:auto;max-height:24rem;white-space:pre-wrap;word-break:break-word}
.badge{display:inline-block;padding:.05rem .5rem;border-radius:999px;font-size:.82rem;font-weight:600;border:1px solid currentColor;white-space:nowrap}
.b-succeeded,.b-closed,.b-ok{color:var(--ok)}
.b-failed,.b-blocked,.b-open,.b-failing{color:var(--bad)}
.b-processing,.b-pending,.b-half-open{color:var(--warn)}
.b-queued{color:var(--info)}
.b-canceled,.b-none{color:var(--muted)}
.notice{border-radius:6px;padding:.7rem 1rem;margin-bottom:1rem;border:1px solid}
.notice.ok{background:#e8f5ec;border-color:var(--ok)}
.notice.error{background:#fdecea;border-color:var(--bad)}
.failing-banner h2{margin:0 0 .4rem;font-size:1.05rem}
.failing-banner ul{margin:.2rem 0 .4rem;padding-left:1.2rem}
.failing-banner p{margin:.3rem 0 0}
details.answer{margin-top:.3rem}
details.answer pre{margin:.3rem 0 0;max-height:16rem}
.muted{color:var(--muted)}
dl.kv{display:grid;grid-template-columns:max-content 1fr;gap:.3rem 1rem;margin:0}
dl.kv dt{font-weight:600}
dl.kv dd{margin:0;word-break:break-word}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(150px,1fr));gap:.75rem;margin-bottom:1rem}
.card{background:var(--panel);border:1px solid var(--line);border-radius:6px;padding:.75rem}
.card .n{font-size:1.5rem;font-weight:700}
.previews{display:flex;flex-wrap:wrap;gap:.75rem}
.previews img,.previews video{max-width:100%;width:320px;border:1px solid var(--line);border-radius:6px;background:var(--panel)}
.secret{font-size:1rem;padding:.5rem;background:#fff8e1;border:1px solid var(--warn);border-radius:4px;word-break:break-all}
meter{width:100%;height:1.2rem}
svg.chart{width:100%;height:auto;max-width:760px;display:block}
.chart text{font-size:11px;fill:#333}
.chart .axis{stroke:#999}
.s-queued{fill:#4a7fd4}.s-processing{fill:#d18b00}.s-succeeded{fill:#1f8a4c}.s-failed{fill:#c0392b}.s-canceled{fill:#888}
.legend{display:flex;gap:1rem;flex-wrap:wrap;font-size:.9rem;margin:.5rem 0}
.legend span::before{content:"";display:inline-block;width:.8rem;height:.8rem;margin-right:.3rem;vertical-align:middle;border-radius:2px}
.legend .k-queued::before{background:#4a7fd4}.legend .k-processing::before{background:#d18b00}.legend .k-succeeded::before{background:#1f8a4c}.legend .k-failed::before{background:#c0392b}.legend .k-canceled::before{background:#888}
.pager{display:flex;gap:1rem;margin:1rem 0}
.panel>h2:first-child{margin-top:0}
h1.mono{font-size:1.25rem;word-break:break-all}
.sr-only{position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0);white-space:nowrap}
@media (max-width:640px){main{padding:.6rem}.signout{margin-left:0}.hide-sm{display:none}
.stack thead{position:absolute;left:-9999px}
.stack tr{display:block;border-bottom:1px solid var(--line);padding:.4rem 0}
.stack tr:last-child{border-bottom:0}
.stack td{display:flex;gap:.6rem;border:0;padding:.15rem .6rem}
.stack td::before{content:attr(data-label);font-weight:600;min-width:5.5rem;flex:none}}
`;

/**
 * Progressive enhancement only: every page reads fine without it. While the page carries
 * <meta name="genrelay-refresh">, its <main> is refetched and swapped in, so a running task moves
 * to delivered without a reload; it stops when the meta is gone or while the user is typing.
 */
const JS = `
(function () {
  var meta = document.querySelector('meta[name="genrelay-refresh"]');
  if (!meta || !window.fetch || !window.DOMParser) return;
  var every = Number(meta.getAttribute("content")) || 3000;
  function busy() {
    var a = document.activeElement;
    return a && (a.tagName === "INPUT" || a.tagName === "TEXTAREA" || a.tagName === "SELECT");
  }
  function tick() {
    if (busy()) return (timer = setTimeout(tick, every));
    fetch(location.href, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (res) { return res.ok ? res.text() : null; })
      .then(function (text) {
        if (!text) return;
        var doc = new DOMParser().parseFromString(text, "text/html");
        var next = doc.querySelector("main");
        var current = document.querySelector("main");
        if (next && current) current.replaceWith(next);
        if (doc.querySelector('meta[name="genrelay-refresh"]')) timer = setTimeout(tick, every);
        else document.documentElement.setAttribute("data-settled", "true");
      })
      .catch(function () { timer = setTimeout(tick, every * 2); });
  }
  var timer = setTimeout(tick, every);
  // A running task's events arrive on its stream: each refreshes at once; the end closes it.
  var stream = document.querySelector('meta[name="genrelay-stream"]');
  if (!stream || !window.EventSource) return;
  var source = new EventSource(stream.getAttribute("content"));
  // The stream opens with the task's progress as this page already shows it: refreshing on that
  // first one would only reload the page under the reader's hand (a click on Cancel, say).
  var progressSeen = false;
  ["task.progress", "task.processing", "task.succeeded", "task.failed", "task.canceled"].forEach(function (type) {
    source.addEventListener(type, function () {
      if (type === "task.progress" && !progressSeen) {
        progressSeen = true;
        return;
      }
      if (type !== "task.progress" && type !== "task.processing") source.close();
      clearTimeout(timer);
      tick();
    });
  });
})();
`;

const short = (text: string) => createHash("sha256").update(text).digest("hex").slice(0, 10);

export const ASSET_PATHS = {
  css: `/dashboard/assets/app.${short(CSS)}.css`,
  js: `/dashboard/assets/app.${short(JS)}.js`,
};

export function registerAssets(app: Hono<any>): void {
  // eslint-disable-line @typescript-eslint/no-explicit-any
  const immutable = { "Cache-Control": "public, max-age=31536000, immutable" };
  app.get(ASSET_PATHS.css.replace("/dashboard", ""), (c) =>
    c.body(CSS, 200, { ...immutable, "Content-Type": "text/css; charset=utf-8" }),
  );
  app.get(ASSET_PATHS.js.replace("/dashboard", ""), (c) =>
    c.body(JS, 200, { ...immutable, "Content-Type": "text/javascript; charset=utf-8" }),
  );
}
