// Create (or resume) a session, append a turn, and load it back.
// Run from the repository root: npm ci --prefix clients/node && node clients/node/example.js 127.0.0.1:7437
const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const { promisify } = require('node:util');

const def = protoLoader.loadSync('sessiond/v1/sessiond.proto', {
  includeDirs: [path.join(__dirname, '..', '..', 'proto')],
  keepCase: true, longs: String, enums: String, defaults: true, oneofs: true,
});
const { SessionStoreService } = grpc.loadPackageDefinition(def).sessiond.v1;

async function main() {
  const addr = process.argv[2] || '127.0.0.1:7437';
  const client = new SessionStoreService(addr, grpc.credentials.createInsecure());
  const call = (method, req) => promisify(client[method].bind(client))(req, { deadline: Date.now() + 10000 });
  const ref = { alias: 'node-example' };

  try { // create the session, or resume it by its alias if it exists
    await call('CreateSession', { alias: 'node-example', title: 'Example' });
  } catch (err) {
    if (err.code !== grpc.status.ALREADY_EXISTS) throw err;
  }

  await call('AppendMessages', { ref, messages: [
    { role: 'ROLE_USER', content: 'What is 2+2?' },
    { role: 'ROLE_ASSISTANT', content: '4' },
  ] });

  for await (const frame of client.LoadSession({ ref }, { deadline: Date.now() + 10000 })) {
    if (frame.session) console.log('session', frame.session.id, 'revision', frame.session.revision);
    for (const m of frame.messages) console.log(m.role, m.content);
  }
  client.close();
}

main().catch((err) => { console.error(err.message); process.exitCode = 1; });
