CREATE TABLE "webhook_endpoints" (
	"id" text PRIMARY KEY NOT NULL,
	"client_id" text NOT NULL,
	"url" text NOT NULL,
	"destination_host" text NOT NULL,
	"events" text NOT NULL,
	"description" text,
	"headers" text,
	"created_at" bigint NOT NULL
);
--> statement-breakpoint
ALTER TABLE "events" ADD COLUMN "webhook_id" text;--> statement-breakpoint
ALTER TABLE "events" ADD COLUMN "endpoint_id" text;--> statement-breakpoint
ALTER TABLE "webhook_endpoints" ADD CONSTRAINT "webhook_endpoints_client_id_clients_id_fk" FOREIGN KEY ("client_id") REFERENCES "public"."clients"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "webhook_endpoints_client_idx" ON "webhook_endpoints" USING btree ("client_id","created_at");