import {
  type IDataObject,
  type IExecuteFunctions,
  type ILoadOptionsFunctions,
  type INodeExecutionData,
  type INodePropertyOptions,
  type INodeType,
  type INodeTypeDescription,
  NodeConnectionTypes,
  NodeOperationError,
} from "n8n-workflow";
import { taskFields, taskOperations } from "./TaskDescription";
import { expectStatus, relayRequest } from "./transport";

/** A task read ({"data":{…},"output","usage"}) flattened as a webhook's `data` is: its fields, output and usage. */
function flatten(body: IDataObject): IDataObject {
  return { ...((body.data ?? {}) as IDataObject), output: body.output ?? null, usage: body.usage ?? null };
}

/** The relay's Idempotency-Key alphabet is A-Za-z0-9._:- and 8 to 128 characters. */
function defaultIdempotencyKey(this: IExecuteFunctions, itemIndex: number): string {
  const key = `n8n:${this.getExecutionId()}:${this.getNode().id}:${itemIndex}`;
  return key.replace(/[^A-Za-z0-9._:-]/g, "-").slice(0, 128);
}

function parseMetadata(this: IExecuteFunctions, value: unknown, itemIndex: number): IDataObject | undefined {
  if (value === undefined || value === "" || value === "{}") return undefined;
  if (typeof value === "object" && value !== null) return value as IDataObject;
  try {
    return JSON.parse(String(value)) as IDataObject;
  } catch (error) {
    throw new NodeOperationError(this.getNode(), `Metadata is not JSON: ${(error as Error).message}`, { itemIndex });
  }
}

function urlList(value: unknown): string[] | undefined {
  if (typeof value !== "string" || value.trim() === "") return undefined;
  return value
    .split(",")
    .map((url) => url.trim())
    .filter((url) => url !== "");
}

async function createTask(this: IExecuteFunctions, kind: "image" | "video", itemIndex: number): Promise<IDataObject> {
  const extra = this.getNodeParameter("additionalFields", itemIndex, {}) as IDataObject;
  const body: IDataObject = {
    model: this.getNodeParameter("model", itemIndex) as string,
    prompt: this.getNodeParameter("prompt", itemIndex) as string,
  };
  if (kind === "image") {
    body.mode = this.getNodeParameter("mode", itemIndex, "generate") as string;
    body.count = 1;
    if (extra.size) body.size = extra.size;
    if (extra.quality) body.quality = extra.quality;
  } else {
    body.video_mode = this.getNodeParameter("videoMode", itemIndex, "t2v") as string;
    body.duration = this.getNodeParameter("duration", itemIndex, 5) as number;
    if (extra.resolution) body.resolution = extra.resolution;
    if (extra.sourceVideoUrl) body.source_video_url = extra.sourceVideoUrl;
  }
  if (extra.aspectRatio) body.aspect_ratio = extra.aspectRatio;
  if (extra.callbackUrl) body.callback_url = extra.callbackUrl;
  const imageUrls = urlList(extra.imageUrls);
  if (imageUrls) body.image_urls = imageUrls;
  const metadata = parseMetadata.call(this, extra.metadata, itemIndex);
  if (metadata) body.metadata = metadata;
  const key = (extra.idempotencyKey as string | undefined) || defaultIdempotencyKey.call(this, itemIndex);
  const path = kind === "image" ? "/openapi/v1/images/generations" : "/openapi/v1/videos/generations";
  const response = await relayRequest.call(this, "POST", path, { body, headers: { "Idempotency-Key": key } });
  return flatten(expectStatus.call(this, response, [200, 201]));
}

async function listTasks(this: IExecuteFunctions, itemIndex: number): Promise<IDataObject[]> {
  const returnAll = this.getNodeParameter("returnAll", itemIndex, false) as boolean;
  const limit = returnAll ? 100 : (this.getNodeParameter("limit", itemIndex, 50) as number);
  const filters = this.getNodeParameter("filters", itemIndex, {}) as IDataObject;
  const tasks: IDataObject[] = [];
  let cursor: string | undefined;
  do {
    const qs: IDataObject = { limit: Math.min(limit, 100), ...filters };
    if (cursor !== undefined) qs.cursor = cursor;
    const page = expectStatus.call(this, await relayRequest.call(this, "GET", "/openapi/v1/tasks", { qs }), [200]);
    tasks.push(...((page.data ?? []) as IDataObject[]));
    cursor = typeof page.next_cursor === "string" ? page.next_cursor : undefined;
  } while (returnAll && cursor !== undefined);
  return returnAll ? tasks : tasks.slice(0, limit);
}

async function modelOptions(
  this: ILoadOptionsFunctions,
  kind: "image_models" | "video_models",
): Promise<INodePropertyOptions[]> {
  const body = expectStatus.call(this, await relayRequest.call(this, "GET", "/openapi/v1/models"), [200]);
  const models = (((body.data ?? {}) as IDataObject)[kind] ?? []) as IDataObject[];
  return models
    .filter((model) => typeof model.id === "string")
    .map((model) => ({ name: String(model.name ?? model.id), value: String(model.id), description: String(model.id) }))
    .sort((a, b) => a.name.localeCompare(b.name));
}

export class Genrelay implements INodeType {
  description: INodeTypeDescription = {
    displayName: "Genrelay",
    name: "genrelay",
    icon: { light: "file:../../icons/genrelay.svg", dark: "file:../../icons/genrelay.dark.svg" },
    group: ["transform"],
    version: 1,
    subtitle: '={{$parameter["operation"] + ": " + $parameter["resource"]}}',
    description: "Create image and video generation tasks through genrelay, read them, and cancel them",
    defaults: { name: "Genrelay" },
    usableAsTool: true,
    inputs: [NodeConnectionTypes.Main],
    outputs: [NodeConnectionTypes.Main],
    credentials: [{ name: "genrelayApi", required: true }],
    properties: [
      {
        displayName: "Resource",
        name: "resource",
        type: "options",
        noDataExpression: true,
        options: [{ name: "Task", value: "task" }],
        default: "task",
      },
      ...taskOperations,
      ...taskFields,
    ],
  };

  methods = {
    loadOptions: {
      async getImageModels(this: ILoadOptionsFunctions): Promise<INodePropertyOptions[]> {
        return modelOptions.call(this, "image_models");
      },
      async getVideoModels(this: ILoadOptionsFunctions): Promise<INodePropertyOptions[]> {
        return modelOptions.call(this, "video_models");
      },
    },
  };

  async execute(this: IExecuteFunctions): Promise<INodeExecutionData[][]> {
    const items = this.getInputData();
    const returnData: INodeExecutionData[] = [];
    for (let itemIndex = 0; itemIndex < items.length; itemIndex++) {
      try {
        const operation = this.getNodeParameter("operation", itemIndex) as string;
        let results: IDataObject[];
        if (operation === "createImage") results = [await createTask.call(this, "image", itemIndex)];
        else if (operation === "createVideo") results = [await createTask.call(this, "video", itemIndex)];
        else if (operation === "get" || operation === "cancel") {
          // Cancel: a task still waiting in the relay ends canceled (never charged); a submitted one is 409 cannot_cancel.
          const id = encodeURIComponent(this.getNodeParameter("taskId", itemIndex) as string);
          const response =
            operation === "get"
              ? await relayRequest.call(this, "GET", `/openapi/v1/tasks/${id}`)
              : await relayRequest.call(this, "POST", `/openapi/v1/tasks/${id}/cancel`);
          results = [flatten(expectStatus.call(this, response, [200]))];
        } else if (operation === "getAll") results = await listTasks.call(this, itemIndex);
        else throw new NodeOperationError(this.getNode(), `Unknown operation "${operation}"`, { itemIndex });
        for (const json of results) returnData.push({ json, pairedItem: { item: itemIndex } });
      } catch (error) {
        if (this.continueOnFail()) {
          returnData.push({ json: { error: (error as Error).message }, pairedItem: { item: itemIndex } });
          continue;
        }
        // A NodeOperationError comes back as it is; a NodeApiError keeps its message and description.
        throw new NodeOperationError(this.getNode(), error as Error, { itemIndex });
      }
    }
    return [returnData];
  }
}
