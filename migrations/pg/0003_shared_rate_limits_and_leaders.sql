CREATE TABLE "account_leaders" (
	"account" text PRIMARY KEY NOT NULL,
	"holder" text NOT NULL,
	"fence" bigint NOT NULL,
	"expires_at" bigint NOT NULL,
	"holder_pid" bigint NOT NULL,
	"taken_at" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "rate_limit_hits" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"client_id" text NOT NULL,
	"action" text NOT NULL,
	"at" bigint NOT NULL
);
--> statement-breakpoint
CREATE INDEX "rate_limit_hits_key_at_idx" ON "rate_limit_hits" USING btree ("client_id","action","at");