// Like example.js, over TLS with a token: for a daemon started with
// --tls-cert, --tls-key and --auth-tokens. The token comes from SESSIOND_TOKEN
// (the secret `sessionctl token add` printed) and the namespace from
// SESSIOND_NAMESPACE (default: the default namespace).
// Run from the repository root:
// SESSIOND_TOKEN=... node clients/node/example_tls.js 127.0.0.1:7437 ca.pem
const fs = require('node:fs');
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
  const [addr = '127.0.0.1:7437', caFile] = process.argv.slice(2);
  const namespace = process.env.SESSIOND_NAMESPACE || '';
  // TLS for the channel (null: the system's CAs); "authorization: Bearer <token>" on every call.
  const token = grpc.credentials.createFromMetadataGenerator((_params, done) => {
    const md = new grpc.Metadata();
    md.add('authorization', `Bearer ${process.env.SESSIOND_TOKEN}`);
    done(null, md);
  });
  const creds = grpc.credentials.combineChannelCredentials(
    grpc.credentials.createSsl(caFile ? fs.readFileSync(caFile) : null), token);
  const client = new SessionStoreService(addr, creds);
  const call = (method, req) => promisify(client[method].bind(client))(req, { deadline: Date.now() + 10000 });
  const ref = { namespace, alias: 'node-tls-example' };

  try { // create the session, or resume it by its alias if it exists
    await call('CreateSession', { namespace, alias: 'node-tls-example', title: 'Example' });
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
