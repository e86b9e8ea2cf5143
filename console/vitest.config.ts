import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    projects: [
      { test: { name: "unit", include: ["test/**/*.test.ts"], environment: "node" } },
      {
        test: {
          name: "browser",
          include: ["browser/**/*.test.ts"],
          environment: "node",
          testTimeout: 240_000,
          hookTimeout: 240_000,
          fileParallelism: false,
        },
      },
      {
        test: { name: "measure", include: ["browser/**/*.bench.ts"], environment: "node", testTimeout: 900_000, hookTimeout: 120_000 },
      },
    ],
  },
});
