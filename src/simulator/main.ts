/**
 * Standalone upstream simulator: `npm run simulator` / `node dist/simulator/main.js`.
 * The only simulator file that touches process.env, stdout and signals.
 */
import { parseSimulatorEnv } from "./config.js";
import { startSimulator } from "./server.js";

const parsed = parseSimulatorEnv(process.env);
if (!parsed.ok) {
  process.stderr.write(`${parsed.error}\n`);
  process.exit(2);
}
const { port, host, options } = parsed.settings;

try {
  const sim = await startSimulator({ ...options, port, host });
  process.stdout.write(`genrelay simulator listening on ${sim.url}\n`);
  let closing = false;
  const shutdown = (): void => {
    // A second signal while closing means "now".
    if (closing) process.exit(0);
    closing = true;
    sim.close().then(
      () => process.exit(0),
      () => process.exit(0),
    );
  };
  process.on("SIGTERM", shutdown);
  process.on("SIGINT", shutdown);
} catch (err) {
  process.stderr.write(`genrelay simulator: cannot listen on ${host}:${port}: ${(err as Error).message}\n`);
  process.exit(1);
}
