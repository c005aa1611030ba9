// The generated event types are typed all the way down: from components["schemas"]["Event"],
// through every schema it refers to, no `unknown` and no `any`. Any JSON value is JsonValue.
// Read with the TypeScript compiler's parser from src/schema.ts, the file the client compiles.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import ts from "typescript";

const file = new URL("../../src/schema.ts", import.meta.url);

/** schemaMembers is the type of each entry of components.schemas, by name. */
function schemaMembers(source: ts.SourceFile): Map<string, ts.TypeNode> {
  const out = new Map<string, ts.TypeNode>();
  for (const st of source.statements) {
    if (!ts.isInterfaceDeclaration(st) || st.name.text !== "components") continue;
    for (const m of st.members) {
      if (!ts.isPropertySignature(m) || m.name.getText(source) !== "schemas" || !m.type || !ts.isTypeLiteralNode(m.type)) continue;
      for (const s of m.type.members) {
        if (!ts.isPropertySignature(s) || !s.type) continue;
        const name = ts.isStringLiteral(s.name) ? s.name.text : s.name.getText(source);
        out.set(name, s.type);
      }
    }
  }
  return out;
}

/** loose lists where a type node holds unknown or any, and collects the schemas it refers to. */
function walk(node: ts.Node, source: ts.SourceFile, refs: Set<string>, loose: string[]): void {
  if (node.kind === ts.SyntaxKind.UnknownKeyword || node.kind === ts.SyntaxKind.AnyKeyword) {
    const { line } = source.getLineAndCharacterOfPosition(node.getStart(source));
    loose.push(`src/schema.ts:${line + 1}: ${node.parent.getText(source).slice(0, 120)}`);
  }
  if (ts.isIndexedAccessTypeNode(node) && ts.isLiteralTypeNode(node.indexType) && ts.isStringLiteral(node.indexType.literal)) {
    const obj = node.objectType;
    if (
      ts.isIndexedAccessTypeNode(obj) &&
      ts.isLiteralTypeNode(obj.indexType) &&
      ts.isStringLiteral(obj.indexType.literal) &&
      obj.indexType.literal.text === "schemas"
    ) {
      refs.add(node.indexType.literal.text);
    }
  }
  ts.forEachChild(node, (child) => walk(child, source, refs, loose));
}

test("the event types have no unknown and no any", () => {
  const source = ts.createSourceFile("schema.ts", readFileSync(file, "utf8"), ts.ScriptTarget.ES2022, true);
  const schemas = schemaMembers(source);
  assert.ok(schemas.has("Event"), "components.schemas has no Event");
  const seen = new Set<string>();
  const queue = ["Event"];
  const loose: string[] = [];
  while (queue.length > 0) {
    const name = queue.pop() ?? "";
    if (seen.has(name)) continue;
    seen.add(name);
    const type = schemas.get(name);
    assert.ok(type, `components.schemas has no ${name}`);
    const refs = new Set<string>();
    walk(type, source, refs, loose);
    queue.push(...refs);
  }
  assert.deepEqual(loose, []);
  // The walk went through the branches and their payloads, and JsonValue is the alias.
  assert.ok(seen.size > 40, `only ${seen.size} schemas reached from Event`);
  for (const name of ["EventTurnEnd", "eventlog.TurnEnd", "EventOfLaterKind", "JsonValue"]) assert.ok(seen.has(name), `${name} not reached`);
  const jsonValue = schemas.get("JsonValue");
  assert.ok(jsonValue && ts.isTypeReferenceNode(jsonValue) && jsonValue.typeName.getText(source) === "JsonValue");
});
