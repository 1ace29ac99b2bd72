import type { INodeProperties } from "n8n-workflow";

const onOperation = (...operations: string[]) => ({ show: { resource: ["task"], operation: operations } });

export const taskOperations: INodeProperties[] = [
  {
    displayName: "Operation",
    name: "operation",
    type: "options",
    noDataExpression: true,
    displayOptions: { show: { resource: ["task"] } },
    options: [
      {
        name: "Cancel",
        value: "cancel",
        description: "Cancel a task still waiting in the relay; it is never charged",
        action: "Cancel a task",
      },
      {
        name: "Create Image Task",
        value: "createImage",
        description: "Start generating an image",
        action: "Create an image task",
      },
      {
        name: "Create Video Task",
        value: "createVideo",
        description: "Start generating a video",
        action: "Create a video task",
      },
      { name: "Get", value: "get", description: "Get a task", action: "Get a task" },
      { name: "Get Many", value: "getAll", description: "Get many tasks", action: "Get many tasks" },
    ],
    default: "createImage",
  },
];

/** Fields both creations share, under "Additional Fields". */
const commonCreateFields: INodeProperties[] = [
  {
    displayName: "Aspect Ratio",
    name: "aspectRatio",
    type: "string",
    default: "",
    placeholder: "16:9",
    description: "One of the aspect ratios the model lists",
  },
  {
    displayName: "Callback URL",
    name: "callbackUrl",
    type: "string",
    default: "",
    placeholder: "https://example.com/hooks/genrelay",
    description: "An https URL that receives this task's signed webhooks, besides your subscribed endpoints",
  },
  {
    displayName: "Idempotency Key",
    name: "idempotencyKey",
    type: "string",
    default: "",
    description:
      "8 to 128 of A-Z a-z 0-9 . _ : -. The same key and body again returns the first task instead of creating another. By default one is made from the execution, the node and the item.",
  },
  {
    displayName: "Image URLs",
    name: "imageUrls",
    type: "string",
    default: "",
    placeholder: "https://example.com/a.png, https://example.com/b.png",
    description: "Comma-separated https URLs of input images (edit and image-to-video modes)",
  },
  {
    displayName: "Metadata",
    name: "metadata",
    type: "json",
    default: "{}",
    description: "An object of string values (at most 16 keys) echoed back in every webhook and read of the task",
  },
];

export const taskFields: INodeProperties[] = [
  // ---- create image task, create video task: the model and the mode, the prompt, then the rest
  {
    displayName: "Model Name or ID",
    name: "model",
    type: "options",
    typeOptions: { loadOptionsMethod: "getImageModels" },
    required: true,
    default: "",
    description:
      'Choose from the list, or specify an ID using an <a href="https://docs.n8n.io/code/expressions/">expression</a>',
    displayOptions: onOperation("createImage"),
  },
  {
    displayName: "Mode",
    name: "mode",
    type: "options",
    options: [
      { name: "Edit", value: "edit", description: "Edit the images given under Image URLs" },
      { name: "Generate", value: "generate", description: "Make a new image from the prompt" },
    ],
    default: "generate",
    displayOptions: onOperation("createImage"),
  },
  {
    displayName: "Model Name or ID",
    name: "model",
    type: "options",
    typeOptions: { loadOptionsMethod: "getVideoModels" },
    required: true,
    default: "",
    description:
      'Choose from the list, or specify an ID using an <a href="https://docs.n8n.io/code/expressions/">expression</a>',
    displayOptions: onOperation("createVideo"),
  },
  {
    displayName: "Video Mode",
    name: "videoMode",
    type: "options",
    options: [
      { name: "First Frame to Video", value: "i2v_first", description: "Start from the first image under Image URLs" },
      { name: "Last Frame to Video", value: "i2v_last", description: "End on the first image under Image URLs" },
      {
        name: "Reference Images",
        value: "multimodal_ref",
        description: "Use the images under Image URLs as references",
      },
      { name: "Text to Video", value: "t2v", description: "Make a video from the prompt alone" },
      { name: "Video Edit", value: "v2v_edit", description: "Edit the video at Source Video URL" },
    ],
    default: "t2v",
    description: "One of the video modes the model lists",
    displayOptions: onOperation("createVideo"),
  },
  {
    displayName: "Prompt",
    name: "prompt",
    type: "string",
    typeOptions: { rows: 4 },
    required: true,
    default: "",
    description: "What to generate: at least 3 non-blank characters",
    displayOptions: { show: { resource: ["task"], operation: ["createImage", "createVideo"] } },
  },
  {
    displayName: "Additional Fields",
    name: "additionalFields",
    type: "collection",
    placeholder: "Add Field",
    default: {},
    displayOptions: onOperation("createImage"),
    options: [
      ...commonCreateFields,
      {
        displayName: "Quality",
        name: "quality",
        type: "string",
        default: "",
        placeholder: "high",
        description: "One of the qualities the model lists",
      },
      {
        displayName: "Size",
        name: "size",
        type: "string",
        default: "",
        placeholder: "2K",
        description: "One of the sizes the model lists",
      },
    ],
  },
  {
    displayName: "Duration",
    name: "duration",
    type: "number",
    typeOptions: { minValue: 1 },
    default: 5,
    description: "Seconds: one of the durations the model lists",
    displayOptions: onOperation("createVideo"),
  },
  {
    displayName: "Additional Fields",
    name: "additionalFields",
    type: "collection",
    placeholder: "Add Field",
    default: {},
    displayOptions: onOperation("createVideo"),
    options: [
      ...commonCreateFields,
      {
        displayName: "Resolution",
        name: "resolution",
        type: "string",
        default: "",
        placeholder: "720p",
        description: "One of the resolutions the model lists",
      },
      {
        displayName: "Source Video URL",
        name: "sourceVideoUrl",
        type: "string",
        default: "",
        placeholder: "https://example.com/clip.mp4",
        description: "The https URL of the video a video edit starts from",
      },
    ],
  },
  // ---- get, cancel
  {
    displayName: "Task ID",
    name: "taskId",
    type: "string",
    required: true,
    default: "",
    placeholder: "task_01jf3y8k2m9q7r5t3v1w0x6z4a",
    displayOptions: onOperation("get", "cancel"),
  },
  // ---- get many
  {
    displayName: "Return All",
    name: "returnAll",
    type: "boolean",
    default: false,
    description: "Whether to return all results or only up to a given limit",
    displayOptions: onOperation("getAll"),
  },
  {
    displayName: "Limit",
    name: "limit",
    type: "number",
    typeOptions: { minValue: 1, maxValue: 100 },
    default: 50,
    description: "Max number of results to return",
    displayOptions: { show: { resource: ["task"], operation: ["getAll"], returnAll: [false] } },
  },
  {
    displayName: "Filters",
    name: "filters",
    type: "collection",
    placeholder: "Add Filter",
    default: {},
    displayOptions: onOperation("getAll"),
    options: [
      {
        displayName: "Status",
        name: "status",
        type: "options",
        options: [
          { name: "Canceled", value: "canceled" },
          { name: "Failed", value: "failed" },
          { name: "Processing", value: "processing" },
          { name: "Queued", value: "queued" },
          { name: "Succeeded", value: "succeeded" },
        ],
        default: "succeeded",
      },
      {
        displayName: "Type",
        name: "type",
        type: "options",
        options: [
          { name: "Image", value: "image" },
          { name: "Video", value: "video" },
        ],
        default: "image",
      },
    ],
  },
];
