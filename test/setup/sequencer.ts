import { relative } from "node:path";
import { BaseSequencer, type TestSpecification } from "vitest/node";

/**
 * The integration files that take longest (wall time in a gate, docs/testing.md "Time"), longest
 * first. With two workers (GENRELAY_TEST_WORKERS=2) they start first, so the run does not end on one
 * of them beside an idle worker: without vitest's cache (CI's clean clone) the base order is by file
 * size, which put the smoke run of the benchmarks (145 s) halfway down the list. One worker: the
 * order changes nothing but the order.
 */
export const LONGEST_FIRST = [
  "test/integration/bench-smoke.test.ts",
  "test/e2e/relay.test.ts",
  "test/integration/pg-failover.test.ts",
  "test/integration/hostile-upstream.test.ts",
  "test/e2e/dashboard-browser.test.ts",
  "test/integration/queue-endpoints.test.ts",
  "test/integration/bounded-requests.test.ts",
  "test/integration/workers-submit.test.ts",
  "test/e2e/queue-crash.test.ts",
  "test/integration/api-tasks.test.ts",
  "test/integration/examples.test.ts",
];

/** vitest's order (projects and groups first, then its cache or file sizes), the files above first within each project. */
export default class LongestFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const rank = (spec: TestSpecification) => {
      const at = LONGEST_FIRST.indexOf(relative(spec.project.config.root, spec.moduleId).replaceAll("\\", "/"));
      return at === -1 ? LONGEST_FIRST.length : at;
    };
    // The base order keeps each project's files together: reorder within each such run only (a stable sort).
    const out: TestSpecification[] = [];
    for (let start = 0; start < sorted.length; ) {
      let end = start + 1;
      while (end < sorted.length && sorted[end]!.project === sorted[start]!.project) end++;
      out.push(...sorted.slice(start, end).sort((a, b) => rank(a) - rank(b)));
      start = end;
    }
    return out;
  }
}
