"use strict";

const { randomUUID } = require("node:crypto");
const { api, flattenTask } = require("../lib/api");

/** Fields both creations take after their own. */
const commonFields = [
  {
    key: "image_urls",
    label: "Image URLs",
    list: true,
    required: false,
    helpText: "https URLs of input images (edit and image-to-video modes).",
  },
  {
    key: "aspect_ratio",
    label: "Aspect Ratio",
    required: false,
    helpText: "One of the model's aspect ratios, such as `16:9`.",
  },
  {
    key: "metadata",
    label: "Metadata",
    dict: true,
    required: false,
    helpText: "String values (at most 16 keys) echoed back in every webhook and read of the task.",
  },
  {
    key: "callback_url",
    label: "Callback URL",
    required: false,
    helpText: "An https URL that also receives this task's signed webhooks. Not needed with **Task finished**.",
  },
  {
    key: "idempotency_key",
    label: "Idempotency Key",
    required: false,
    helpText:
      "8 to 128 of `A-Z a-z 0-9 . _ : -`. The same key and body again returns the first task instead of creating another. Leave empty for a new key on every run.",
  },
];

/** The optional fields of a creation that the user filled in, under the relay's names. */
const filled = (inputData, keys) => {
  const body = {};
  for (const key of keys) {
    const value = inputData[key];
    if (value === undefined || value === null || value === "") continue;
    if (Array.isArray(value) && value.length === 0) continue;
    if (typeof value === "object" && !Array.isArray(value) && Object.keys(value).length === 0) continue;
    body[key] = value;
  }
  return body;
};

/**
 * Creates a task. The relay requires an Idempotency-Key: without one from the user, a new random
 * key makes each run its own task (a replayed Zap step is a new run to Zapier as well).
 */
const createTask = async (z, bundle, path, body) => {
  const key = bundle.inputData.idempotency_key || `zapier:${randomUUID()}`;
  const response = await z.request({
    url: api(bundle, path),
    method: "POST",
    headers: { "Idempotency-Key": key },
    body,
  });
  return flattenTask(response.data);
};

/**
 * A create of one kind of task: the model (from the hidden `${kind}_model` trigger) and the prompt,
 * then `fields` of its own before and `extraFields` after the common ones; `body(inputData)` gives
 * the request's fields of its own, and the filled-in optional ones named in `optional` are added.
 */
const defineCreate = ({ kind, description, fields, extraFields, optional, body, sample }) => ({
  key: `create_${kind}_task`,
  noun: `${kind[0].toUpperCase()}${kind.slice(1)} Task`,
  display: { label: `Create ${kind[0].toUpperCase()}${kind.slice(1)} Task`, description },
  operation: {
    inputFields: [
      { key: "model", label: "Model", required: true, dynamic: `${kind}_model.id.name` },
      { key: "prompt", label: "Prompt", type: "text", required: true, helpText: "At least 3 non-blank characters." },
      ...fields,
      ...commonFields,
      ...extraFields,
    ],
    perform: (z, bundle) => {
      const input = bundle.inputData;
      const request = {
        model: input.model,
        prompt: input.prompt,
        ...body(input),
        ...filled(input, ["image_urls", "aspect_ratio", "metadata", "callback_url", ...optional]),
      };
      return createTask(z, bundle, `/openapi/v1/${kind}s/generations`, request);
    },
    sample,
  },
});

module.exports = { defineCreate };
