#!/usr/bin/env bash
# Opt-in end-to-end run of n8n-nodes-genrelay inside a real n8n (not part of `npm test`: n8n needs
# Node.js 22 or later and installs several hundred MB). What it does, all on 127.0.0.1:
#
#   1. builds the relay and the node package, packs the package, installs n8n and, into n8n's
#      community nodes folder (~/.n8n/nodes of a temporary N8N_USER_FOLDER), the packed package;
#   2. starts the relay in sandbox mode with a new client, and a recorder that keeps what it is sent;
#   3. imports a Genrelay API credential and a workflow "Genrelay Trigger -> HTTP Request to the
#      recorder", activates it and starts n8n: activation must subscribe n8n's webhook URL as an
#      endpoint of the client;
#   4. creates a task (no callback_url): its task.succeeded webhook, signed by the relay and
#      verified by the trigger inside n8n, must reach the recorder; a forged webhook must get 401.
#
# The relay is this checkout's (dist/main.js, sandbox mode: the built-in simulator plays the
# upstream), with the endpoints API of docs/contract.md, "Endpoints"; the script checks that it
# answers before installing n8n. Deactivation (the endpoint removed) is tested by
# test/integration/n8n-node.test.ts only. How to install and use the package:
# docs/receiving-low-code.md, "The n8n node".
#
#   bash scripts/n8n-e2e.sh
#
# Settings: N8N_E2E_VERSION (the n8n to install, default latest), N8N_E2E_KEEP=1 (keep the
# temporary folder and its logs), N8N_E2E_RELAY_PORT / N8N_E2E_N8N_PORT / N8N_E2E_RECORDER_PORT
# (defaults 18080, 15678, 18099).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VERSION="${N8N_E2E_VERSION:-latest}"
RELAY_PORT="${N8N_E2E_RELAY_PORT:-18080}"
N8N_PORT="${N8N_E2E_N8N_PORT:-15678}"
RECORDER_PORT="${N8N_E2E_RECORDER_PORT:-18099}"
RELAY="http://127.0.0.1:$RELAY_PORT"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/genrelay-n8n-e2e.XXXXXX")"
PIDS=()

say() { printf 'n8n-e2e: %s\n' "$*"; }
fail() {
  say "FAILED: $*"
  say "logs: $WORK/relay.log $WORK/n8n.log (kept)"
  N8N_E2E_KEEP=1
  exit 1
}
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ "${N8N_E2E_KEEP:-0}" = "1" ]; then say "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

# Waits (at most $2 seconds) until the command in $3... succeeds.
wait_for() {
  local what="$1" seconds="$2"
  shift 2
  for _ in $(seq 1 "$((seconds * 4))"); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.25
  done
  fail "$what did not happen within ${seconds}s"
}

major="$(node -p 'process.versions.node.split(".")[0]')"
if [ "$major" -lt 22 ]; then
  say "n8n needs Node.js 22 or later; this is $(node --version). Nothing was run."
  exit 2
fi

say "building the relay and the node package"
(cd "$ROOT" && npm run build >/dev/null && node scripts/connectors.mjs)
(cd "$ROOT/integrations/n8n-nodes-genrelay" && npm run build >/dev/null)
(cd "$ROOT/integrations/n8n-nodes-genrelay" && npm pack --pack-destination "$WORK" >/dev/null 2>&1)

say "starting the relay (sandbox mode) on $RELAY"
export DATABASE_PATH="$WORK/relay.db"
client="$(node "$ROOT/dist/cli.js" clients create --name n8n-e2e --json)"
API_KEY="$(node -p 'JSON.parse(process.argv[1]).api_key' "$client")"
SECRET="$(node -p 'JSON.parse(process.argv[1]).webhook_secret' "$client")"
PORT="$RELAY_PORT" HOST=127.0.0.1 WEBHOOK_ALLOW_PRIVATE_NETWORKS=true LOG_LEVEL=warn node "$ROOT/dist/main.js" >"$WORK/relay.log" 2>&1 &
PIDS+=("$!")
wait_for "the relay's /readyz" 30 curl -sf "$RELAY/readyz"
status="$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $API_KEY" "$RELAY/openapi/v1/webhooks/endpoints")"
if [ "$status" != "200" ]; then
  say "this relay does not serve the endpoints API (GET /openapi/v1/webhooks/endpoints answered $status): the trigger cannot subscribe. n8n was not installed."
  exit 2
fi

say "installing n8n@$VERSION and the package (this takes a while)"
mkdir -p "$WORK/n8n" "$WORK/home/.n8n/nodes"
npm install --prefix "$WORK/n8n" --no-audit --no-fund "n8n@$VERSION" >"$WORK/npm-n8n.log" 2>&1 || fail "npm install n8n"
npm install --prefix "$WORK/home/.n8n/nodes" --no-audit --no-fund "$WORK"/n8n-nodes-genrelay-*.tgz >"$WORK/npm-pkg.log" 2>&1 || fail "npm install the package"
N8N="$WORK/n8n/node_modules/.bin/n8n"

say "starting the recorder on 127.0.0.1:$RECORDER_PORT"
RECORDED="$WORK/recorded.jsonl"
node -e '
  const { createServer } = require("node:http");
  const { appendFileSync } = require("node:fs");
  createServer((req, res) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => { appendFileSync(process.argv[1], body.replace(/\n/g, " ") + "\n"); res.end("ok"); });
  }).listen(Number(process.argv[2]), "127.0.0.1");
' "$RECORDED" "$RECORDER_PORT" &
PIDS+=("$!")

say "importing the credential and the workflow into n8n"
export N8N_USER_FOLDER="$WORK/home" N8N_PORT N8N_LISTEN_ADDRESS=127.0.0.1 N8N_HOST=127.0.0.1
export WEBHOOK_URL="http://127.0.0.1:$N8N_PORT/" N8N_ENCRYPTION_KEY="genrelay-n8n-e2e-not-a-secret"
export N8N_DIAGNOSTICS_ENABLED=false N8N_VERSION_NOTIFICATIONS_ENABLED=false N8N_TEMPLATES_ENABLED=false
export N8N_PERSONALIZATION_ENABLED=false N8N_SECURE_COOKIE=false DB_SQLITE_POOL_SIZE=1
cat >"$WORK/credentials.json" <<EOF
[{"id":"genrelayE2eCred","name":"genrelay e2e","type":"genrelayApi",
  "data":{"baseUrl":"$RELAY","apiKey":"$API_KEY","webhookSecret":"$SECRET"}}]
EOF
cat >"$WORK/workflow.json" <<EOF
{"id":"genrelayE2eFlow","name":"genrelay e2e","active":false,"settings":{},
 "nodes":[
  {"id":"7b1c2d3e-0000-4000-8000-000000000001","name":"Genrelay Trigger","type":"n8n-nodes-genrelay.genrelayTrigger",
   "typeVersion":1,"position":[0,0],"webhookId":"genrelay-e2e",
   "parameters":{"events":["task.succeeded","task.failed","task.canceled"]},
   "credentials":{"genrelayApi":{"id":"genrelayE2eCred","name":"genrelay e2e"}}},
  {"id":"7b1c2d3e-0000-4000-8000-000000000002","name":"Record","type":"n8n-nodes-base.httpRequest",
   "typeVersion":4.2,"position":[300,0],
   "parameters":{"method":"POST","url":"http://127.0.0.1:$RECORDER_PORT/record","sendBody":true,
                 "specifyBody":"json","jsonBody":"={{ JSON.stringify(\$json) }}","options":{}}}],
 "connections":{"Genrelay Trigger":{"main":[[{"node":"Record","type":"main","index":0}]]}}}
EOF
"$N8N" import:credentials --input="$WORK/credentials.json" >>"$WORK/n8n.log" 2>&1 || fail "n8n import:credentials"
"$N8N" import:workflow --input="$WORK/workflow.json" >>"$WORK/n8n.log" 2>&1 || fail "n8n import:workflow"
# n8n 2.x activates by publishing (update:workflow is deprecated there and sets no active
# version); 1.x has no publish:workflow and activates with update:workflow.
"$N8N" publish:workflow --id=genrelayE2eFlow >>"$WORK/n8n.log" 2>&1 ||
  "$N8N" update:workflow --id=genrelayE2eFlow --active=true >>"$WORK/n8n.log" 2>&1 || fail "activating the workflow"

say "starting n8n on 127.0.0.1:$N8N_PORT"
"$N8N" start >>"$WORK/n8n.log" 2>&1 &
PIDS+=("$!")
wait_for "n8n's /healthz" 180 curl -sf "http://127.0.0.1:$N8N_PORT/healthz"

endpoints() { curl -sf -H "Authorization: Bearer $API_KEY" "$RELAY/openapi/v1/webhooks/endpoints"; }
wait_for "the trigger's endpoint subscription" 60 sh -c "curl -sf -H 'Authorization: Bearer $API_KEY' '$RELAY/openapi/v1/webhooks/endpoints' | grep -q genrelay-e2e"
HOOK="$(endpoints | node -e 'let s="";process.stdin.on("data",(c)=>(s+=c)).on("end",()=>console.log(JSON.parse(s).data.find((e)=>e.url.includes("genrelay-e2e")).url))')"
say "subscribed: $HOOK"

say "creating a task; its webhook must run the workflow"
created="$(curl -sf "$RELAY/openapi/v1/images/generations" -H "Authorization: Bearer $API_KEY" \
  -H "Content-Type: application/json" -H "Idempotency-Key: n8n-e2e-$(date +%s)" \
  -d '{"model":"p-image","mode":"generate","prompt":"a lighthouse at dawn","count":1}')" || fail "creating a task"
TASK="$(node -p 'JSON.parse(process.argv[1]).data.id' "$created")"
wait_for "the workflow's run for $TASK" 60 grep -q "$TASK" "$RECORDED"
grep "$TASK" "$RECORDED" | grep -q '"type":"task.succeeded"' || fail "the recorded event is not $TASK's task.succeeded"

say "sending a forged webhook; the trigger must answer 401"
forged="$(curl -s -o /dev/null -w '%{http_code}' -X POST "$HOOK" -H "Content-Type: application/json" \
  -H "webhook-id: evt_forged" -H "webhook-timestamp: $(date +%s)" -H "webhook-signature: v1,Zm9yZ2Vk" \
  -d '{"id":"evt_forged","type":"task.succeeded","timestamp":"2026-01-01T00:00:00Z","data":{"id":"task_forged"}}')"
[ "$forged" = "401" ] || fail "a forged webhook got $forged"
grep -q task_forged "$RECORDED" && fail "a forged webhook ran the workflow"

say "passed: n8n loaded the package, activation subscribed $HOOK, a signed webhook ran the workflow, a forged one got 401"
