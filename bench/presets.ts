// LM-head shapes of real models: vocabulary V (rows of W) × hidden size D (columns of W).
// Each preset names the model whose output projection it copies, with where the numbers come from
// (the model's config.json: vocab_size, hidden_size).

export interface Shape {
  /** Short name used on the command line and in reports, e.g. 'llama3-8b'. */
  readonly name: string;
  /** Vocabulary size V: rows of W, columns of the logits. */
  readonly vocab: number;
  /** Hidden size D: columns of W and of H. */
  readonly hidden: number;
  /** Where the shape comes from, for the table header and the JSON report. */
  readonly source: string;
}

export const PRESETS: readonly Shape[] = [
  { name: 'llama3-8b', vocab: 128256, hidden: 4096, source: 'Meta Llama 3 / 3.1 8B' },
  { name: 'llama3-70b', vocab: 128256, hidden: 8192, source: 'Meta Llama 3 / 3.1 70B' },
  { name: 'qwen3-8b', vocab: 151936, hidden: 4096, source: 'Qwen3 8B' },
  { name: 'qwen2.5-7b', vocab: 152064, hidden: 3584, source: 'Qwen2.5 7B' },
  { name: 'gemma3-4b', vocab: 262144, hidden: 2560, source: 'Google Gemma 3 4B' },
  { name: 'gemma3-12b', vocab: 262144, hidden: 3840, source: 'Google Gemma 3 12B' },
  { name: 'gemma3-27b', vocab: 262144, hidden: 5376, source: 'Google Gemma 3 27B' },
  { name: 'llama2-7b', vocab: 32000, hidden: 4096, source: 'Meta Llama 2 7B' },
  // small heads (issue 23): small models at large batches, draft models in speculative decoding
  { name: 'llama3.2-1b', vocab: 128256, hidden: 2048, source: 'Meta Llama 3.2 1B' },
  { name: 'qwen3-0.6b', vocab: 151936, hidden: 1024, source: 'Qwen3 0.6B' },
  { name: 'qwen3-4b', vocab: 151936, hidden: 2560, source: 'Qwen3 4B' },
  { name: 'gemma3-1b', vocab: 262144, hidden: 1152, source: 'Google Gemma 3 1B' },
  { name: 'gpt2', vocab: 50257, hidden: 768, source: 'GPT-2 (124M): a latency-bound head of 77 MB in bf16' },
];

/** The GPU default: Llama 3 8B, the shape bench/TUNING.md quotes floors for. */
export const GPU_DEFAULT_PRESET = 'llama3-8b';

/**
 * The CPU default: Llama 2's 32000-token vocabulary with a hidden size cut to 512, so that the
 * three samplers at two batch sizes finish in seconds on a laptop-class CPU.
 */
export const CPU_DEFAULT_SHAPE: Shape = {
  name: 'llama2-7b-vocab-d512',
  vocab: 32000,
  hidden: 512,
  source: 'Meta Llama 2 7B vocabulary, hidden cut to 512 for the CPU',
};

export function findPreset(name: string): Shape | undefined {
  const key = name.trim().toLowerCase();
  return PRESETS.find((p) => p.name === key);
}

export function customShape(vocab: number, hidden: number): Shape {
  return { name: `custom-${vocab}x${hidden}`, vocab, hidden, source: '--vocab/--hidden' };
}
