// @ts-check
import js from "@eslint/js";
import tseslint from "typescript-eslint";

export default tseslint.config(
  { ignores: ["node_modules/", "data/", "**/testdata/", "src/api/generated/"] },
  js.configs.recommended,
  ...tseslint.configs.strict,
  {
    rules: {
      "@typescript-eslint/no-non-null-assertion": "error",
      "@typescript-eslint/no-explicit-any": "error",
      "@typescript-eslint/consistent-type-imports": "error",
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_" }],
      "no-constant-condition": ["error", { checkLoops: false }],
      eqeqeq: ["error", "always"],
      "prefer-const": "error",
    },
  },
  {
    // Durations run on the monotonic clock, call deadlines on src/common/deadline-clock.ts.
    files: ["src/**/*.ts"],
    rules: {
      "no-restricted-properties": [
        "error",
        {
          object: "Date",
          property: "now",
          message:
            "A duration, timeout or backoff measured on the wall clock breaks when the clock is stepped: use performance.now(); a call's deadline: deadlineClock() (src/common/deadline-clock.ts).",
        },
      ],
    },
  },
);
