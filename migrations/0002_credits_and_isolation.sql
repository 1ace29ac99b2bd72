CREATE TABLE `credit_ledger` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`client_id` text NOT NULL,
	`task_id` text NOT NULL,
	`charged` integer NOT NULL,
	`refunded` integer NOT NULL,
	`at` integer NOT NULL,
	FOREIGN KEY (`client_id`) REFERENCES `clients`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE INDEX `credit_ledger_client_idx` ON `credit_ledger` (`client_id`,`id`);--> statement-breakpoint
CREATE TABLE `health_probe` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`at` integer NOT NULL,
	`pad` blob
);
--> statement-breakpoint
CREATE TABLE `learned_prices` (
	`price_key` text PRIMARY KEY NOT NULL,
	`points` integer NOT NULL,
	`updated_at` integer NOT NULL
);
--> statement-breakpoint
ALTER TABLE `clients` ADD `points_charged` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE `clients` ADD `points_refunded` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE `clients` ADD `points_reserved` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE `clients` ADD `event_seq` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE `events` ADD `client_seq` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE `events` ADD `destination_host` text DEFAULT '' NOT NULL;--> statement-breakpoint
CREATE INDEX `events_client_feed_idx` ON `events` (`client_id`,`client_seq`);--> statement-breakpoint
CREATE INDEX `events_destination_idx` ON `events` (`client_id`,`destination_host`,`delivery_status`);--> statement-breakpoint
ALTER TABLE `tasks` ADD `points_reserved` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE `tasks` ADD `price_key` text DEFAULT '' NOT NULL;--> statement-breakpoint
ALTER TABLE `tasks` ADD `conflict_since` integer;--> statement-breakpoint
CREATE INDEX `tasks_phase_lease_idx` ON `tasks` (`phase`,`claimed_until`);--> statement-breakpoint
CREATE INDEX `tasks_client_phase_idx` ON `tasks` (`client_id`,`phase`);--> statement-breakpoint
-- Backfill: the ledger starts from what the retained tasks say was charged and refunded.
INSERT INTO `credit_ledger` (`client_id`, `task_id`, `charged`, `refunded`, `at`)
  SELECT `client_id`, `id`, coalesce(`points_charged`, 0), coalesce(`points_refunded`, 0), `updated_at` FROM `tasks`
  WHERE coalesce(`points_charged`, 0) <> 0 OR coalesce(`points_refunded`, 0) <> 0;--> statement-breakpoint
UPDATE `clients` SET
  `points_charged` = (SELECT coalesce(sum(`charged`), 0) FROM `credit_ledger` l WHERE l.`client_id` = `clients`.`id`),
  `points_refunded` = (SELECT coalesce(sum(`refunded`), 0) FROM `credit_ledger` l WHERE l.`client_id` = `clients`.`id`);--> statement-breakpoint
-- Per-client feed positions, in the relay-wide order they had.
UPDATE `events` SET `client_seq` = r.rn
  FROM (SELECT `seq`, row_number() OVER (PARTITION BY `client_id` ORDER BY `seq`) AS rn FROM `events`) AS r
  WHERE r.`seq` = `events`.`seq`;--> statement-breakpoint
UPDATE `clients` SET `event_seq` = (SELECT coalesce(max(`client_seq`), 0) FROM `events` e WHERE e.`client_id` = `clients`.`id`);
