/**
 * Who wants to know that a client's row changed (settings, limits, its key's revocation): the API
 * key cache of each process (src/services/clients.ts). Each store keeps one; its update/updateWith
 * tell it at once, and on PostgreSQL the NOTIFY listener tells it of another process's change.
 */
export type ClientChanged = (clientId: string | null) => void;

/** A NOTIFY payload naming a client whose row changed: the prefix and the id, nothing more. */
export const CLIENT_CHANGED = "client:";

export class ClientChanges {
  private readonly watchers = new Set<ClientChanged>();

  watch(changed: ClientChanged): () => void {
    this.watchers.add(changed);
    return () => {
      this.watchers.delete(changed);
    };
  }

  /** `null`: any client may have changed (a listener that reconnected may have missed notifications). */
  emit(clientId: string | null): void {
    for (const changed of this.watchers) changed(clientId);
  }
}
