/**
 * The delivery key: one client's callbacks to one destination `hostname:port`. The unit of the
 * per-host cap, the circuit breaker and endpoint health (docs/decisions/0006). Client ids never
 * contain `|`. Both drivers spell it `client_id || '|' || destination_host` in SQL.
 */
export function deliveryKey(clientId: string, host: string): string {
  return `${clientId}|${host}`;
}

/** A delivery key's client id and host. */
export function splitDeliveryKey(key: string): [clientId: string, host: string] {
  const bar = key.indexOf("|");
  return [key.slice(0, bar), key.slice(bar + 1)];
}
