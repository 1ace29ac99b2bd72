// The n8n package's linter (its npm script "lint") through ESLint's Node API, in a process of its own
// whose working directory is the package: one start of eslint and its plugins for the config a file
// gets, the package's lint and a text's lint (three CLI runs cost three starts, about 2 s of CPU each).
// Reads {configOf, files, text: {code, filePath}} as JSON on stdin; prints
// {config, results, textResults}, each result as `eslint --format json` prints it.
import { createRequire } from "node:module";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const require = createRequire(join(process.cwd(), "package.json"));
const { ESLint } = await import(pathToFileURL(require.resolve("eslint")).href);

let input = "";
for await (const chunk of process.stdin) input += chunk;
const { configOf, files, text } = JSON.parse(input);
const eslint = new ESLint({ cwd: process.cwd() });
const config = await eslint.calculateConfigForFile(configOf);
const results = await eslint.lintFiles(files);
const textResults = await eslint.lintText(text.code, { filePath: text.filePath });
process.stdout.write(JSON.stringify({ config, results, textResults }));
