import { readFileSync, readlinkSync } from "node:fs";
import { Worker } from "node:worker_threads";
import { describe, expect, it } from "vitest";
import { BACKGROUND_NICE, LOWER_THREAD_PRIORITY } from "../../src/background-thread.js";

/** A thread's nice value, from /proc (field 19 of its stat line). */
function niceOf(tid: number): number {
  const stat = readFileSync(`/proc/${process.pid}/task/${tid}/stat`, "utf8");
  return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[16]);
}

describe("worker threads run below the event loop's priority (issue #38 item 7)", () => {
  it.runIf(process.platform === "linux")("lowers the worker's thread alone", async () => {
    const worker = new Worker(
      `${LOWER_THREAD_PRIORITY}
      const tid = Number(require("node:fs").readlinkSync("/proc/thread-self").split("/").pop());
      require("node:worker_threads").parentPort.postMessage(tid);`,
      { eval: true },
    );
    try {
      const tid = await new Promise<number>((resolve, reject) => {
        worker.once("message", resolve);
        worker.once("error", reject);
      });
      const mainTid = Number(readlinkSync("/proc/thread-self").split("/").pop());
      expect(niceOf(tid)).toBe(BACKGROUND_NICE);
      expect(niceOf(mainTid)).toBe(0);
    } finally {
      await worker.terminate();
    }
  });
});
