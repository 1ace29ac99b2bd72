import * as stable from "@opentelemetry/semantic-conventions";
import * as incubating from "@opentelemetry/semantic-conventions/incubating";
import { describe, expect, it } from "vitest";
import { ATTR, httpClientAttributes, serverOf, urlWithoutQuery } from "../../src/telemetry/attributes.js";
import { noTelemetry } from "../../src/telemetry/index.js";

/**
 * src/telemetry/attributes.ts spells the semantic-convention names itself (so that tracing off never
 * loads the package): each is held here to the package's own constant.
 */
describe("span attribute names", () => {
  it("are the semantic conventions' own", () => {
    expect(ATTR).toEqual({
      httpRequestMethod: stable.ATTR_HTTP_REQUEST_METHOD,
      httpResponseStatusCode: stable.ATTR_HTTP_RESPONSE_STATUS_CODE,
      httpRequestResendCount: stable.ATTR_HTTP_REQUEST_RESEND_COUNT,
      httpRoute: stable.ATTR_HTTP_ROUTE,
      serverAddress: stable.ATTR_SERVER_ADDRESS,
      serverPort: stable.ATTR_SERVER_PORT,
      urlFull: stable.ATTR_URL_FULL,
      urlPath: stable.ATTR_URL_PATH,
      urlScheme: stable.ATTR_URL_SCHEME,
      errorType: stable.ATTR_ERROR_TYPE,
      messagingSystem: incubating.ATTR_MESSAGING_SYSTEM,
      messagingOperationType: incubating.ATTR_MESSAGING_OPERATION_TYPE,
      messagingDestinationName: incubating.ATTR_MESSAGING_DESTINATION_NAME,
      messagingMessageId: incubating.ATTR_MESSAGING_MESSAGE_ID,
    });
  });

  it("url.full drops the query, fragment and credentials; server.port is always given", () => {
    expect(urlWithoutQuery("https://user:pw@hooks.example.com:8443/a/b?token=secret#x")).toBe(
      "https://hooks.example.com:8443/a/b",
    );
    expect(urlWithoutQuery("not a url")).toBe("");
    expect(serverOf("https://hooks.example.com/x")).toEqual({ address: "hooks.example.com", port: 443 });
    expect(serverOf("http://127.0.0.1:9000/x")).toEqual({ address: "127.0.0.1", port: 9000 });
    expect(httpClientAttributes("POST", "http://h.example/x?q=1")).toEqual({
      "http.request.method": "POST",
      "url.full": "http://h.example/x",
      "server.address": "h.example",
      "server.port": 80,
    });
  });
});

describe("an outgoing call's attributes with tracing off", () => {
  it("are never built: no span reads them", async () => {
    let built = 0;
    const spec = {
      name: "GET /x",
      kind: "client" as const,
      parent: null,
      attributes: () => {
        built++;
        return httpClientAttributes("GET", "https://api.example.com/x");
      },
    };
    const headers = await noTelemetry.outgoing(spec, async (h) => h);
    expect(headers.traceparent).toBeUndefined();
    expect(built).toBe(0);
  });
});
