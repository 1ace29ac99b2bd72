CREATE TABLE `clients` (
	`id` text PRIMARY KEY NOT NULL,
	`name` text NOT NULL,
	`api_key_hash` text NOT NULL,
	`api_key_prefix` text NOT NULL,
	`webhook_secret` text NOT NULL,
	`previous_webhook_secret` text,
	`previous_secret_expires_at` integer,
	`upstream_key_encrypted` text,
	`upstream_account` text DEFAULT 'default' NOT NULL,
	`max_waiting` integer,
	`max_running` integer,
	`credit_limit` integer,
	`last_admitted_at` integer DEFAULT 0 NOT NULL,
	`created_at` integer NOT NULL,
	`revoked_at` integer
);
--> statement-breakpoint
CREATE UNIQUE INDEX `clients_api_key_hash_uq` ON `clients` (`api_key_hash`);--> statement-breakpoint
CREATE TABLE `delivery_attempts` (
	`id` text PRIMARY KEY NOT NULL,
	`event_id` text NOT NULL,
	`task_id` text NOT NULL,
	`client_id` text NOT NULL,
	`event_type` text NOT NULL,
	`url` text NOT NULL,
	`attempted_at` integer NOT NULL,
	`status_code` integer,
	`latency_ms` integer,
	`outcome` text NOT NULL,
	`error` text,
	`response_body` text,
	FOREIGN KEY (`event_id`) REFERENCES `events`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE INDEX `delivery_attempts_task_idx` ON `delivery_attempts` (`task_id`,`attempted_at`);--> statement-breakpoint
CREATE INDEX `delivery_attempts_event_idx` ON `delivery_attempts` (`event_id`);--> statement-breakpoint
CREATE TABLE `duration_stats` (
	`type` text NOT NULL,
	`model` text NOT NULL,
	`samples_json` text NOT NULL,
	`updated_at` integer NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `duration_stats_type_model_uq` ON `duration_stats` (`type`,`model`);--> statement-breakpoint
CREATE TABLE `events` (
	`seq` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`id` text NOT NULL,
	`client_id` text NOT NULL,
	`task_id` text NOT NULL,
	`type` text NOT NULL,
	`sequence` integer NOT NULL,
	`payload` text NOT NULL,
	`callback_url` text,
	`delivery_status` text NOT NULL,
	`attempts` integer DEFAULT 0 NOT NULL,
	`round_attempts` integer DEFAULT 0 NOT NULL,
	`next_attempt_at` integer,
	`claimed_until` integer,
	`claim_token` text,
	`last_attempt_at` integer,
	`last_status_code` integer,
	`last_error` text,
	`delivered_at` integer,
	`failed_at` integer,
	`created_at` integer NOT NULL,
	FOREIGN KEY (`client_id`) REFERENCES `clients`(`id`) ON UPDATE no action ON DELETE no action,
	FOREIGN KEY (`task_id`) REFERENCES `tasks`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE UNIQUE INDEX `events_id_uq` ON `events` (`id`);--> statement-breakpoint
CREATE INDEX `events_task_seq_idx` ON `events` (`task_id`,`sequence`);--> statement-breakpoint
CREATE INDEX `events_client_seq_idx` ON `events` (`client_id`,`seq`);--> statement-breakpoint
CREATE INDEX `events_due_idx` ON `events` (`delivery_status`,`next_attempt_at`);--> statement-breakpoint
CREATE TABLE `tasks` (
	`id` text PRIMARY KEY NOT NULL,
	`client_id` text NOT NULL,
	`type` text NOT NULL,
	`model` text NOT NULL,
	`status` text NOT NULL,
	`phase` text NOT NULL,
	`request_json` text NOT NULL,
	`callback_url` text,
	`callback_events` text NOT NULL,
	`metadata_json` text,
	`idempotency_key` text NOT NULL,
	`request_hash` text NOT NULL,
	`upstream_account` text NOT NULL,
	`upstream_idempotency_key` text NOT NULL,
	`upstream_task_id` text,
	`output_json` text,
	`points_charged` integer,
	`points_refunded` integer,
	`error_json` text,
	`event_sequence` integer DEFAULT 0 NOT NULL,
	`submit_attempts` integer DEFAULT 0 NOT NULL,
	`poll_count` integer DEFAULT 0 NOT NULL,
	`next_run_at` integer,
	`claimed_until` integer,
	`claim_token` text,
	`expires_at` integer,
	`created_at` integer NOT NULL,
	`updated_at` integer NOT NULL,
	`submitted_at` integer,
	`completed_at` integer,
	FOREIGN KEY (`client_id`) REFERENCES `clients`(`id`) ON UPDATE no action ON DELETE no action
);
--> statement-breakpoint
CREATE UNIQUE INDEX `tasks_client_idempotency_uq` ON `tasks` (`client_id`,`idempotency_key`);--> statement-breakpoint
CREATE INDEX `tasks_client_id_idx` ON `tasks` (`client_id`,`id`);--> statement-breakpoint
CREATE INDEX `tasks_client_status_idx` ON `tasks` (`client_id`,`status`,`id`);--> statement-breakpoint
CREATE INDEX `tasks_phase_due_idx` ON `tasks` (`phase`,`upstream_account`,`next_run_at`);--> statement-breakpoint
CREATE INDEX `tasks_phase_next_idx` ON `tasks` (`phase`,`next_run_at`);--> statement-breakpoint
CREATE INDEX `tasks_admission_idx` ON `tasks` (`phase`,`upstream_account`,`client_id`,`next_run_at`);--> statement-breakpoint
CREATE INDEX `tasks_phase_expires_idx` ON `tasks` (`phase`,`expires_at`);--> statement-breakpoint
CREATE INDEX `tasks_upstream_task_idx` ON `tasks` (`upstream_account`,`upstream_task_id`);--> statement-breakpoint
CREATE INDEX `tasks_done_completed_idx` ON `tasks` (`phase`,`completed_at`);--> statement-breakpoint
CREATE TABLE `upstream_accounts` (
	`id` text PRIMARY KEY NOT NULL,
	`learned_max_concurrent` integer,
	`learned_at` integer,
	`reads_paused_until` integer,
	`submit_paused_until` integer,
	`updated_at` integer NOT NULL
);
--> statement-breakpoint
CREATE TABLE `upstream_reads` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`account` text NOT NULL,
	`at` integer NOT NULL
);
--> statement-breakpoint
CREATE INDEX `upstream_reads_account_at_idx` ON `upstream_reads` (`account`,`at`);