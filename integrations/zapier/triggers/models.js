"use strict";

const { api } = require("../lib/api");

/** A hidden trigger that lists the catalog's models of one kind, for the creates' Model dropdowns. */
const modelTrigger = (kind, key, label) => ({
  key,
  noun: "Model",
  display: { label, description: `Lists the relay's ${kind} models for dropdowns.`, hidden: true },
  operation: {
    perform: async (z, bundle) => {
      const response = await z.request({ url: api(bundle, "/openapi/v1/models") });
      const models = response.data.data?.[`${kind}_models`] || [];
      return models.map((model) => ({ id: model.id, name: model.name || model.id }));
    },
    sample: { id: kind === "image" ? "p-image" : "v-video", name: kind === "image" ? "P Image" : "V Video" },
  },
});

module.exports = {
  imageModel: modelTrigger("image", "image_model", "Image Model"),
  videoModel: modelTrigger("video", "video_model", "Video Model"),
};
