import type { Context } from "hono";
import type { IncomingMessage } from "node:http";

/**
 * The address of the socket a request came on, or undefined for a request made in process
 * (app.request: tests, the dashboard's own calls). X-Forwarded-For is never read: anyone can send
 * it, and a limit keyed by it would let a flooder pick a fresh bucket for every request. Behind a
 * reverse proxy every caller therefore shares the proxy's address (docs/public-routes.md).
 */
export function socketAddress(c: Context): string | undefined {
  const incoming = (c.env as { incoming?: IncomingMessage } | undefined)?.incoming;
  return incoming?.socket?.remoteAddress;
}

/**
 * The bucket an address is counted in: an IPv4 address (also IPv4-mapped IPv6) as it is, an IPv6
 * address by its /64, the smallest block one subscriber is given, so a host cannot spread a flood
 * over its 2^64 addresses.
 */
export function addressBucket(address: string): string {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (mapped) return mapped[1]!;
  if (!address.includes(":")) return address;
  const [head = "", tail] = address.split("%")[0]!.split("::");
  const left = head ? head.split(":") : [];
  const right = tail ? tail.split(":") : [];
  const groups =
    tail === undefined
      ? left
      : [...left, ...Array<string>(Math.max(0, 8 - left.length - right.length)).fill("0"), ...right];
  return `${groups
    .slice(0, 4)
    .map((g) => g.toLowerCase().replace(/^0+(?=.)/, ""))
    .join(":")}::/64`;
}
