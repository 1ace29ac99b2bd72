"use strict";

const { api } = require("./lib/api");

/**
 * A genrelay client: the relay's address and the client's API key, and optionally its webhook
 * secret (`v1` HMAC signatures) and its ID (whose published Ed25519 keys verify `v1a` signatures),
 * with which "Task finished" checks each webhook's signature. The connection test reads one
 * task: any answer but 2xx (401 for a wrong key) fails it.
 */
module.exports = {
  type: "custom",
  fields: [
    {
      key: "base_url",
      label: "Relay URL",
      type: "string",
      required: true,
      helpText: "The address of your genrelay relay, such as `https://relay.example.com`.",
    },
    {
      key: "api_key",
      label: "API Key",
      type: "password",
      required: true,
      helpText: "Your genrelay client's API key (`grk_…`).",
    },
    {
      key: "webhook_secret",
      label: "Webhook Secret",
      type: "password",
      required: false,
      helpText:
        "Your client's webhook secret (`whsec_…`). When set, **Task finished** checks each webhook's `v1` (HMAC) signature and stops a Zap run whose webhook does not verify.",
    },
    {
      key: "client_id",
      label: "Client ID",
      type: "string",
      required: false,
      helpText:
        "Your genrelay client's ID (`cli_…`, printed by `clients create`). When set, **Task finished** also checks `v1a` (Ed25519) signatures with the keys the relay publishes for this client: needed when the client signs with `ed25519`.",
    },
  ],
  test: (z, bundle) => z.request({ url: api(bundle, "/openapi/v1/tasks"), params: { limit: 1 } }).then((r) => r.data),
  connectionLabel: (_z, bundle) => String(bundle.authData.base_url).replace(/^https?:\/\//, ""),
};
