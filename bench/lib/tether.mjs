// Preloaded (`node --import`) into every process startNode starts (bench/lib/proc.mjs): a relay, a
// simulator, a receiver or a prototype lives no longer than the benchmark that started it. The
// benchmark holds the write end of a pipe on this process's fd 4 and never writes to it; when the
// benchmark exits, however it ends (a signal, SIGKILL included, or a crash before its cleanup), the
// kernel closes that end, the read end sees its end, and this process sends itself SIGTERM (a relay
// shuts down as on any SIGTERM), then exits at most 10 s later. The pipe holds nothing open: a process
// still ends by itself as it would without it.
import { Socket } from "node:net";

export const TETHER_FD = 4;

let tether = null;
try {
  tether = new Socket({ fd: TETHER_FD, readable: true, writable: false });
} catch {
  // Started without the pipe (by hand, or by a tool other than startNode): nothing to watch.
}
if (tether) {
  tether.on("error", () => {});
  tether.once("close", () => {
    setTimeout(() => process.exit(1), 10_000).unref();
    process.kill(process.pid, "SIGTERM");
  });
  tether.resume();
  tether.unref();
}
