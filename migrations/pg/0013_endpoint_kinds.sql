ALTER TABLE "webhook_endpoints" ADD COLUMN "kind" text DEFAULT 'webhook' NOT NULL;--> statement-breakpoint
ALTER TABLE "webhook_endpoints" ADD COLUMN "destination" text;