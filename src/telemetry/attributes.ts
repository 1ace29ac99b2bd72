/**
 * The OpenTelemetry semantic-convention names the relay's spans use, spelled here so that code with
 * tracing off never loads `@opentelemetry/semantic-conventions` (test/unit/telemetry-attributes.test.ts
 * holds each to the package's own constant).
 */
export const ATTR = {
  httpRequestMethod: "http.request.method",
  httpResponseStatusCode: "http.response.status_code",
  httpRequestResendCount: "http.request.resend_count",
  httpRoute: "http.route",
  serverAddress: "server.address",
  serverPort: "server.port",
  urlFull: "url.full",
  urlPath: "url.path",
  urlScheme: "url.scheme",
  errorType: "error.type",
  messagingSystem: "messaging.system",
  messagingOperationType: "messaging.operation.type",
  messagingDestinationName: "messaging.destination.name",
  messagingMessageId: "messaging.message.id",
} as const;

/** `url.full` without its query or fragment (a callback URL's query may carry a token), nor credentials. */
export function urlWithoutQuery(url: string): string {
  try {
    const u = new URL(url);
    return `${u.protocol}//${u.host}${u.pathname}`;
  } catch {
    return "";
  }
}

/** `server.address` and `server.port` of a URL, the port always given (the default one filled in). */
export function serverOf(url: string): { address: string; port: number } | null {
  try {
    const u = new URL(url);
    const port = u.port ? Number(u.port) : u.protocol === "https:" ? 443 : u.protocol === "http:" ? 80 : 0;
    return { address: u.hostname, port };
  } catch {
    return null;
  }
}

/** The attributes of an outgoing HTTP call known before it is sent. */
export function httpClientAttributes(method: string, url: string): Record<string, string | number> {
  const server = serverOf(url);
  return {
    [ATTR.httpRequestMethod]: method,
    [ATTR.urlFull]: urlWithoutQuery(url),
    ...(server ? { [ATTR.serverAddress]: server.address, [ATTR.serverPort]: server.port } : {}),
  };
}
