// Hand-written (not generated): writes the TypeScript types of Herald's
// OpenAPI files with openapi-typescript. scripts/generate.sh (make generate)
// runs it; its output in src/generated/ is never edited by hand.
//
//   node gen/typescript/generate.mjs OUTPUT_DIR spec/channels.yaml spec/device.yaml …
//
// It runs openapi-typescript as its command line does (same header, same
// options), with one transform: the spec says "these fields, plus one of
// these required" as allOf + oneOf/anyOf whose branches hold only
// `required` (e.g. a publish needs one of apns, fcm, web). openapi-typescript
// renders such a branch as `unknown`, which swallows the whole type; here
// each branch becomes the fields with its own keys required, so the union
// says exactly what the spec does.

import { mkdirSync, writeFileSync } from 'node:fs'
import { basename, join, resolve } from 'node:path'
import { pathToFileURL } from 'node:url'
import openapiTS, { astToString, COMMENT_HEADER, transformSchemaObject } from 'openapi-typescript'

// Keys a branch may have and still only say which fields are required.
const REQUIRED_ONLY = new Set(['required', 'title', 'description'])

function requiredOnly (branches) {
  return Array.isArray(branches) && branches.length > 0 &&
    branches.every((b) => Array.isArray(b.required) && Object.keys(b).every((k) => REQUIRED_ONLY.has(k)))
}

/** openapi-typescript's transform hook: see the comment at the top. */
function transform (schema, options) {
  if (!Array.isArray(schema.allOf)) return undefined
  for (const kind of ['oneOf', 'anyOf']) {
    if (!requiredOnly(schema[kind])) continue
    const { [kind]: branches, required = [], ...rest } = schema
    const union = {
      ...rest,
      [kind]: branches.map((b) => ({ allOf: schema.allOf, required: [...new Set([...required, ...b.required])] }))
    }
    delete union.allOf
    return transformSchemaObject(union, options)
  }
  return undefined
}

const [outDir, ...specs] = process.argv.slice(2)
if (!outDir || specs.length === 0) {
  console.error('usage: node generate.mjs OUTPUT_DIR SPEC.yaml…')
  process.exit(2)
}
mkdirSync(outDir, { recursive: true })
for (const spec of specs) {
  const ast = await openapiTS(pathToFileURL(resolve(spec)), { transform })
  writeFileSync(join(outDir, basename(spec).replace(/\.ya?ml$/, '.ts')), COMMENT_HEADER + astToString(ast))
}
