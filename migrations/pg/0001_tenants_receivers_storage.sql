CREATE TABLE "endpoint_health" (
	"client_id" text NOT NULL,
	"host" text NOT NULL,
	"failing_since" bigint,
	"failed_attempts" bigint DEFAULT 0 NOT NULL,
	"last_error" text,
	"last_success_at" bigint,
	"notice_sent_at" bigint,
	"updated_at" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "notices" (
	"id" text PRIMARY KEY NOT NULL,
	"client_id" text NOT NULL,
	"type" text NOT NULL,
	"payload" text NOT NULL,
	"url" text NOT NULL,
	"delivery_status" text NOT NULL,
	"attempts" bigint DEFAULT 0 NOT NULL,
	"next_attempt_at" bigint,
	"claimed_until" bigint,
	"claim_token" text,
	"last_status_code" bigint,
	"last_error" text,
	"delivered_at" bigint,
	"created_at" bigint NOT NULL
);
--> statement-breakpoint
DROP INDEX "tasks_upstream_task_idx";--> statement-breakpoint
ALTER TABLE "clients" ADD COLUMN "notification_url" text;--> statement-breakpoint
ALTER TABLE "clients" ADD COLUMN "callback_headers" text;--> statement-breakpoint
ALTER TABLE "clients" ADD COLUMN "signature_scheme" text DEFAULT 'hmac' NOT NULL;--> statement-breakpoint
ALTER TABLE "clients" ADD COLUMN "signing_key" text;--> statement-breakpoint
ALTER TABLE "clients" ADD COLUMN "previous_signing_key" text;--> statement-breakpoint
ALTER TABLE "clients" ADD COLUMN "previous_signing_key_expires_at" bigint;--> statement-breakpoint
ALTER TABLE "clients" ADD COLUMN "storage_config" text;--> statement-breakpoint
ALTER TABLE "events" ADD COLUMN "callback_headers" text;--> statement-breakpoint
ALTER TABLE "tasks" ADD COLUMN "callback_headers" text;--> statement-breakpoint
ALTER TABLE "tasks" ADD COLUMN "files_json" text;--> statement-breakpoint
ALTER TABLE "endpoint_health" ADD CONSTRAINT "endpoint_health_client_id_clients_id_fk" FOREIGN KEY ("client_id") REFERENCES "public"."clients"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "notices" ADD CONSTRAINT "notices_client_id_clients_id_fk" FOREIGN KEY ("client_id") REFERENCES "public"."clients"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE UNIQUE INDEX "endpoint_health_key_uq" ON "endpoint_health" USING btree ("client_id","host");--> statement-breakpoint
CREATE INDEX "endpoint_health_failing_idx" ON "endpoint_health" USING btree ("failing_since");--> statement-breakpoint
CREATE INDEX "notices_due_idx" ON "notices" USING btree ("delivery_status","next_attempt_at");--> statement-breakpoint
CREATE INDEX "notices_client_idx" ON "notices" USING btree ("client_id","created_at");--> statement-breakpoint
CREATE UNIQUE INDEX "tasks_upstream_task_uq" ON "tasks" USING btree ("upstream_account","upstream_task_id");