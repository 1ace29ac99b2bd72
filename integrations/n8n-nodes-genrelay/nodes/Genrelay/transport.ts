import {
  type IDataObject,
  type IExecuteFunctions,
  type IHookFunctions,
  type IHttpRequestMethods,
  type IHttpRequestOptions,
  type ILoadOptionsFunctions,
  type IWebhookFunctions,
  type IN8nHttpFullResponse,
  type JsonObject,
  NodeApiError,
} from "n8n-workflow";

type Context = IExecuteFunctions | IHookFunctions | ILoadOptionsFunctions | IWebhookFunctions;

/** A relay answer: its status and its JSON body ({} when it has none, as a 204 does). */
export interface RelayResponse {
  statusCode: number;
  body: IDataObject;
}

/**
 * One call of the relay's API, authenticated by the credential (Authorization: Bearer <API key>).
 * It never throws on an HTTP status: the caller knows which statuses it expects (a 404 means "gone"
 * to the trigger's webhook methods, and an error anywhere else).
 */
export async function relayRequest(
  this: Context,
  method: IHttpRequestMethods,
  path: string,
  options: { body?: IDataObject; qs?: IDataObject; headers?: IDataObject } = {},
): Promise<RelayResponse> {
  const credentials = await this.getCredentials("genrelayApi");
  const baseUrl = String(credentials.baseUrl ?? "").replace(/\/+$/, "");
  const request: IHttpRequestOptions = {
    method,
    url: `${baseUrl}${path}`,
    json: true,
    returnFullResponse: true,
    ignoreHttpStatusErrors: true,
  };
  if (options.body !== undefined) request.body = options.body;
  if (options.qs !== undefined) request.qs = options.qs;
  if (options.headers !== undefined) request.headers = options.headers;
  const response = (await this.helpers.httpRequestWithAuthentication.call(
    this,
    "genrelayApi",
    request,
  )) as IN8nHttpFullResponse;
  const body = typeof response.body === "object" && response.body !== null ? (response.body as IDataObject) : {};
  return { statusCode: response.statusCode, body };
}

/**
 * The body of an answer whose status is one of `expected`; any other answer becomes a NodeApiError
 * that carries the relay's error envelope ({"error":{"code","message","request_id"}}).
 */
export function expectStatus(this: Context, response: RelayResponse, expected: number[]): IDataObject {
  if (expected.includes(response.statusCode)) return response.body;
  const error = (response.body.error ?? {}) as IDataObject;
  const code = typeof error.code === "string" ? error.code : "unexpected_response";
  const message = typeof error.message === "string" ? error.message : `The relay answered ${response.statusCode}.`;
  throw new NodeApiError(this.getNode(), response.body as JsonObject, {
    httpCode: String(response.statusCode),
    message: `${code}: ${message}`,
    description: typeof error.request_id === "string" ? `Request ID ${error.request_id}` : undefined,
  });
}
