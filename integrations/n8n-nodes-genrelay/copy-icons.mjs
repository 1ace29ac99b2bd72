// The build's second step (after tsc): n8n loads a node's icon from beside its built file, so the
// SVGs under icons/ go to dist/icons/, where `file:../../icons/…` in the nodes points.
import { cpSync } from "node:fs";

cpSync(new URL("./icons", import.meta.url), new URL("./dist/icons", import.meta.url), { recursive: true });
