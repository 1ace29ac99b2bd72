import { defineConfig } from "drizzle-kit";

/** PostgreSQL (DATABASE_URL): `npm run db:generate:pg` writes migrations/pg/ from src/db/pg/schema.ts. */
export default defineConfig({
  dialect: "postgresql",
  schema: "./src/db/pg/schema.ts",
  out: "./migrations/pg",
});
