// daemon starts the daemon binary SESSIOND_BIN on a data directory and a
// loopback port of its own, for the tests that kill and restart it: kill9()
// kills it with SIGKILL, restart() kills it and starts it again on the same
// directory and port. When the tests end it is killed and its directory
// removed. SKIP_WITHOUT_BIN is the test option that skips a test needing it
// when SESSIOND_BIN is not set.
'use strict';

const test = require('node:test');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const { spawn } = require('node:child_process');

const SKIP_WITHOUT_BIN = { skip: !process.env.SESSIOND_BIN && 'SESSIOND_BIN is not set' };

// freePort is a loopback port nothing listens on now.
async function freePort() {
  const server = net.createServer();
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address();
  await new Promise((r) => server.close(r));
  return port;
}

async function daemon(...args) {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sessiond-test-'));
  const address = `127.0.0.1:${await freePort()}`;
  let proc;
  const start = () => {
    proc = spawn(process.env.SESSIOND_BIN, ['--listen', address, '--data-dir', dataDir, '--log-level', 'error', ...args], { stdio: 'ignore' });
  };
  const kill9 = () => new Promise((r) => {
    if (proc.exitCode !== null || proc.signalCode !== null) return r();
    proc.once('exit', r);
    proc.kill('SIGKILL');
  });
  start();
  test.after(async () => {
    await kill9();
    fs.rmSync(dataDir, { recursive: true, force: true });
  });
  return { address, kill9, restart: async () => { await kill9(); start(); } };
}

module.exports = { daemon, SKIP_WITHOUT_BIN };
