import { describe, expect, it } from "vitest";
import { checkAgainstCatalog } from "../../src/services/catalog-check.js";

/** A cached catalog whose model list counts how often it is read. */
function countedCatalog(ids: string[]) {
  const reads = { n: 0 };
  const models = ids.map((id) => ({ id, type: "image", sizes: ["1024x1024"] }));
  const catalog = {
    get data() {
      reads.n++;
      return models;
    },
  };
  return { catalog, reads };
}

describe("checkAgainstCatalog", () => {
  it("walks a cached catalog once for every creation checked against it, and a refreshed one again", () => {
    const { catalog, reads } = countedCatalog(["p-image"]);
    const ok = { model: "p-image", prompt: "x", size: "1024x1024" };
    expect(checkAgainstCatalog(catalog, "image", ok)).toEqual([]);
    expect(checkAgainstCatalog(catalog, "image", { ...ok, size: "1x1" })).toEqual([
      { field: "size", message: "is not supported by p-image; one of: 1024x1024" },
    ]);
    expect(checkAgainstCatalog(catalog, "image", { ...ok, model: "other" })).toEqual([
      { field: "model", message: "is not a image model in the upstream's catalog; one of: p-image" },
    ]);
    expect(reads.n).toBe(1);
    // The cache refreshes a catalog as a new object: its models are the new ones.
    const refreshed = countedCatalog(["other"]);
    expect(checkAgainstCatalog(refreshed.catalog, "image", { ...ok, model: "other" })).toEqual([]);
    expect(refreshed.reads.n).toBe(1);
  });
});
