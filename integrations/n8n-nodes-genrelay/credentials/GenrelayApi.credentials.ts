import type {
  IAuthenticateGeneric,
  Icon,
  ICredentialTestRequest,
  ICredentialType,
  INodeProperties,
} from "n8n-workflow";

/**
 * A genrelay client: the relay's address, the client's API key (sent as a bearer token on every
 * request), the client's webhook secret (HMAC `v1` signatures) and its ID (whose published Ed25519
 * keys verify `v1a` signatures), with which the trigger node checks each webhook's Standard Webhooks
 * signature.
 */
export class GenrelayApi implements ICredentialType {
  name = "genrelayApi";

  displayName = "Genrelay API";

  icon: Icon = { light: "file:../icons/genrelay.svg", dark: "file:../icons/genrelay.dark.svg" };

  documentationUrl = "https://genrelay.invalid/integrations/n8n-nodes-genrelay#credentials";

  properties: INodeProperties[] = [
    {
      displayName: "Base URL",
      name: "baseUrl",
      type: "string",
      default: "",
      placeholder: "https://relay.example.com",
      description: "The address of your genrelay relay, without a path",
      required: true,
    },
    {
      displayName: "API Key",
      name: "apiKey",
      type: "string",
      typeOptions: { password: true },
      default: "",
      description: "The API key of your genrelay client (grk_…)",
      required: true,
    },
    {
      displayName: "Webhook Secret",
      name: "webhookSecret",
      type: "string",
      typeOptions: { password: true },
      default: "",
      description:
        "The webhook secret of your genrelay client (whsec_…), for its v1 (HMAC) signatures. The Genrelay Trigger node refuses any webhook whose signature it does not verify.",
    },
    {
      displayName: "Client ID",
      name: "clientId",
      type: "string",
      default: "",
      placeholder: "cli_…",
      description:
        "The ID of your genrelay client (cli_…, printed by clients create). With it the Genrelay Trigger node also verifies v1a (Ed25519) signatures, with the keys the relay publishes for this client; needed when the client signs with ed25519.",
    },
  ];

  authenticate: IAuthenticateGeneric = {
    type: "generic",
    properties: {
      headers: {
        Authorization: "=Bearer {{$credentials.apiKey}}",
      },
    },
  };

  test: ICredentialTestRequest = {
    request: {
      baseURL: "={{$credentials.baseUrl.replace(/\\/+$/, '')}}",
      url: "/openapi/v1/tasks",
      qs: { limit: 1 },
      method: "GET",
    },
  };
}
