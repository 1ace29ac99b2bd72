#!/bin/sh
# Creates an image task on genrelay whose webhook goes to CALLBACK_URL, then reads the task back.
#
#   GENRELAY_API_KEY=grk_… sh examples/create-task.sh
#
# RELAY is the relay's address (default: `npm start` on this machine); CALLBACK_URL is where the
# webhook goes (default: `npm run receiver`; in production your own https endpoint).
set -eu
RELAY="${RELAY:-http://127.0.0.1:8080}"
CALLBACK_URL="${CALLBACK_URL:-http://127.0.0.1:9000/webhooks}"

created=$(curl -sS --fail-with-body "$RELAY/openapi/v1/images/generations" \
  -H "Authorization: Bearer $GENRELAY_API_KEY" -H "Content-Type: application/json" \
  -H "Idempotency-Key: order-1234-image" \
  -d '{"model":"p-image","mode":"generate","prompt":"a lighthouse at dawn","count":1,
       "callback_url":"'"$CALLBACK_URL"'","metadata":{"order_id":"1234"}}')
echo "$created"   # 201: {"data":{"id":"task_…","status":"queued",…}}

task=$(echo "$created" | sed -n 's/.*"id":"\(task_[A-Za-z0-9]*\)".*/\1/p')
curl -sS --fail-with-body "$RELAY/openapi/v1/tasks/$task" -H "Authorization: Bearer $GENRELAY_API_KEY"
echo
