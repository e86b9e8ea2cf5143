import { fileURLToPath } from "node:url";
import { defineConfig } from "vite";

// The generated client lives in ../sdk/typescript/src/gen (one copy for the
// SDK and the console). Its imports of @bufbuild/protobuf must resolve from
// console/node_modules, since sdk/typescript/node_modules may not exist.
export default defineConfig({
  base: "/console/",
  resolve: {
    dedupe: ["@bufbuild/protobuf", "@connectrpc/connect"],
  },
  server: {
    fs: { allow: [fileURLToPath(new URL("..", import.meta.url))] },
  },
  build: {
    outDir: "dist",
    emptyOutDir: true,
    sourcemap: false,
    // No inline <script>/<style>: the CSP allows 'self' only.
    assetsInlineLimit: 0,
    modulePreload: { polyfill: false },
  },
});
