CREATE TABLE `webhook_endpoints` (
	`id` text PRIMARY KEY NOT NULL,
	`client_id` text NOT NULL,
	`url` text NOT NULL,
	`destination_host` text NOT NULL,
	`events` text NOT NULL,
	`description` text,
	`headers` text,
	`created_at` integer NOT NULL,
	FOREIGN KEY (`client_id`) REFERENCES `clients`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE INDEX `webhook_endpoints_client_idx` ON `webhook_endpoints` (`client_id`,`created_at`);--> statement-breakpoint
ALTER TABLE `events` ADD `webhook_id` text;--> statement-breakpoint
ALTER TABLE `events` ADD `endpoint_id` text;