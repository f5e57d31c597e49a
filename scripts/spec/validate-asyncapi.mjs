// Validates AsyncAPI documents with the AsyncAPI Initiative's parser (the
// validator behind the AsyncAPI CLI): schema errors and its recommended
// rules. Any diagnostic, warnings included, fails the run, so a document
// stays as clean as the OpenAPI files under Redocly.
// Usage: node validate-asyncapi.mjs FILE...
import { readFile } from 'node:fs/promises';
import { Parser, DiagnosticSeverity } from '@asyncapi/parser';

const files = process.argv.slice(2);
if (files.length === 0) {
  console.error('usage: node validate-asyncapi.mjs FILE...');
  process.exit(2);
}
const parser = new Parser();
const severities = { [DiagnosticSeverity.Error]: 'error', [DiagnosticSeverity.Warning]: 'warning', [DiagnosticSeverity.Information]: 'info', [DiagnosticSeverity.Hint]: 'hint' };
let problems = 0;
for (const file of files) {
  const { document, diagnostics } = await parser.parse(await readFile(file, 'utf8'), { source: file });
  for (const d of diagnostics) {
    problems++;
    const at = d.range ? `${d.range.start.line + 1}:${d.range.start.character + 1}` : '';
    console.error(`${file}:${at} ${severities[d.severity] ?? d.severity} ${d.code}: ${d.message} (at ${d.path.join('.')})`);
  }
  if (!document) {
    console.error(`${file}: not a valid AsyncAPI document`);
    problems++;
  } else if (diagnostics.length === 0) {
    console.log(`${file}: valid AsyncAPI ${document.version()}`);
  }
}
process.exit(problems > 0 ? 1 : 0);
