import {
  type IDataObject,
  type IHookFunctions,
  type INodeType,
  type INodeTypeDescription,
  type IWebhookFunctions,
  type IWebhookResponseData,
  type JsonObject,
  NodeApiError,
  NodeConnectionTypes,
  NodeOperationError,
} from "n8n-workflow";
import {
  firstDelivery,
  header,
  type JwksSource,
  type SigningScheme,
  schemesOf,
  verificationProblem,
  verifyWebhook,
} from "./signature";
import { expectStatus, relayRequest } from "./transport";

const ENDPOINTS = "/openapi/v1/webhooks/endpoints";

/**
 * The client's published Ed25519 keys (GET /openapi/v1/webhooks/jwks/{client_id}, no API key needed),
 * read from the credential's relay when the credential names its client ID; none otherwise.
 */
function jwksOf(this: IWebhookFunctions, baseUrl: string, clientId: string): JwksSource | undefined {
  if (clientId === "") return undefined;
  const path = `/openapi/v1/webhooks/jwks/${encodeURIComponent(clientId)}`;
  return {
    url: `${baseUrl.replace(/\/+$/, "")}${path}`,
    fetch: async () => {
      const response = await relayRequest.call(this, "GET", path);
      if (response.statusCode !== 200)
        throw new NodeOperationError(this.getNode(), `The relay answered ${response.statusCode} for ${path}`);
      return response.body;
    },
  };
}

/** How long a client's signing scheme, read from its webhook settings, is trusted before it is read again. */
const SETTINGS_MAX_AGE_MS = 60_000;

/**
 * The schemes whose signatures count for the credential's client (`schemesOf`), read from its
 * webhook settings at most once a minute and kept in the node's static data; the ones kept there
 * (pinned at activation) while the relay cannot be read.
 */
async function signingSchemes(this: IHookFunctions | IWebhookFunctions): Promise<SigningScheme[] | undefined> {
  const staticData = this.getWorkflowStaticData("node");
  const pinned = Array.isArray(staticData.signatureSchemes)
    ? (staticData.signatureSchemes as SigningScheme[])
    : undefined;
  if (pinned !== undefined && Date.now() - Number(staticData.signatureReadAt ?? 0) < SETTINGS_MAX_AGE_MS) return pinned;
  const response = await relayRequest.call(this, "GET", "/openapi/v1/webhooks/settings").catch(() => undefined);
  if (response?.statusCode !== 200) return pinned;
  const schemes = schemesOf(response.body.data as IDataObject | undefined, Date.now());
  staticData.signatureSchemes = schemes;
  staticData.signatureReadAt = Date.now();
  return schemes;
}

function selectedEvents(this: IHookFunctions | IWebhookFunctions): string[] {
  return [...(this.getNodeParameter("events", []) as string[])].sort();
}

/** Whether the relay's endpoint still matches this activation: the same URL and the same events. */
function matches(this: IHookFunctions, endpoint: IDataObject): boolean {
  const events = Array.isArray(endpoint.events) ? [...(endpoint.events as string[])].sort() : [];
  return endpoint.url === this.getNodeWebhookUrl("default") && events.join(",") === selectedEvents.call(this).join(",");
}

/**
 * Starts a workflow on genrelay's task webhooks. Activating the workflow subscribes this node's
 * webhook URL as an endpoint of your genrelay client (its id is kept in the node's static data);
 * deactivating it removes the endpoint. Each webhook's Standard Webhooks signature is checked before
 * anything is emitted, `v1` (HMAC) with the credential's webhook secret and `v1a` (Ed25519) with the
 * keys the relay publishes for the credential's client ID, in the scheme the client signs with (read
 * from its webhook settings): a request none of whose signatures verifies gets 401, a credential with
 * nothing to verify with is refused at activation, and a webhook-id seen before starts nothing.
 */
export class GenrelayTrigger implements INodeType {
  description: INodeTypeDescription = {
    displayName: "Genrelay Trigger",
    name: "genrelayTrigger",
    icon: { light: "file:../../icons/genrelay.svg", dark: "file:../../icons/genrelay.dark.svg" },
    group: ["trigger"],
    version: 1,
    subtitle: '={{$parameter["events"].join(", ")}}',
    description: "Starts the workflow when a genrelay task changes status",
    defaults: { name: "Genrelay Trigger" },
    inputs: [],
    outputs: [NodeConnectionTypes.Main],
    credentials: [{ name: "genrelayApi", required: true }],
    webhooks: [{ name: "default", httpMethod: "POST", responseMode: "onReceived", path: "webhook" }],
    properties: [
      {
        displayName: "Events",
        name: "events",
        type: "multiOptions",
        required: true,
        options: [
          { name: "Task Canceled", value: "task.canceled", description: "A task was canceled before it was submitted" },
          { name: "Task Failed", value: "task.failed", description: "A task failed" },
          { name: "Task Processing", value: "task.processing", description: "The upstream started a task" },
          { name: "Task Succeeded", value: "task.succeeded", description: "A task succeeded: its output is ready" },
        ],
        default: ["task.succeeded", "task.failed", "task.canceled"],
        description: "The task events that start the workflow",
      },
    ],
  };

  webhookMethods = {
    default: {
      async checkExists(this: IHookFunctions): Promise<boolean> {
        const staticData = this.getWorkflowStaticData("node");
        if (typeof staticData.endpointId !== "string") return false;
        const path = `${ENDPOINTS}/${encodeURIComponent(staticData.endpointId)}`;
        const response = await relayRequest.call(this, "GET", path);
        if (response.statusCode === 404) {
          delete staticData.endpointId;
          return false;
        }
        const endpoint = (expectStatus.call(this, response, [200]).data ?? {}) as IDataObject;
        if (matches.call(this, endpoint)) return true;
        // Subscribed for another URL or other events: remove it, and create() subscribes anew.
        expectStatus.call(this, await relayRequest.call(this, "DELETE", path), [204, 404]);
        delete staticData.endpointId;
        return false;
      },

      async create(this: IHookFunctions): Promise<boolean> {
        // A trigger that could not tell a forged webhook from a real one is refused at activation.
        const credentials = await this.getCredentials("genrelayApi");
        const problem = verificationProblem(
          String(credentials.webhookSecret ?? "").trim(),
          String(credentials.clientId ?? "").trim(),
          (await signingSchemes.call(this)) ?? ["hmac", "ed25519"],
        );
        if (problem !== undefined) {
          throw new NodeOperationError(this.getNode(), `The trigger cannot verify webhooks: ${problem}.`);
        }
        const workflow = this.getWorkflow();
        const body: IDataObject = {
          url: this.getNodeWebhookUrl("default"),
          events: selectedEvents.call(this),
          description: `n8n: workflow ${workflow.name ?? workflow.id ?? ""}, node ${this.getNode().name}`.slice(0, 200),
        };
        const created = expectStatus.call(this, await relayRequest.call(this, "POST", ENDPOINTS, { body }), [200, 201]);
        const endpoint = (created.data ?? {}) as IDataObject;
        if (typeof endpoint.id !== "string") {
          throw new NodeApiError(this.getNode(), created as JsonObject, {
            message: "The relay created an endpoint without an id.",
          });
        }
        this.getWorkflowStaticData("node").endpointId = endpoint.id;
        return true;
      },

      async delete(this: IHookFunctions): Promise<boolean> {
        const staticData = this.getWorkflowStaticData("node");
        if (typeof staticData.endpointId !== "string") return true;
        const path = `${ENDPOINTS}/${encodeURIComponent(staticData.endpointId)}`;
        // 404: someone removed it already, which is what deactivating wants.
        expectStatus.call(this, await relayRequest.call(this, "DELETE", path), [204, 404]);
        delete staticData.endpointId;
        return true;
      },
    },
  };

  async webhook(this: IWebhookFunctions): Promise<IWebhookResponseData> {
    const request = this.getRequestObject();
    const credentials = await this.getCredentials("genrelayApi");
    const rawBody: Buffer | undefined = Buffer.isBuffer(request.rawBody) ? request.rawBody : undefined;
    const verdict = await verifyWebhook(
      String(credentials.webhookSecret ?? ""),
      jwksOf.call(this, String(credentials.baseUrl ?? ""), String(credentials.clientId ?? "").trim()),
      this.getHeaderData(),
      rawBody,
      Math.floor(Date.now() / 1000),
      await signingSchemes.call(this),
    );
    if (!verdict.ok || rawBody === undefined) {
      const response = this.getResponseObject();
      response.writeHead(401, { "Content-Type": "application/json" });
      response.end(
        JSON.stringify({ error: { code: "invalid_signature", message: verdict.ok ? "no body" : verdict.reason } }),
      );
      return { noWebhookResponse: true };
    }
    const event = JSON.parse(rawBody.toString("utf8")) as IDataObject;
    // An event this node does not listen to (a sample, or one sent to this URL by hand) starts nothing.
    if (!selectedEvents.call(this).includes(String(event.type))) return {};
    // A webhook-id accepted before (a replay, or a retry whose answer was lost) starts nothing either.
    const headers = this.getHeaderData() as Record<string, string | undefined>;
    if (!firstDelivery(String(header(headers, "webhook-id")), String(header(headers, "webhook-timestamp")), Date.now()))
      return {};
    return { workflowData: [this.helpers.returnJsonArray(event)] };
  }
}
