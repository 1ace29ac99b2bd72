CREATE TABLE `client_storage` (
	`client_id` text PRIMARY KEY NOT NULL,
	`stored_bytes` integer NOT NULL,
	FOREIGN KEY (`client_id`) REFERENCES `clients`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
ALTER TABLE `tasks` ADD `stored_bytes` integer DEFAULT 0 NOT NULL;