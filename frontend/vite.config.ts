import { defineConfig } from "vite";
import preact from "@preact/preset-vite";

// The app serves dist/ at `/` (index.html) and `/assets/*`; `npm run dev` proxies the API
// to a local `agentrm serve`.
export default defineConfig({
  plugins: [preact()],
  build: { outDir: "dist", emptyOutDir: true, sourcemap: true },
  server: {
    proxy: { "/graphql": { target: "http://127.0.0.1:8000", ws: true } },
  },
});
