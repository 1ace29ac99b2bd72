"use strict";

const { defineCreate } = require("./task");
const sample = require("./task.sample.json");

module.exports = defineCreate({
  kind: "video",
  description: "Starts generating a video. Use Task Finished to act on the result.",
  fields: [
    {
      key: "video_mode",
      label: "Video Mode",
      required: true,
      default: "t2v",
      choices: {
        t2v: "Text to video",
        i2v_first: "First frame to video (needs Image URLs)",
        i2v_last: "Last frame to video (needs Image URLs)",
        multimodal_ref: "Reference images (needs Image URLs)",
        v2v_edit: "Video edit (needs Source Video URL)",
      },
    },
    { key: "duration", label: "Duration", type: "integer", required: true, default: "5", helpText: "Seconds." },
  ],
  extraFields: [
    {
      key: "resolution",
      label: "Resolution",
      required: false,
      helpText: "One of the model's resolutions, such as `720p`.",
    },
    {
      key: "source_video_url",
      label: "Source Video URL",
      required: false,
      helpText: "The video a video edit starts from.",
    },
  ],
  optional: ["resolution", "source_video_url"],
  body: (input) => ({ video_mode: input.video_mode || "t2v", duration: Number(input.duration || 5) }),
  sample: { ...sample, type: "video", model: "v-video" },
});
