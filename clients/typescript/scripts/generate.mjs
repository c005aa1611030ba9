// generate writes src/schema.ts from the repository's openapi.yaml with openapi-typescript. With
// --check it writes nothing and exits 1 when src/schema.ts is not what it would write.
//
// One schema is given a type of its own: JsonValue, the contract's "any JSON value", is the
// recursive union of JSON's values instead of `unknown`, declared once at the top (a recursive
// alias inside the generated `components` interface would refer to itself, TS2502).

import { readFileSync, writeFileSync } from "node:fs";
import ts from "typescript";
import openapiTS, { astToString, COMMENT_HEADER } from "openapi-typescript";

const spec = new URL("../../../openapi.yaml", import.meta.url);
const out = new URL("../src/schema.ts", import.meta.url);

const jsonValue = `/** Any JSON value: the type of components["schemas"]["JsonValue"]. */
export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };

`;

const ast = await openapiTS(spec, {
  defaultNonNullable: false,
  transform(_schema, { path }) {
    return path === "#/components/schemas/JsonValue" ? ts.factory.createTypeReferenceNode("JsonValue") : undefined;
  },
});
const text = COMMENT_HEADER + jsonValue + astToString(ast);

if (process.argv.includes("--check")) {
  if (readFileSync(out, "utf8") !== text) {
    console.error("src/schema.ts is not up to date with openapi.yaml: run `npm run generate` in clients/typescript");
    process.exit(1);
  }
} else {
  writeFileSync(out, text);
}
