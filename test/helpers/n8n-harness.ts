import { EventEmitter, once } from "node:events";
import http from "node:http";
import { createRequire } from "node:module";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import type {
  ICredentialType,
  IDataObject,
  IHttpRequestOptions,
  INodeExecutionData,
  INodeType,
  IWebhookResponseData,
} from "n8n-workflow";
import { ROOT } from "./doc-blocks.js";

/**
 * What n8n gives a node at run time, for the n8n-nodes-genrelay package's tests: the function
 * contexts (`this` of execute, loadOptions, the webhook methods and webhook) over real HTTP on
 * loopback. n8n itself needs Node 22 and is large, so it is not run here (scripts/n8n-e2e.sh runs
 * the package in a real n8n). What the contexts do follows n8n's own:
 *  - httpRequestWithAuthentication applies the credential type's own `authenticate` (its
 *    `={{$credentials.…}}` expressions evaluated), throws on a non-2xx answer unless
 *    `ignoreHttpStatusErrors`, and with `returnFullResponse` answers {body, headers, statusCode};
 *  - the credential test sends the credential type's own `test.request`;
 *  - a webhook request reaches `webhook()` with the raw body as `rawBody` and the real response
 *    object; `{noWebhookResponse: true}` means the node has answered, otherwise n8n answers 200.
 */

export const PACKAGE_DIR = join(ROOT, "integrations", "n8n-nodes-genrelay");

const requireFromPackage = createRequire(join(PACKAGE_DIR, "package.json"));

export interface GenrelayPackage {
  Genrelay: new () => INodeType;
  GenrelayTrigger: new () => INodeType;
  GenrelayApi: new () => ICredentialType;
}

/** The built package's classes, loaded as n8n loads them: from the files its package.json lists. */
export function loadPackage(): GenrelayPackage {
  const manifest = requireFromPackage("./package.json") as { n8n: { nodes: string[]; credentials: string[] } };
  const exported: Record<string, unknown> = {};
  for (const file of [...manifest.n8n.nodes, ...manifest.n8n.credentials])
    Object.assign(exported, requireFromPackage(`./${file}`));
  return exported as unknown as GenrelayPackage;
}

export interface Credentials {
  baseUrl: string;
  apiKey: string;
  webhookSecret: string;
}

/** n8n's `={{ … }}` parameter expressions, with `$credentials` in scope. */
function resolve(value: unknown, credentials: Credentials): unknown {
  if (typeof value !== "string" || !value.startsWith("=")) return value;
  return value.slice(1).replace(/\{\{([\s\S]+?)\}\}/g, (_, expression: string) => {
    // The credential type's own expressions, evaluated as n8n evaluates them (JavaScript).
    return String(new Function("$credentials", `return (${expression});`)(credentials));
  });
}

/** An HTTP error as n8n's request helper throws it: the status and the parsed body kept. */
export class HttpError extends Error {
  constructor(
    readonly statusCode: number,
    readonly body: unknown,
  ) {
    super(`Request failed with status code ${statusCode}`);
  }
}

/** n8n's `httpRequest`, for what the package uses of it. */
export async function httpRequest(
  options: IHttpRequestOptions,
  extraHeaders: Record<string, string> = {},
): Promise<unknown> {
  const url = new URL(
    options.baseURL ? `${options.baseURL.replace(/\/$/, "")}/${options.url.replace(/^\//, "")}` : options.url,
  );
  for (const [name, value] of Object.entries(options.qs ?? {}))
    if (value !== undefined) url.searchParams.set(name, String(value));
  const headers = new Headers();
  for (const [name, value] of Object.entries({ ...(options.headers ?? {}), ...extraHeaders }))
    headers.set(name, String(value));
  let body: string | undefined;
  if (options.body !== undefined) {
    body = options.json || typeof options.body === "object" ? JSON.stringify(options.body) : String(options.body);
    if (!headers.has("content-type")) headers.set("content-type", "application/json");
  }
  if (options.json) headers.set("accept", "application/json");
  const response = await fetch(url, { method: options.method ?? "GET", headers, body });
  const text = await response.text();
  let parsed: unknown = text;
  try {
    parsed = text === "" ? "" : JSON.parse(text);
  } catch {
    // not JSON: n8n hands the text over as it is
  }
  if (!response.ok && !options.ignoreHttpStatusErrors) throw new HttpError(response.status, parsed);
  if (!options.returnFullResponse) return parsed;
  return {
    body: parsed,
    headers: Object.fromEntries(response.headers),
    statusCode: response.status,
    statusMessage: response.statusText,
  };
}

/** The headers a credential type's `authenticate` adds to a request. */
export function authenticationHeaders(
  credentialType: ICredentialType,
  credentials: Credentials,
): Record<string, string> {
  const authenticate = credentialType.authenticate as
    | { type: string; properties: { headers?: Record<string, string> } }
    | undefined;
  if (authenticate?.type !== "generic") throw new Error("the harness knows generic authentication only");
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(authenticate.properties.headers ?? {}))
    headers[name] = String(resolve(value, credentials));
  return headers;
}

/** n8n's credential test: the credential type's `test.request` with its authentication; throws on a non-2xx. */
export async function testCredential(credentialType: ICredentialType, credentials: Credentials): Promise<unknown> {
  const request = credentialType.test?.request;
  if (!request) throw new Error("the credential type has no test request");
  const options = {
    ...request,
    baseURL: String(resolve(request.baseURL, credentials)),
    url: String(resolve(request.url, credentials)),
  };
  return httpRequest(options as IHttpRequestOptions, authenticationHeaders(credentialType, credentials));
}

/** What every context of the package's nodes shares. */
export interface ContextOptions {
  credentialType: ICredentialType;
  credentials: Credentials;
  /** Node parameters (for execute, one set per item may be given with `items`). */
  parameters?: Record<string, unknown>;
  node?: { id: string; name: string };
}

function baseContext(options: ContextOptions) {
  const node = {
    id: "5f0c1d2e-3a4b-4c5d-8e6f-7a8b9c0d1e2f",
    name: "Genrelay",
    typeVersion: 1,
    type: "genrelay",
    position: [0, 0],
    parameters: {},
    ...options.node,
  };
  return {
    getNode: () => node,
    getCredentials: async (name: string) => {
      if (name !== options.credentialType.name) throw new Error(`no credential ${name}`);
      return { ...options.credentials } as unknown as IDataObject;
    },
    helpers: {
      httpRequestWithAuthentication: async (name: string, request: IHttpRequestOptions) => {
        if (name !== options.credentialType.name) throw new Error(`no credential ${name}`);
        return httpRequest(request, authenticationHeaders(options.credentialType, options.credentials));
      },
      returnJsonArray: (data: IDataObject | IDataObject[]) =>
        (Array.isArray(data) ? data : [data]).map((json) => ({ json })),
    },
  };
}

function parameter(parameters: Record<string, unknown>, name: string, fallback?: unknown): unknown {
  if (name in parameters) return parameters[name];
  if (fallback !== undefined) return fallback;
  throw new Error(`Could not get parameter "${name}"`);
}

/** `this` of execute(): one parameter set per input item; continueOnFail as the node's setting. */
export function executeContext(
  options: ContextOptions & { items: Record<string, unknown>[]; executionId?: string; continueOnFail?: boolean },
) {
  return {
    ...baseContext(options),
    getInputData: (): INodeExecutionData[] => options.items.map(() => ({ json: {} })),
    getNodeParameter: (name: string, itemIndex: number, fallback?: unknown) =>
      parameter(options.items[itemIndex] ?? {}, name, fallback),
    getExecutionId: () => options.executionId ?? "1001",
    continueOnFail: () => options.continueOnFail ?? false,
  };
}

/** `this` of a loadOptions method. */
export function loadOptionsContext(options: ContextOptions) {
  return {
    ...baseContext(options),
    getNodeParameter: (name: string, fallback?: unknown) => parameter(options.parameters ?? {}, name, fallback),
  };
}

/** `this` of the webhook methods (checkExists, create, delete) of one activation. */
export function hookContext(options: ContextOptions & { webhookUrl: string; staticData: IDataObject }) {
  return {
    ...baseContext(options),
    getNodeParameter: (name: string, fallback?: unknown) => parameter(options.parameters ?? {}, name, fallback),
    getNodeWebhookUrl: (name: string) => (name === "default" ? options.webhookUrl : undefined),
    getWorkflowStaticData: (type: string) => {
      if (type !== "node") throw new Error("the package keeps node static data only");
      return options.staticData;
    },
    getWorkflow: () => ({ id: "wf_test", name: "Genrelay test", active: true }),
    getMode: () => "trigger",
    getActivationMode: () => "activate",
  };
}

export interface WebhookServer {
  url: string;
  /** What each webhook() call emitted (its workflowData), in order; a refused request adds nothing. */
  emitted: INodeExecutionData[][];
  /** Resolves with the next emission. */
  nextEmission(): Promise<INodeExecutionData[]>;
  close(): Promise<void>;
}

/**
 * A loopback HTTP server that hands each request to the trigger's webhook(), the way n8n's webhook
 * route does: the raw body as `req.rawBody`, the parsed JSON as `req.body`, the real response object.
 */
export async function startWebhookServer(
  trigger: INodeType,
  options: ContextOptions & { staticData?: IDataObject },
): Promise<WebhookServer> {
  const emitter = new EventEmitter();
  const staticData = options.staticData ?? {};
  const emitted: INodeExecutionData[][] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const rawBody = Buffer.concat(chunks);
      let body: unknown = {};
      try {
        body = JSON.parse(rawBody.toString("utf8"));
      } catch {
        // n8n's body parser leaves a body it cannot parse empty
      }
      const request = Object.assign(req, { rawBody, body, header: (name: string) => req.headers[name.toLowerCase()] });
      const context = {
        ...baseContext(options),
        getNodeParameter: (name: string, fallback?: unknown) => parameter(options.parameters ?? {}, name, fallback),
        getRequestObject: () => request,
        getResponseObject: () => res,
        getHeaderData: () => req.headers,
        getWorkflowStaticData: (type: string) => {
          if (type !== "node") throw new Error("the package keeps node static data only");
          return staticData;
        },
        getBodyData: () => body as IDataObject,
        getWebhookName: () => "default",
        getMode: () => "trigger",
      };
      (trigger.webhook as (this: unknown) => Promise<IWebhookResponseData>)
        .call(context)
        .then((result) => {
          if (result.noWebhookResponse) return;
          if (result.workflowData) {
            emitted.push(result.workflowData[0] ?? []);
            emitter.emit("emission", result.workflowData[0] ?? []);
          }
          res
            .writeHead(200, { "Content-Type": "application/json" })
            .end(JSON.stringify({ message: "Workflow was started" }));
        })
        .catch((err: unknown) => {
          if (!res.headersSent) res.writeHead(500, { "Content-Type": "application/json" });
          res.end(JSON.stringify({ message: (err as Error).message }));
        });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/webhook/5f0c1d2e/webhook`,
    emitted,
    nextEmission: async () => (await once(emitter, "emission"))[0] as INodeExecutionData[],
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
