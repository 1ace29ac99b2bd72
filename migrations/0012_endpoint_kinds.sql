ALTER TABLE `webhook_endpoints` ADD `kind` text DEFAULT 'webhook' NOT NULL;--> statement-breakpoint
ALTER TABLE `webhook_endpoints` ADD `destination` text;