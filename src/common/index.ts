export { CairnError } from "./errors.ts";
export { type Rng, seededRng } from "./rng.ts";
