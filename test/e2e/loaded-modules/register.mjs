// `node --import <this file>`: logs the URL of every module the process resolves through the ES module
// loader to the file named by GENRELAY_MODULE_LOG (test/e2e/lazy-modules.test.ts). A package's first
// load from the relay's code (static `import` or `import()`) always passes here.
import { register } from "node:module";

register("./hooks.mjs", import.meta.url, { data: { log: process.env.GENRELAY_MODULE_LOG } });
