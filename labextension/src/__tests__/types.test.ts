import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';
import { it } from 'node:test';

// A plain Node script: the build runs it before tsc, which compiles src/types.ts.
const schemaTypes: {
  generate(): Promise<string>;
  OUTPUT: string;
  // eslint-disable-next-line @typescript-eslint/no-var-requires -- a CommonJS script, no types
} = require('../../scripts/schema-types.js');

it('src/types.ts is what the server schemas generate (else run `jlpm build:schema`)', async () => {
  assert.equal(
    readFileSync(schemaTypes.OUTPUT, 'utf8'),
    await schemaTypes.generate()
  );
});
