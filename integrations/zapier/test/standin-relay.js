"use strict";

const http = require("node:http");

/**
 * A relay that answers as a test tells it (on 127.0.0.1, port 0): the client's webhook settings,
 * its JWKS (a status to answer), a task read and a cancel; every request it got, as "METHOD /path".
 */
const startStandinRelay = async () => {
  const relay = {
    settings: { signature: "hmac" },
    jwksStatus: 503,
    requests: [],
    count: (what) => relay.requests.filter((r) => r === what).length,
  };
  const server = http.createServer((req, res) => {
    const path = new URL(req.url || "/", "http://relay").pathname;
    relay.requests.push(`${req.method} ${path}`);
    const answer = (status, body) => {
      res.writeHead(status, { "Content-Type": "application/json" });
      res.end(JSON.stringify(body));
    };
    const cancel = /^\/openapi\/v1\/tasks\/([^/]+)\/cancel$/.exec(path);
    if (req.method === "GET" && path === "/openapi/v1/webhooks/settings") return answer(200, { data: relay.settings });
    if (req.method === "GET" && path.startsWith("/openapi/v1/webhooks/jwks/"))
      return answer(relay.jwksStatus, { error: { code: "unavailable", message: "stand-in" } });
    if (req.method === "GET" && path === "/openapi/v1/tasks") return answer(200, { data: [], next_cursor: null });
    if (req.method === "POST" && path === "/openapi/v1/webhooks/endpoints")
      return answer(201, { data: { id: "ep_standin", url: "https://hooks.zapier.com/x", events: [] } });
    if (req.method === "POST" && cancel)
      return answer(200, {
        data: { id: decodeURIComponent(cancel[1]), status: "canceled" },
        output: null,
        usage: { points_charged: 0, points_refunded: null },
      });
    return answer(404, { error: { code: "not_found", message: `no ${req.method} ${path}` } });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  relay.url = `http://127.0.0.1:${server.address().port}`;
  relay.close = () => new Promise((resolve) => server.close(resolve));
  return relay;
};

module.exports = { startStandinRelay };
