CREATE TABLE "client_storage" (
	"client_id" text PRIMARY KEY NOT NULL,
	"stored_bytes" bigint NOT NULL
);
--> statement-breakpoint
ALTER TABLE "tasks" ADD COLUMN "stored_bytes" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "client_storage" ADD CONSTRAINT "client_storage_client_id_clients_id_fk" FOREIGN KEY ("client_id") REFERENCES "public"."clients"("id") ON DELETE cascade ON UPDATE no action;