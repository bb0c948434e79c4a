// Lint for every package of the workspace: typescript-eslint's strict,
// type-checked rules (no `any`, no floating promises).
import js from "@eslint/js";
import tseslint from "typescript-eslint";

export default tseslint.config(
  { ignores: ["**/dist/**", "**/.test-build/**", "**/node_modules/**", "eslint.config.js"] },
  js.configs.recommended,
  ...tseslint.configs.strictTypeChecked,
  {
    languageOptions: {
      parserOptions: { project: ["./packages/*/tsconfig.test.json"], tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      "@typescript-eslint/no-explicit-any": "error",
      "@typescript-eslint/restrict-template-expressions": ["error", { allowNumber: true }],
      "@typescript-eslint/no-non-null-assertion": "off",
      "@typescript-eslint/prefer-promise-reject-errors": "off",
      "@typescript-eslint/only-throw-error": "off",
      "@typescript-eslint/no-confusing-void-expression": "off",
    },
  },
  {
    // node:test's describe and test return promises the runner awaits.
    files: ["**/test/**/*.ts"],
    rules: { "@typescript-eslint/no-floating-promises": "off" },
  },
);
