CREATE TABLE `endpoint_health` (
	`client_id` text NOT NULL,
	`host` text NOT NULL,
	`failing_since` integer,
	`failed_attempts` integer DEFAULT 0 NOT NULL,
	`last_error` text,
	`last_success_at` integer,
	`notice_sent_at` integer,
	`updated_at` integer NOT NULL,
	FOREIGN KEY (`client_id`) REFERENCES `clients`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE UNIQUE INDEX `endpoint_health_key_uq` ON `endpoint_health` (`client_id`,`host`);--> statement-breakpoint
CREATE INDEX `endpoint_health_failing_idx` ON `endpoint_health` (`failing_since`);--> statement-breakpoint
CREATE TABLE `notices` (
	`id` text PRIMARY KEY NOT NULL,
	`client_id` text NOT NULL,
	`type` text NOT NULL,
	`payload` text NOT NULL,
	`url` text NOT NULL,
	`delivery_status` text NOT NULL,
	`attempts` integer DEFAULT 0 NOT NULL,
	`next_attempt_at` integer,
	`claimed_until` integer,
	`claim_token` text,
	`last_status_code` integer,
	`last_error` text,
	`delivered_at` integer,
	`created_at` integer NOT NULL,
	FOREIGN KEY (`client_id`) REFERENCES `clients`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE INDEX `notices_due_idx` ON `notices` (`delivery_status`,`next_attempt_at`);--> statement-breakpoint
CREATE INDEX `notices_client_idx` ON `notices` (`client_id`,`created_at`);--> statement-breakpoint
DROP INDEX `tasks_upstream_task_idx`;--> statement-breakpoint
ALTER TABLE `tasks` ADD `callback_headers` text;--> statement-breakpoint
ALTER TABLE `tasks` ADD `files_json` text;--> statement-breakpoint
CREATE UNIQUE INDEX `tasks_upstream_task_uq` ON `tasks` (`upstream_account`,`upstream_task_id`);--> statement-breakpoint
ALTER TABLE `clients` ADD `notification_url` text;--> statement-breakpoint
ALTER TABLE `clients` ADD `callback_headers` text;--> statement-breakpoint
ALTER TABLE `clients` ADD `signature_scheme` text DEFAULT 'hmac' NOT NULL;--> statement-breakpoint
ALTER TABLE `clients` ADD `signing_key` text;--> statement-breakpoint
ALTER TABLE `clients` ADD `previous_signing_key` text;--> statement-breakpoint
ALTER TABLE `clients` ADD `previous_signing_key_expires_at` integer;--> statement-breakpoint
ALTER TABLE `clients` ADD `storage_config` text;--> statement-breakpoint
ALTER TABLE `events` ADD `callback_headers` text;