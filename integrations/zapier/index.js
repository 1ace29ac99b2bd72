"use strict";

const { version: platformVersion } = require("zapier-platform-core");
const { version } = require("./package.json");
const authentication = require("./authentication");
const { explainErrors, includeApiKey } = require("./lib/api");
const taskFinished = require("./triggers/task_finished");
const { imageModel, videoModel } = require("./triggers/models");
const createImageTask = require("./creates/create_image_task");
const createVideoTask = require("./creates/create_video_task");
const cancelTask = require("./creates/cancel_task");

/** genrelay on Zapier: an instant "Task finished" trigger (REST hooks), two creates and Cancel Task. */
module.exports = {
  version,
  platformVersion,
  authentication,
  beforeRequest: [includeApiKey],
  afterResponse: [explainErrors],
  triggers: {
    [taskFinished.key]: taskFinished,
    [imageModel.key]: imageModel,
    [videoModel.key]: videoModel,
  },
  creates: {
    [createImageTask.key]: createImageTask,
    [createVideoTask.key]: createVideoTask,
    [cancelTask.key]: cancelTask,
  },
  // Every request goes through z.request, which logs itself; patching node's http module as well
  // would only log those requests twice.
  flags: { skipHttpPatch: true },
};
