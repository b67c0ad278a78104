#!/usr/bin/env node
// prebuildify drives node-gyp (`node-gyp rebuild --target=… --arch=… --release`); flashsample builds
// with cmake-js. This stands in for node-gyp (PREBUILD_NODE_GYP): the addon targets N-API 8, so the
// Node version prebuildify asks for does not matter, and cmake-js writes build/Release/*.node where
// prebuildify looks for it.
'use strict';
const { spawnSync } = require('child_process');
const path = require('path');

const args = process.argv.slice(2);
if (args[0] !== 'rebuild') {
  console.error(`cmake-js-as-node-gyp: only 'rebuild' is supported, got ${JSON.stringify(args)}`);
  process.exit(2);
}
const debug = args.includes('--debug');
const cmakeJs = path.join(__dirname, '..', 'node_modules', '.bin', 'cmake-js');
const result = spawnSync(cmakeJs, ['rebuild', ...(debug ? ['--debug'] : [])], { stdio: 'inherit' });
process.exit(result.status ?? 1);
