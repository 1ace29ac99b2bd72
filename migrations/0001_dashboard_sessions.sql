CREATE TABLE `dashboard_sessions` (
	`token_hash` text PRIMARY KEY NOT NULL,
	`client_id` text NOT NULL,
	`csrf_token` text NOT NULL,
	`created_at` integer NOT NULL,
	`last_seen_at` integer NOT NULL,
	`expires_at` integer NOT NULL,
	`revoked_at` integer,
	FOREIGN KEY (`client_id`) REFERENCES `clients`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE INDEX `dashboard_sessions_client_idx` ON `dashboard_sessions` (`client_id`);--> statement-breakpoint
CREATE INDEX `dashboard_sessions_expires_idx` ON `dashboard_sessions` (`expires_at`);