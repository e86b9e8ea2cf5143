import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    globalSetup: ["test/global-setup.ts"],
    // Integration tests start real `rivora dev` processes on a shared,
    // small machine: generous bounds, never fixed sleeps.
    testTimeout: 120_000,
    hookTimeout: 180_000,
  },
});
