#!/usr/bin/env node
// The CLI's entry point (`node dist/cli.js`, `npm run cli --`); the commands live in src/cli/.
import { runCli } from "./cli/run.js";

process.exitCode = await runCli(process.argv.slice(2));
