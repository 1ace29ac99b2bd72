DROP INDEX "events_destination_idx";--> statement-breakpoint
CREATE INDEX "events_key_due_idx" ON "events" USING btree ("client_id","destination_host","delivery_status","next_attempt_at");