// ESLint's flat config: the recommended rules of ESLint and of
// typescript-eslint over the sources, the tests and the scripts; layout is
// prettier's (.prettierrc.json), checked beside it by scripts/test.sh.

import js from "@eslint/js";
import { defineConfig, globalIgnores } from "eslint/config";
import tseslint from "typescript-eslint";

export default defineConfig(
  // Generated code (scripts/generate.sh) and build output.
  globalIgnores(["src/gen/", "dist/", "build/"]),
  js.configs.recommended,
  tseslint.configs.recommended,
);
