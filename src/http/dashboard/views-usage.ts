import { html } from "hono/html";
import type { HourlyCount } from "../../store/rows.js";
import { TASK_STATUSES } from "../../statuses.js";
import type { Html } from "./layout.js";

export interface UsageView {
  tasks: Record<string, number>;
  points_charged: number;
  points_refunded: number;
  points_spent: number;
  points_reserved: number;
  credit_limit: number | null;
}

export function usageBody(u: UsageView, hours: number[], counts: HourlyCount[]): Html {
  const used = u.points_spent + u.points_reserved;
  const card = (label: string, value: number | string) =>
    html`<div class="card"><div class="muted">${label}</div><div class="n">${value}</div></div>`;
  return html`<h1>Usage</h1>
<div class="cards">
  ${card("Charged", u.points_charged)}${card("Refunded", u.points_refunded)}${card("Reserved", u.points_reserved)}
  ${card("Credit limit", u.credit_limit ?? "none")}
</div>
<section class="panel" aria-labelledby="h-budget"><h2 id="h-budget">Budget</h2>
${
  u.credit_limit === null
    ? html`<p>No credit limit is set for this client: spent ${u.points_spent} points, ${u.points_reserved} reserved by waiting and running tasks.</p>`
    : html`<label for="budget">Spent plus reserved: ${used} of ${u.credit_limit} points</label>
  <meter id="budget" min="0" max="${Math.max(u.credit_limit, 1)}" low="${Math.floor(u.credit_limit * 0.75)}" high="${Math.floor(u.credit_limit * 0.9)}" optimum="0" value="${Math.min(used, u.credit_limit)}">${used} of ${u.credit_limit}</meter>
  <p class="muted">Spent ${u.points_spent} (charged minus refunded), reserved ${u.points_reserved}; ${Math.max(0, u.credit_limit - used)} left.</p>`
}
</section>
<section aria-labelledby="h-counts"><h2 id="h-counts">Tasks by status</h2>
<div class="table-wrap"><table><thead><tr>${TASK_STATUSES.map((s) => html`<th scope="col">${s}</th>`)}</tr></thead>
<tbody><tr>${TASK_STATUSES.map((s) => html`<td>${u.tasks[s] ?? 0}</td>`)}</tr></tbody></table></div>
</section>
<section aria-labelledby="h-chart"><h2 id="h-chart">Tasks per hour, last 24 hours</h2>
${hourlyChart(hours, counts)}
</section>`;
}

const pad = (n: number) => String(n).padStart(2, "0");
const hourLabel = (ms: number) => `${pad(new Date(ms).getUTCHours())}:00`;

/**
 * A stacked bar per hour, drawn on the server: no chart library, no script, and presentation
 * attributes only (the CSP forbids inline styles). The same numbers follow as a table for screen
 * readers and for anyone who wants exact values.
 */
export function hourlyChart(hours: number[], counts: HourlyCount[]): Html {
  const byHour = new Map<number, Record<string, number>>(hours.map((h) => [h, {}]));
  for (const c of counts) {
    const bucket = byHour.get(c.hour);
    if (bucket) bucket[c.status] = (bucket[c.status] ?? 0) + c.n;
  }
  const totals = hours.map((h) => Object.values(byHour.get(h)!).reduce((a, b) => a + b, 0));
  const max = Math.max(1, ...totals);
  const W = 720,
    H = 200,
    left = 36,
    bottom = 24,
    top = 10;
  const plotH = H - bottom - top;
  const slot = (W - left) / hours.length;
  const barW = Math.max(2, slot * 0.7);
  const bars = hours.map((h, i) => {
    let y = H - bottom;
    const x = left + i * slot + (slot - barW) / 2;
    const parts = TASK_STATUSES.filter((s) => (byHour.get(h)![s] ?? 0) > 0).map((s) => {
      const n = byHour.get(h)![s]!;
      const height = (n / max) * plotH;
      y -= height;
      return html`<rect class="s-${s}" x="${x.toFixed(1)}" y="${y.toFixed(1)}" width="${barW.toFixed(1)}" height="${height.toFixed(1)}"><title>${hourLabel(h)} UTC: ${n} ${s}</title></rect>`;
    });
    const label =
      i % 3 === 0
        ? html`<text x="${(left + i * slot + slot / 2).toFixed(1)}" y="${H - 8}" text-anchor="middle">${hourLabel(h)}</text>`
        : "";
    return html`${parts}${label}`;
  });
  const total = totals.reduce((a, b) => a + b, 0);
  return html`<div class="legend" aria-hidden="true">${TASK_STATUSES.map((s) => html`<span class="k-${s}">${s}</span>`)}</div>
<svg class="chart" viewBox="0 0 ${W} ${H}" role="img" aria-labelledby="chart-title chart-desc" xmlns="http://www.w3.org/2000/svg">
  <title id="chart-title">Tasks created per hour by status, last 24 hours (UTC)</title>
  <desc id="chart-desc">${total} tasks in total; the busiest hour had ${Math.max(0, ...totals)}.</desc>
  <line class="axis" x1="${left}" y1="${H - bottom}" x2="${W}" y2="${H - bottom}"></line>
  <line class="axis" x1="${left}" y1="${top}" x2="${left}" y2="${H - bottom}"></line>
  <text x="${left - 6}" y="${top + 8}" text-anchor="end">${max}</text>
  <text x="${left - 6}" y="${H - bottom}" text-anchor="end">0</text>
  ${bars}
</svg>
<details><summary>Show as a table</summary>
<div class="table-wrap"><table><thead><tr><th scope="col">Hour (UTC)</th>${TASK_STATUSES.map((s) => html`<th scope="col">${s}</th>`)}</tr></thead>
<tbody>${hours.map((h) => html`<tr><td>${hourLabel(h)}</td>${TASK_STATUSES.map((s) => html`<td>${byHour.get(h)![s] ?? 0}</td>`)}</tr>`)}</tbody></table></div>
</details>`;
}
