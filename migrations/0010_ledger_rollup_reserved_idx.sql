ALTER TABLE `credit_ledger` ADD `rolled_up` integer DEFAULT true NOT NULL;--> statement-breakpoint
CREATE INDEX `credit_ledger_unrolled_idx` ON `credit_ledger` (`client_id`) WHERE NOT rolled_up;--> statement-breakpoint
CREATE INDEX `tasks_client_reserved_idx` ON `tasks` (`client_id`,`points_reserved`) WHERE points_reserved <> 0;