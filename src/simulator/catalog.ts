/**
 * The simulated model catalog (GET /openapi/v1/models). The reference leaves the
 * entry shape "not shown"; these field names are the simulator's stable choice and
 * genrelay's upstream client reads them, so change them only together.
 */
export interface ImageModel {
  id: string;
  name: string;
  modes: string[];
  sizes: string[];
  aspect_ratios: string[];
  /** Only models whose price depends on quality list it. */
  qualities?: string[];
}

export interface VideoModel {
  id: string;
  name: string;
  video_modes: string[];
  durations: number[];
  resolutions: string[];
  aspect_ratios: string[];
}

export const P_IMAGE_QUALITIES = ["low", "medium", "high", "xhigh", "max", "auto"] as const;
export type PImageQuality = (typeof P_IMAGE_QUALITIES)[number];

const IMAGE_RATIOS = ["1:1", "4:3", "3:4", "16:9", "9:16"];
const VIDEO_RATIOS = ["16:9", "9:16", "1:1"];

export const IMAGE_MODELS: readonly ImageModel[] = [
  {
    id: "p-image",
    name: "P Image",
    modes: ["generate", "edit"],
    sizes: ["1K", "2K", "4K"],
    aspect_ratios: IMAGE_RATIOS,
    qualities: [...P_IMAGE_QUALITIES],
  },
  {
    id: "flux-lite",
    name: "Flux Lite",
    modes: ["generate", "edit"],
    sizes: ["1K", "2K"],
    aspect_ratios: IMAGE_RATIOS,
  },
];

export const VIDEO_MODELS: readonly VideoModel[] = [
  {
    id: "v-video",
    name: "V Video",
    video_modes: ["t2v", "i2v_first", "i2v_last", "multimodal_ref"],
    durations: [5, 10],
    resolutions: ["480p", "720p"],
    aspect_ratios: VIDEO_RATIOS,
  },
  {
    id: "v-video-pro",
    name: "V Video Pro",
    video_modes: ["t2v", "i2v_first", "v2v_edit"],
    durations: [5],
    resolutions: ["720p", "1080p"],
    aspect_ratios: VIDEO_RATIOS,
  },
];

export function findImageModel(id: string): ImageModel | undefined {
  return IMAGE_MODELS.find((m) => m.id === id);
}

export function findVideoModel(id: string): VideoModel | undefined {
  return VIDEO_MODELS.find((m) => m.id === id);
}

export function catalogBody(): object {
  return { data: { image_models: IMAGE_MODELS, video_models: VIDEO_MODELS } };
}
