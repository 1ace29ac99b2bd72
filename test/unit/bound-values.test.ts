import { describe, expect, it } from "vitest";
import { bindSqliteArgs, bindValues } from "../../src/db/kit/bound-values.js";
import { planOf } from "../../src/db/sqlite/bound-values.js";
import { MAX_KEY_BYTES, StoreValueError } from "../../src/store/values.js";

/** Each placeholder's use as planOf reads it, in order (`-` for none). */
const uses = (sql: string, dialect: "sqlite" | "postgres") =>
  planOf(sql, dialect).slots.map((s) => (s ? (s.column ? `${s.use}:${s.column}${s.key ? "*" : ""}` : s.use) : "-"));
const refused = (run: () => unknown) => expect(run).toThrow(StoreValueError);

describe("planOf: where each bound value goes", () => {
  it("reads drizzle's SQLite statements: VALUES by column (literals counted), SET, WHERE, IN lists, LIMIT", () => {
    expect(
      uses(
        `insert into "tasks" ("id", "client_id", "error_json", "status") values (?, ?, null, ?) returning "id"`,
        "sqlite",
      ),
    ).toEqual(["write:id*", "write:client_id*", "write:status*"]);
    expect(
      uses(
        `update "tasks" set "error_json" = ?, "phase" = ? where ("tasks"."id" = ? and "tasks"."claim_token" = ?) returning "id"`,
        "sqlite",
      ),
    ).toEqual(["write:error_json", "write:phase*", "compare", "compare"]);
    expect(
      uses(
        `select "id" from "events" where ("events"."client_id" = ? and "events"."id" < ? and "events"."client_id" not in (?, ?)) limit ?`,
        "sqlite",
      ),
    ).toEqual(["compare", "compare", "list", "list", "limit"]);
    expect(uses(`select * from "events" where "id" in (select value from json_each(?))`, "sqlite")).toEqual([
      "compare",
    ]);
  });

  it("reads PostgreSQL's: numbered and repeated placeholders, ON CONFLICT … SET, INSERT … SELECT, unnest pairs, subqueries", () => {
    expect(
      uses(
        "UPDATE tasks SET claimed_until = $1, claim_token = $2 WHERE id IN (SELECT id FROM tasks WHERE id = ANY($4::text[]) AND next_run_at <= $3 LIMIT $5 FOR UPDATE SKIP LOCKED) RETURNING *",
        "postgres",
      ),
    ).toEqual(["write:claimed_until", "write:claim_token", "compare", "compare", "limit"]);
    expect(
      uses(
        "INSERT INTO upstream_accounts (id, updated_at) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET learned_max_concurrent = greatest(0, $3)",
        "postgres",
      ),
    ).toEqual(["write:id*", "write:updated_at", "write:learned_max_concurrent"]);
    // $1 is written and compared: written wins (NUL refused rather than matched).
    expect(
      uses(
        "INSERT INTO upstream_reads (account, at) SELECT $1, $2 WHERE (SELECT count(*) FROM upstream_reads WHERE account = $1 AND at > $3) < $4",
        "postgres",
      ),
    ).toEqual(["write:account*", "write:at", "compare", "compare"]);
    expect(
      uses(
        "SELECT * FROM events WHERE (client_id, destination_host) IN (SELECT * FROM unnest($1::text[], $2::text[])) AND NOT (client_id = ANY($3::text[]))",
        "postgres",
      ),
    ).toEqual(["aligned", "aligned", "compare"]);
    expect(
      uses("INSERT INTO tasks (id, client_id) VALUES ($1, $2), ($3, $4) ON CONFLICT DO NOTHING", "postgres"),
    ).toEqual(["write:id*", "write:client_id*", "write:id*", "write:client_id*"]);
  });
});

describe("bindValues: the rules", () => {
  const insert = planOf(`insert into "tasks" ("id", "error_json") values (?, ?)`, "sqlite");
  const select = planOf(`select * from "tasks" where "id" = ? and "client_id" in (?, ?) limit ?`, "sqlite");
  const pg = planOf(
    "SELECT * FROM events WHERE NOT (client_id = ANY($1::text[])) AND (client_id, destination_host) IN (SELECT * FROM unnest($2::text[], $3::text[]))",
    "postgres",
  );

  it("refuses NUL to write, and binds NUL to compare as nothing a stored text equals", () => {
    refused(() => bindValues(insert, ["t1", "a\u0000b"], "sqlite"));
    expect(bindValues(select, ["a\u0000b", "c", "d\u0000", 5], "sqlite")).toEqual([null, "c", "d\u0000", 5]);
    expect(
      bindValues(
        pg,
        [
          ["a", "b\u0000"],
          ["c", "x\u0000"],
          ["h", "i"],
        ],
        "postgres",
      ),
    ).toEqual([["a"], ["c", null], ["h", "i"]]);
  });

  it("makes lone surrogates well-formed, written or compared", () => {
    expect(bindValues(insert, ["t1", "x\uD800y"], "sqlite")).toEqual(["t1", "x\uFFFDy"]);
    expect(bindValues(select, ["\uDC00", "c", "d", 1], "sqlite")[0]).toBe("\uFFFD");
  });

  it("takes whole numbers within 2**53 only, anywhere; a limit below 0 is 0", () => {
    for (const n of [0.5, 1e308, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 53])
      refused(() => bindValues(select, ["a", "b", "c", n], "sqlite"));
    expect(bindValues(select, ["a", "b", "c", -1], "sqlite")).toEqual(["a", "b", "c", 0]);
    expect(bindValues(select, ["a", "b", "c", Number.MAX_SAFE_INTEGER], "sqlite")[3]).toBe(Number.MAX_SAFE_INTEGER);
  });

  it("holds an indexed column to MAX_KEY_BYTES of UTF-8, any other to nothing", () => {
    expect(bindValues(insert, ["k".repeat(MAX_KEY_BYTES), "e".repeat(MAX_KEY_BYTES * 4)], "sqlite")).toHaveLength(2);
    refused(() => bindValues(insert, ["é".repeat(MAX_KEY_BYTES / 2 + 1), "x"], "sqlite"));
  });

  it("binds better-sqlite3's arrays and named objects under the same rules", () => {
    const named = planOf(`insert into "tasks" ("id", "error_json") values (:id, :err)`, "sqlite");
    refused(() => bindSqliteArgs(named, [{ id: "t", err: "\u0000" }]));
    expect(bindSqliteArgs(select, [["a\u0000", "b"], "c", 2])).toEqual([null, "b", "c", 2]);
  });
});
