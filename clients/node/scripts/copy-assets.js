// Copies into this package what it ships from the repository: the proto the
// client loads at run time, and the licence.
'use strict';
const fs = require('node:fs');
const path = require('node:path');

const pkg = path.join(__dirname, '..');
const root = path.join(pkg, '..', '..');
for (const [from, to] of [
  ['proto/sessiond/v1/sessiond.proto', 'proto/sessiond/v1/sessiond.proto'],
  ['LICENSE', 'LICENSE'],
]) {
  fs.mkdirSync(path.dirname(path.join(pkg, to)), { recursive: true });
  fs.copyFileSync(path.join(root, from), path.join(pkg, to));
}
