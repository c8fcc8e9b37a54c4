/**
 * The deterministic SWIM cluster simulation used by the tests and `npm run sim:swim`.
 * Pure like the core: simulated time, seeded randomness, no I/O.
 */
export {
  CONVERGENCE_LIMIT_MS,
  DETECTION_LIMIT_MS,
  HEAL_LIMIT_MS,
  runSimulation,
  type Scenario,
  SCENARIOS,
  type SimOptions,
  type SimResult,
  VERDICT_WINDOW_MS,
} from "./simulator.ts";
