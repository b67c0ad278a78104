// Generated sources: the checked-in output equals a fresh run of its generator, so editing the
// generated file by hand, or the generator without regenerating, turns CI red.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

const root = join(__dirname, '..');

test('cuda/kernels/wgmma_ops.cuh is scripts/gen-wgmma-ops.js output', () => {
  const fresh = execFileSync(process.execPath, [join(root, 'scripts', 'gen-wgmma-ops.js')], { encoding: 'utf8' });
  const checkedIn = readFileSync(join(root, 'cuda', 'kernels', 'wgmma_ops.cuh'), 'utf8');
  expect(checkedIn).toBe(fresh);
  // every N a production tile instantiates has its op (ws_pingpong.cuh: 16 / 32 / 64 / 128,
  // ws_split.cuh: 16 / 32 / 64 / 96 / 128), in both input types
  for (const n of [16, 32, 64, 96, 128]) {
    for (const f16 of [false, true]) expect(fresh).toContain(`struct WgmmaZ<${n}, ${f16}>`);
  }
});
