// Type-level checks of the built typings (dist/*.d.ts): tsc over
// types/valid.ts (well-typed calls of every client) must find nothing, and over
// types/errors.ts exactly the errors its `// error TSnnnn` comments name, on
// their lines: a wrong path, method, body, parameter or option does not
// compile, and for the reason the comment gives rather than another.

import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'

const root = fileURLToPath(new URL('..', import.meta.url))
const tsc = fileURLToPath(new URL('../node_modules/typescript/bin/tsc', import.meta.url))
const project = fileURLToPath(new URL('./types/tsconfig.json', import.meta.url))

/** Runs tsc on the types project; resolves with its exit code and diagnostics as "file:line TSnnnn". */
function typecheck () {
  return new Promise((resolve, reject) => {
    execFile(process.execPath, [tsc, '-p', project, '--pretty', 'false'], { cwd: root }, (err, stdout, stderr) => {
      if (err && typeof err.code !== 'number') return reject(err)
      const diagnostics = []
      for (const line of stdout.split('\n')) {
        const m = /^test\/types\/(\w+\.ts)\((\d+),\d+\): error (TS\d+):/.exec(line)
        if (m) diagnostics.push(`${m[1]}:${m[2]} ${m[3]}`)
        else if (/error TS\d+/.test(line)) diagnostics.push(`unexpected: ${line}`)
      }
      resolve({ code: err ? err.code : 0, diagnostics, output: stdout + stderr })
    })
  })
}

/** The errors errors.ts expects: "errors.ts:line TSnnnn" for each annotated line. */
function expectedErrors () {
  const lines = readFileSync(new URL('./types/errors.ts', import.meta.url), 'utf8').split('\n')
  const expected = []
  lines.forEach((line, i) => {
    const m = /\/\/ error (TS\d+):/.exec(line)
    if (m) expected.push(`errors.ts:${i + 1} ${m[1]}`)
  })
  return expected
}

describe('typings', () => {
  it('refuse each deliberate mistake, for its own reason, and accept the valid calls', async () => {
    const expected = expectedErrors()
    assert.ok(expected.length >= 15, `only ${expected.length} annotated mistakes`)
    const { code, diagnostics, output } = await typecheck()
    assert.notEqual(code, 0, 'tsc passed a file of deliberate type errors')
    assert.deepEqual(diagnostics.filter((d) => d.startsWith('valid.ts')), [], `valid.ts does not compile:\n${output}`)
    assert.deepEqual(diagnostics.filter((d) => !d.startsWith('valid.ts')), expected, `tsc output:\n${output}`)
  })
})
