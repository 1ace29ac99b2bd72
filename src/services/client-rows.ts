import { LRUCache } from "lru-cache";
import type { ClientRow } from "../store/rows.js";
import type { ServiceDeps } from "./deps.js";

/**
 * Client rows this process read recently, for the public routes (JWKS, file links) that would
 * otherwise read one per request. An entry goes when the store reports its client changed
 * (ClientStore.watch: a revocation, a rotation, a new bucket, here or on another instance; on
 * SQLite the CLI's commits, seen by pollChanges), or when the map is full (least recently used).
 * Unknown ids are not kept: a client created meanwhile is found at once.
 */
export class ClientRows {
  private readonly entries: LRUCache<string, ClientRow>;
  /** Bumped by every change: a lookup that started before a change must not store what it read. */
  private generation = 0;
  readonly stop: () => void;

  constructor(
    private readonly deps: Pick<ServiceDeps, "store">,
    size = 10_000,
  ) {
    this.entries = new LRUCache({ max: size });
    this.stop = deps.store.clients.watch((clientId) => this.forget(clientId));
  }

  async find(id: string): Promise<ClientRow | undefined> {
    this.deps.store.clients.pollChanges();
    const hit = this.entries.get(id);
    if (hit) return hit;
    const generation = this.generation;
    const row = await this.deps.store.clients.find(id);
    if (row && generation === this.generation) this.entries.set(id, row);
    return row;
  }

  /** The client's entry goes (every client's for null). */
  forget(clientId: string | null): void {
    this.generation++;
    if (clientId === null) this.entries.clear();
    else this.entries.delete(clientId);
  }
}
