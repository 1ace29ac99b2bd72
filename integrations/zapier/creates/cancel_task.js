"use strict";

const { api, flattenTask } = require("../lib/api");
const sample = require("./task.sample.json");

/**
 * Cancels a task through `POST /openapi/v1/tasks/{id}/cancel`. A task still waiting in the relay
 * becomes `canceled` and is never charged; one already submitted upstream cannot be (the upstream
 * has no cancel), which shows as the relay's `409 cannot_cancel`.
 */
const perform = async (z, bundle) => {
  const id = String(bundle.inputData.task_id || "").trim();
  const response = await z.request({
    url: api(bundle, `/openapi/v1/tasks/${encodeURIComponent(id)}/cancel`),
    method: "POST",
  });
  return flattenTask(response.data);
};

module.exports = {
  key: "cancel_task",
  noun: "Task",
  display: {
    label: "Cancel Task",
    description: "Cancels a task that is still waiting in the relay (it is never charged).",
  },
  operation: {
    inputFields: [{ key: "task_id", label: "Task ID", required: true, helpText: "The task's `id` (`task_…`)." }],
    perform,
    sample: { ...sample, status: "canceled" },
  },
};
