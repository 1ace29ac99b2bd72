CREATE TABLE "delivery_keys" (
	"client_id" text NOT NULL,
	"destination_host" text NOT NULL,
	CONSTRAINT "delivery_keys_client_id_destination_host_pk" PRIMARY KEY("client_id","destination_host")
);
--> statement-breakpoint
CREATE INDEX "events_key_leased_idx" ON "events" USING btree ("client_id","destination_host","claimed_until") WHERE claimed_until IS NOT NULL AND delivery_status = 'pending';