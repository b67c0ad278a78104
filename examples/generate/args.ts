// Command line of the decode-loop example. Pure: every problem is a UsageError naming the flag,
// what was expected and what came.

export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}

export interface Args {
  help: boolean;
  checkpoint: string | null;
  tokenizer: string | null;
  prompts: string[];
  temperature: number;
  topP: number;
  topK: number;
  seed: bigint;
  maxTokens: number;
  batch: number;
  repeat: number;
  device: 'auto' | 'cpu' | 'cuda' | `cuda:${number}`;
  /** null: bf16 on a GPU, f32 on the CPU. */
  headDtype: 'f32' | 'bf16' | 'f16' | null;
  quiet: boolean;
  makeTiny: string | null;
  tinyShape: string;
}

export const USAGE = `usage: npm run generate -- --checkpoint model.bin --tokenizer tokenizer.bin [options]
       npm run generate -- --make-tiny DIR [options]     (writes DIR/model.bin, DIR/tokenizer.bin, then runs on them)

  --checkpoint FILE     a llama2.c checkpoint (run.c's format: 7 int32 header, float32 weights)
  --tokenizer FILE      its tokenizer.bin (default: tokenizer.bin next to the checkpoint)
  --prompt TEXT         a prompt; repeat the flag for several requests (default: one empty prompt)
  --repeat N            submit every prompt N times, each with its own seed (default 1)
  --temperature T       >= 0, 0 = greedy (default 0.8)
  --top-p P             in (0, 1], 1 = off (default 0.9)
  --top-k K             >= 0, 0 = off (default 0)
  --seed S              request i samples with seed S + i (default 42)
  --max-tokens N        tokens to generate per request, at most (default 256; also ends at seq_len)
  --batch B             requests decoding at once; the others wait their turn (default 8)
  --device D            cpu, cuda, cuda:N or auto (default auto: the GPU when one is usable)
  --head-dtype T        f32, bf16 or f16: the LM head's dtype (default bf16 on a GPU, f32 on the CPU)
  --quiet               print the summary only, not the text
  --make-tiny DIR       write a random checkpoint and a matching tokenizer to DIR first, and use them
  --tiny-shape NAME     tiny (default), stories15M, stories42M or stories110M (random weights)
  --help`;

export function parseArgs(argv: readonly string[]): Args {
  const a: Args = {
    help: false,
    checkpoint: null,
    tokenizer: null,
    prompts: [],
    temperature: 0.8,
    topP: 0.9,
    topK: 0,
    seed: 42n,
    maxTokens: 256,
    batch: 8,
    repeat: 1,
    device: 'auto',
    headDtype: null,
    quiet: false,
    makeTiny: null,
    tinyShape: 'tiny',
  };
  const num = (flag: string, v: string, ok: (x: number) => boolean, domain: string): number => {
    const x = v.trim() === '' ? NaN : Number(v);
    if (!ok(x)) throw new UsageError(`${flag}: expected ${domain}, got ${JSON.stringify(v)}`);
    return x;
  };
  const int = (flag: string, v: string, min: number, max = Number.MAX_SAFE_INTEGER) =>
    num(flag, v, (x) => Number.isInteger(x) && x >= min && x <= max, `an integer in [${min}, ${max}]`);
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const eq = arg.indexOf('=');
    const flag = arg.startsWith('--') && eq > 0 ? arg.slice(0, eq) : arg;
    const inline = arg.startsWith('--') && eq > 0 ? arg.slice(eq + 1) : null;
    const value = (): string => {
      if (inline !== null) return inline;
      if (i + 1 >= argv.length) throw new UsageError(`${flag}: expected a value`);
      return argv[++i];
    };
    switch (flag) {
      case '--help':
      case '-h':
        a.help = true;
        break;
      case '--checkpoint':
        a.checkpoint = value();
        break;
      case '--tokenizer':
        a.tokenizer = value();
        break;
      case '--prompt':
        a.prompts.push(value());
        break;
      case '--temperature':
        a.temperature = num(flag, value(), (x) => Number.isFinite(x) && x >= 0, 'a finite number >= 0');
        break;
      case '--top-p':
        a.topP = num(flag, value(), (x) => x > 0 && x <= 1, 'a number in (0, 1]');
        break;
      case '--top-k':
        a.topK = int(flag, value(), 0, 2 ** 31 - 1);
        break;
      case '--seed': {
        const v = value();
        let s: bigint;
        try {
          s = BigInt(v.trim());
        } catch {
          s = -1n;
        }
        if (v.trim() === '' || s < 0n || s >= 1n << 64n) throw new UsageError(`--seed: expected an integer in [0, 2^64), got ${JSON.stringify(v)}`);
        a.seed = s;
        break;
      }
      case '--max-tokens':
        a.maxTokens = int(flag, value(), 1);
        break;
      case '--batch':
        a.batch = int(flag, value(), 1, 65535);
        break;
      case '--repeat':
        a.repeat = int(flag, value(), 1, 65535);
        break;
      case '--device': {
        const v = value();
        if (!/^(auto|cpu|cuda(:\d+)?)$/.test(v)) throw new UsageError(`--device: expected cpu, cuda, cuda:N or auto, got ${JSON.stringify(v)}`);
        a.device = v as Args['device'];
        break;
      }
      case '--head-dtype': {
        const v = value();
        if (v !== 'f32' && v !== 'bf16' && v !== 'f16') throw new UsageError(`--head-dtype: expected f32, bf16 or f16, got ${JSON.stringify(v)}`);
        a.headDtype = v;
        break;
      }
      case '--quiet':
        a.quiet = true;
        break;
      case '--make-tiny':
        a.makeTiny = value();
        break;
      case '--tiny-shape':
        a.tinyShape = value();
        break;
      default:
        throw new UsageError(`${JSON.stringify(arg)}: unknown argument (--help lists them)`);
    }
  }
  if (!a.help && a.checkpoint === null && a.makeTiny === null) {
    throw new UsageError('--checkpoint: expected a llama2.c checkpoint (or --make-tiny DIR for a random one)');
  }
  if (a.checkpoint !== null && a.makeTiny !== null) {
    throw new UsageError('--make-tiny: expected either --make-tiny DIR or --checkpoint FILE, got both');
  }
  if (a.prompts.length === 0) a.prompts.push('');
  return a;
}
