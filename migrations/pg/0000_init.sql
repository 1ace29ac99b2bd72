CREATE TABLE "clients" (
	"id" text PRIMARY KEY NOT NULL,
	"name" text NOT NULL,
	"api_key_hash" text NOT NULL,
	"api_key_prefix" text NOT NULL,
	"webhook_secret" text NOT NULL,
	"previous_webhook_secret" text,
	"previous_secret_expires_at" bigint,
	"upstream_key_encrypted" text,
	"upstream_account" text DEFAULT 'default' NOT NULL,
	"max_waiting" bigint,
	"max_running" bigint,
	"credit_limit" bigint,
	"points_charged" bigint DEFAULT 0 NOT NULL,
	"points_refunded" bigint DEFAULT 0 NOT NULL,
	"points_reserved" bigint DEFAULT 0 NOT NULL,
	"event_seq" bigint DEFAULT 0 NOT NULL,
	"last_admitted_at" bigint DEFAULT 0 NOT NULL,
	"created_at" bigint NOT NULL,
	"revoked_at" bigint
);
--> statement-breakpoint
CREATE TABLE "credit_ledger" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"client_id" text NOT NULL,
	"task_id" text NOT NULL,
	"charged" bigint NOT NULL,
	"refunded" bigint NOT NULL,
	"at" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "dashboard_sessions" (
	"token_hash" text PRIMARY KEY NOT NULL,
	"client_id" text NOT NULL,
	"csrf_token" text NOT NULL,
	"created_at" bigint NOT NULL,
	"last_seen_at" bigint NOT NULL,
	"expires_at" bigint NOT NULL,
	"revoked_at" bigint
);
--> statement-breakpoint
CREATE TABLE "delivery_attempts" (
	"id" text PRIMARY KEY NOT NULL,
	"event_id" text NOT NULL,
	"task_id" text NOT NULL,
	"client_id" text NOT NULL,
	"event_type" text NOT NULL,
	"url" text NOT NULL,
	"attempted_at" bigint NOT NULL,
	"status_code" bigint,
	"latency_ms" bigint,
	"outcome" text NOT NULL,
	"error" text,
	"response_body" text
);
--> statement-breakpoint
CREATE TABLE "duration_stats" (
	"type" text NOT NULL,
	"model" text NOT NULL,
	"samples_json" text NOT NULL,
	"updated_at" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "events" (
	"seq" bigserial PRIMARY KEY NOT NULL,
	"id" text NOT NULL,
	"client_id" text NOT NULL,
	"client_seq" bigint DEFAULT 0 NOT NULL,
	"task_id" text NOT NULL,
	"type" text NOT NULL,
	"sequence" bigint NOT NULL,
	"payload" text NOT NULL,
	"callback_url" text,
	"destination_host" text DEFAULT '' NOT NULL,
	"delivery_status" text NOT NULL,
	"attempts" bigint DEFAULT 0 NOT NULL,
	"round_attempts" bigint DEFAULT 0 NOT NULL,
	"next_attempt_at" bigint,
	"claimed_until" bigint,
	"claim_token" text,
	"last_attempt_at" bigint,
	"last_status_code" bigint,
	"last_error" text,
	"delivered_at" bigint,
	"failed_at" bigint,
	"created_at" bigint NOT NULL,
	CONSTRAINT "events_id_uq" UNIQUE("id")
);
--> statement-breakpoint
CREATE TABLE "health_probe" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"at" bigint NOT NULL,
	"pad" "bytea"
);
--> statement-breakpoint
CREATE TABLE "learned_prices" (
	"price_key" text PRIMARY KEY NOT NULL,
	"points" bigint NOT NULL,
	"updated_at" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "tasks" (
	"id" text PRIMARY KEY NOT NULL,
	"client_id" text NOT NULL,
	"type" text NOT NULL,
	"model" text NOT NULL,
	"status" text NOT NULL,
	"phase" text NOT NULL,
	"request_json" text NOT NULL,
	"callback_url" text,
	"callback_events" text NOT NULL,
	"metadata_json" text,
	"idempotency_key" text NOT NULL,
	"request_hash" text NOT NULL,
	"upstream_account" text NOT NULL,
	"upstream_idempotency_key" text NOT NULL,
	"upstream_task_id" text,
	"output_json" text,
	"points_charged" bigint,
	"points_refunded" bigint,
	"error_json" text,
	"points_reserved" bigint DEFAULT 0 NOT NULL,
	"price_key" text DEFAULT '' NOT NULL,
	"conflict_since" bigint,
	"event_sequence" bigint DEFAULT 0 NOT NULL,
	"submit_attempts" bigint DEFAULT 0 NOT NULL,
	"poll_count" bigint DEFAULT 0 NOT NULL,
	"next_run_at" bigint,
	"claimed_until" bigint,
	"claim_token" text,
	"expires_at" bigint,
	"created_at" bigint NOT NULL,
	"updated_at" bigint NOT NULL,
	"submitted_at" bigint,
	"completed_at" bigint
);
--> statement-breakpoint
CREATE TABLE "upstream_accounts" (
	"id" text PRIMARY KEY NOT NULL,
	"learned_max_concurrent" bigint,
	"learned_at" bigint,
	"reads_paused_until" bigint,
	"submit_paused_until" bigint,
	"updated_at" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "upstream_reads" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"account" text NOT NULL,
	"at" bigint NOT NULL
);
--> statement-breakpoint
ALTER TABLE "credit_ledger" ADD CONSTRAINT "credit_ledger_client_id_clients_id_fk" FOREIGN KEY ("client_id") REFERENCES "public"."clients"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "dashboard_sessions" ADD CONSTRAINT "dashboard_sessions_client_id_clients_id_fk" FOREIGN KEY ("client_id") REFERENCES "public"."clients"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "delivery_attempts" ADD CONSTRAINT "delivery_attempts_event_id_events_id_fk" FOREIGN KEY ("event_id") REFERENCES "public"."events"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "events" ADD CONSTRAINT "events_client_id_clients_id_fk" FOREIGN KEY ("client_id") REFERENCES "public"."clients"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "events" ADD CONSTRAINT "events_task_id_tasks_id_fk" FOREIGN KEY ("task_id") REFERENCES "public"."tasks"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "tasks" ADD CONSTRAINT "tasks_client_id_clients_id_fk" FOREIGN KEY ("client_id") REFERENCES "public"."clients"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE UNIQUE INDEX "clients_api_key_hash_uq" ON "clients" USING btree ("api_key_hash");--> statement-breakpoint
CREATE INDEX "credit_ledger_client_idx" ON "credit_ledger" USING btree ("client_id","id");--> statement-breakpoint
CREATE INDEX "dashboard_sessions_client_idx" ON "dashboard_sessions" USING btree ("client_id");--> statement-breakpoint
CREATE INDEX "dashboard_sessions_expires_idx" ON "dashboard_sessions" USING btree ("expires_at");--> statement-breakpoint
CREATE INDEX "delivery_attempts_task_idx" ON "delivery_attempts" USING btree ("task_id","attempted_at");--> statement-breakpoint
CREATE INDEX "delivery_attempts_event_idx" ON "delivery_attempts" USING btree ("event_id");--> statement-breakpoint
CREATE UNIQUE INDEX "duration_stats_type_model_uq" ON "duration_stats" USING btree ("type","model");--> statement-breakpoint
CREATE INDEX "events_task_seq_idx" ON "events" USING btree ("task_id","sequence");--> statement-breakpoint
CREATE INDEX "events_client_seq_idx" ON "events" USING btree ("client_id","seq");--> statement-breakpoint
CREATE INDEX "events_due_idx" ON "events" USING btree ("delivery_status","next_attempt_at");--> statement-breakpoint
CREATE INDEX "events_client_feed_idx" ON "events" USING btree ("client_id","client_seq");--> statement-breakpoint
CREATE INDEX "events_destination_idx" ON "events" USING btree ("client_id","destination_host","delivery_status");--> statement-breakpoint
CREATE UNIQUE INDEX "tasks_client_idempotency_uq" ON "tasks" USING btree ("client_id","idempotency_key");--> statement-breakpoint
CREATE INDEX "tasks_client_id_idx" ON "tasks" USING btree ("client_id","id");--> statement-breakpoint
CREATE INDEX "tasks_client_status_idx" ON "tasks" USING btree ("client_id","status","id");--> statement-breakpoint
CREATE INDEX "tasks_phase_due_idx" ON "tasks" USING btree ("phase","upstream_account","next_run_at");--> statement-breakpoint
CREATE INDEX "tasks_phase_next_idx" ON "tasks" USING btree ("phase","next_run_at");--> statement-breakpoint
CREATE INDEX "tasks_admission_idx" ON "tasks" USING btree ("phase","upstream_account","client_id","next_run_at");--> statement-breakpoint
CREATE INDEX "tasks_phase_expires_idx" ON "tasks" USING btree ("phase","expires_at");--> statement-breakpoint
CREATE INDEX "tasks_upstream_task_idx" ON "tasks" USING btree ("upstream_account","upstream_task_id");--> statement-breakpoint
CREATE INDEX "tasks_done_completed_idx" ON "tasks" USING btree ("phase","completed_at");--> statement-breakpoint
CREATE INDEX "tasks_phase_lease_idx" ON "tasks" USING btree ("phase","claimed_until");--> statement-breakpoint
CREATE INDEX "tasks_client_phase_idx" ON "tasks" USING btree ("client_id","phase");--> statement-breakpoint
CREATE INDEX "upstream_reads_account_at_idx" ON "upstream_reads" USING btree ("account","at");