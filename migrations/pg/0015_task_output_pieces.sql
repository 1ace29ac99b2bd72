CREATE TABLE "task_output_pieces" (
	"ref" text NOT NULL,
	"seq" bigint NOT NULL,
	"last" boolean NOT NULL,
	"text" text NOT NULL,
	"bytes" bigint NOT NULL,
	"created_at" bigint NOT NULL,
	CONSTRAINT "task_output_pieces_ref_seq_pk" PRIMARY KEY("ref","seq")
);
--> statement-breakpoint
ALTER TABLE "tasks" ADD COLUMN "output_ref" text;--> statement-breakpoint
CREATE INDEX "task_output_pieces_created_idx" ON "task_output_pieces" USING btree ("created_at");--> statement-breakpoint
CREATE INDEX "tasks_output_ref_idx" ON "tasks" USING btree ("output_ref") WHERE output_ref IS NOT NULL;--> statement-breakpoint
-- An output kept in pieces counts toward its client's stored bytes like one in output_json
-- (0011_stored_bytes_triggers.sql): logged when a task takes its ref, taken off when the task is
-- deleted. Summed from each piece's `bytes`, so the trigger never reads the text. Orphan pieces (a
-- writer killed before its transition) are never counted and are swept within the hour after.
CREATE FUNCTION genrelay_task_output_ref_bytes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO client_storage_log (client_id, bytes) VALUES (NEW.client_id,
    coalesce((SELECT sum(bytes) FROM task_output_pieces WHERE ref = NEW.output_ref), 0)
    - coalesce((SELECT sum(bytes) FROM task_output_pieces WHERE ref = OLD.output_ref), 0));
  RETURN NULL;
END $$;
--> statement-breakpoint
CREATE TRIGGER tasks_output_ref_bytes AFTER UPDATE OF output_ref ON tasks FOR EACH ROW
  WHEN (OLD.output_ref IS DISTINCT FROM NEW.output_ref)
  EXECUTE FUNCTION genrelay_task_output_ref_bytes();
--> statement-breakpoint
CREATE FUNCTION genrelay_task_output_ref_deleted_bytes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO client_storage_log (client_id, bytes)
    SELECT o.client_id, -sum(p.bytes) FROM old_rows o JOIN task_output_pieces p ON p.ref = o.output_ref
    GROUP BY o.client_id;
  RETURN NULL;
END $$;
--> statement-breakpoint
CREATE TRIGGER tasks_output_ref_bytes_out AFTER DELETE ON tasks REFERENCING OLD TABLE AS old_rows
  FOR EACH STATEMENT EXECUTE FUNCTION genrelay_task_output_ref_deleted_bytes();
