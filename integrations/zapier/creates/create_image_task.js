"use strict";

const { defineCreate } = require("./task");
const sample = require("./task.sample.json");

module.exports = defineCreate({
  kind: "image",
  description: "Starts generating an image. Use Task Finished to act on the result.",
  fields: [
    {
      key: "mode",
      label: "Mode",
      required: true,
      default: "generate",
      choices: { generate: "Generate", edit: "Edit (needs Image URLs)" },
    },
  ],
  extraFields: [
    { key: "size", label: "Size", required: false, helpText: "One of the model's sizes, such as `2K`." },
    { key: "quality", label: "Quality", required: false, helpText: "One of the model's qualities, such as `high`." },
  ],
  optional: ["size", "quality"],
  body: (input) => ({ mode: input.mode || "generate", count: 1 }),
  sample,
});
