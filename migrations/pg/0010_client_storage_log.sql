CREATE TABLE "client_storage_log" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"client_id" text NOT NULL,
	"bytes" bigint NOT NULL
);
--> statement-breakpoint
CREATE INDEX "client_storage_log_client_idx" ON "client_storage_log" USING btree ("client_id","bytes");