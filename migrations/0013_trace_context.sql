ALTER TABLE `events` ADD `traceparent` text;--> statement-breakpoint
ALTER TABLE `events` ADD `tracestate` text;--> statement-breakpoint
ALTER TABLE `tasks` ADD `traceparent` text;--> statement-breakpoint
ALTER TABLE `tasks` ADD `tracestate` text;