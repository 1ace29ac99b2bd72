import type { LookupAddress } from "node:dns";
import { checkAddress, createGuardedLookup, parseHostAsIp, type Resolver } from "../net/address-guard.js";

/**
 * The address guard for broker hosts (docs/destinations.md, "Creating one"), the same one HTTP
 * deliveries connect through (net/address-guard.ts): a broker's host name is resolved by the guarded
 * lookup (every address vetted; private and loopback refused unless WEBHOOK_ALLOW_PRIVATE_NETWORKS),
 * and the client then connects to the vetted address itself, so no second, unchecked resolution
 * happens. An IP literal is checked as it is (a socket never looks one up).
 */
export interface BrokerGuardOptions {
  allowPrivateNetworks: boolean;
  resolve?: Resolver;
}

/** A refusal of the guard: nothing was sent (the attempt is `blocked`). */
export class BrokerAddressBlocked extends Error {
  constructor(message: string) {
    super(message);
    this.name = "BrokerAddressBlocked";
  }
}

export function brokerResolver(opts: BrokerGuardOptions): (hostname: string) => Promise<string> {
  const lookup = createGuardedLookup(opts);
  return async (hostname) => {
    const literal = parseHostAsIp(hostname);
    if (literal !== null) {
      if (!opts.allowPrivateNetworks) {
        const verdict = checkAddress(literal);
        if (!verdict.allowed) throw new BrokerAddressBlocked(`broker address ${literal} is ${verdict.reason}`);
      }
      return literal.replace(/^\[|\]$/g, "");
    }
    return new Promise<string>((resolve, reject) =>
      lookup(hostname, { all: true }, (err, addresses) => {
        if (err) reject(err.code === "EBLOCKED" ? new BrokerAddressBlocked(err.message) : err);
        else resolve((addresses as LookupAddress[])[0]!.address);
      }),
    );
  };
}
