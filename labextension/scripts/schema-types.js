/**
 * Generates src/types.ts, the TypeScript types of the REST replies, from the JSON Schemas the
 * server ships (jupyter_gpu/server/schema/), so that the frontend's idea of a reply cannot drift
 * from the server's. Run by `jlpm build:schema` (which `build` and `build:prod` call); the
 * output is checked in so that tsc works on a fresh clone, and src/__tests__/types.test.ts
 * fails when it is out of date.
 */
'use strict';
const fs = require('fs');
const path = require('path');
const { compileFromFile } = require('json-schema-to-typescript');

const SCHEMA = path.resolve(
  __dirname,
  '../../jupyter_gpu/server/schema/api.schema.json'
);
const OUTPUT = path.resolve(__dirname, '../src/types.ts');
const BANNER = `/**
 * Shapes of the jupyter_gpu REST API (\`{baseUrl}api/gpu/...\`), generated from
 * jupyter_gpu/server/schema/*.schema.json by \`jlpm build:schema\`: edit the schemas, not this file.
 */`;

/** "Devices reply" -> DevicesReply, "GPU state" -> GpuState: the same casing as names taken from $defs keys. */
function typeName(schema) {
  if (!schema.title) {
    return undefined;
  }
  return schema.title
    .split(/\s+/)
    .map(word => word[0].toUpperCase() + word.slice(1).toLowerCase())
    .join('');
}

/** The text of src/types.ts as the schemas define it. */
function generate() {
  return compileFromFile(SCHEMA, {
    additionalProperties: false,
    bannerComment: BANNER,
    customName: typeName,
    // format as the rest of src/ (package.json's prettier settings)
    style: {
      bracketSpacing: true,
      printWidth: 80,
      ...require('../package.json').prettier
    }
  });
}

if (require.main === module) {
  generate().then(
    text => fs.writeFileSync(OUTPUT, text),
    error => {
      console.error(error);
      process.exitCode = 1;
    }
  );
}

module.exports = { generate, OUTPUT };
