CREATE TABLE "client_storage_grants" (
	"client_id" text NOT NULL,
	"holder" text NOT NULL,
	"allowance" bigint NOT NULL,
	CONSTRAINT "client_storage_grants_client_id_holder_pk" PRIMARY KEY("client_id","holder")
);
--> statement-breakpoint
ALTER TABLE "client_storage_grants" ADD CONSTRAINT "client_storage_grants_client_id_clients_id_fk" FOREIGN KEY ("client_id") REFERENCES "public"."clients"("id") ON DELETE cascade ON UPDATE no action;