import type { Config } from "../config.js";
import { decryptSecret } from "../crypto.js";
import { UpstreamClient } from "./client.js";
import { fetchTransport, type UpstreamTransport, undiciTransport } from "./transport.js";

export const DEFAULT_ACCOUNT = "default";

/** The one lookup this needs of the store (upstream/ imports no storage): a client's sealed upstream key. */
export interface UpstreamKeys {
  clients: { find(id: string): Promise<{ upstreamKeyEncrypted: string | null } | undefined> };
}

/**
 * Resolves an upstream account id ("default" or a client id that carries its own key) to a client
 * for it. Per-client keys are decrypted only here, in memory, and never logged.
 */
export class UpstreamAccounts {
  private readonly clients = new Map<string, UpstreamClient>();
  /** One transport for every account's calls (they share the upstream): an undici pool unless a fetch was given. */
  private readonly transport: UpstreamTransport;

  constructor(
    private readonly store: UpstreamKeys,
    private readonly config: Config,
    private readonly baseUrl: string,
    private readonly defaultKey: string,
    /**
     * Calls go through this fetch when given (tests pass the global one, resolved at call time, for
     * msw to intercept); otherwise through an undici pool (transport.ts).
     */
    fetchImpl: typeof fetch | undefined = undefined,
    /** Long outputs stay in the parse worker for the store to write from there (UpstreamClientOptions). */
    private readonly holdLongOutputs = false,
  ) {
    this.transport = fetchImpl
      ? fetchTransport(baseUrl, fetchImpl)
      : undiciTransport(baseUrl, config.upstreamTimeoutMs);
  }

  /** Closes the pool's connections (the relay's stop). */
  close(): Promise<void> {
    return this.transport.close();
  }

  async get(account: string): Promise<UpstreamClient> {
    let client = this.clients.get(account);
    if (!client) {
      const apiKey = await this.keyOf(account);
      client =
        this.clients.get(account) ??
        new UpstreamClient({
          baseUrl: this.baseUrl,
          apiKey,
          transport: this.transport,
          timeoutMs: this.config.upstreamTimeoutMs,
          maxBodyBytes: this.config.upstreamMaxBodyBytes,
          holdLongOutputs: this.holdLongOutputs,
        });
      this.clients.set(account, client);
    }
    return client;
  }

  private async keyOf(account: string): Promise<string> {
    if (account === DEFAULT_ACCOUNT) return this.defaultKey;
    const row = await this.store.clients.find(account);
    if (!row?.upstreamKeyEncrypted) throw new Error(`upstream account ${account} has no key`);
    if (!this.config.encryptionKey)
      throw new Error("RELAY_ENCRYPTION_KEY is required to use a client's own upstream key");
    return decryptSecret(row.upstreamKeyEncrypted, this.config.encryptionKey);
  }
}
