export { CairnError } from "./errors.ts";
export { type Rng, seededRng, shuffle } from "./rng.ts";
export { DenseMap, type ReadonlyDenseMap } from "./dense-map.ts";
export { IntMap } from "./int-map.ts";
export { clearArray, dropFront } from "./arrays.ts";
export { isObject } from "./objects.ts";
export { CallCut } from "./call-cut.ts";
export { crc32cNative, dupFd, mapFile, nativeAddonMissing } from "./native.ts";
export {
  callDeadline,
  DEADLINE_ON_CLOCK,
  deadlineClock,
  grpcJsDeadline,
  type ServedCall,
} from "./deadline-clock.ts";
