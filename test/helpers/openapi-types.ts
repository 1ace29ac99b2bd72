import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import openapiTS, { astToString, type OpenAPI3 } from "openapi-typescript";
import ts from "typescript";

/**
 * What a client or receiver written against openapi-typescript's types of an OpenAPI document gets
 * from the compiler: schema.ts is generated from `doc` into a temp folder beside `file` (the code,
 * importing "./schema"), which is type-checked strictly. Returns the errors as "file:line message".
 */
export async function typeErrors(
  doc: Record<string, unknown>,
  file: { name: string; source: string },
): Promise<string[]> {
  const dir = mkdtempSync(join(tmpdir(), "genrelay-typed-"));
  try {
    writeFileSync(join(dir, "schema.ts"), astToString(await openapiTS(doc as unknown as OpenAPI3)));
    writeFileSync(join(dir, file.name), file.source);
    const program = ts.createProgram([join(dir, file.name)], {
      strict: true,
      noEmit: true,
      target: ts.ScriptTarget.ES2022,
      module: ts.ModuleKind.ESNext,
      moduleResolution: ts.ModuleResolutionKind.Bundler,
      lib: ["lib.es2022.d.ts"],
      types: [],
      skipLibCheck: true,
    });
    return ts
      .getPreEmitDiagnostics(program)
      .map(
        (d) =>
          `${d.file ? `${d.file.fileName.slice(dir.length + 1)}:${d.file.getLineAndCharacterOfPosition(d.start ?? 0).line + 1} ` : ""}${ts.flattenDiagnosticMessageText(d.messageText, "\n")}`,
      );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
