// What the samplers return, and the row statuses that become errors naming the row.
import { NativeResult } from './native';

export interface SampleResult {
  /** Int32Array(B * numSamples), row-major. */
  tokens: Int32Array;
  /** With logprobs: true: log p(token) under the distribution it was drawn from. */
  logprobs?: Float32Array;
  /** With topLogprobs: n: the n most probable tokens of each row (B * n; -1 where fewer are kept). */
  topTokens?: Int32Array;
  /** Their log-probabilities (B * n; -Infinity where fewer are kept). */
  topLogprobs?: Float32Array;
  /** Rows that the fused path finished through the materializing path (top-p / min-p). */
  fallbackRows: number;
}

export const ROW_NO_CANDIDATE = 1;
/** mergePartials: the shards' candidates do not settle the row's kept set (include/params.h). */
export const ROW_UNDECIDED = 2;
/** Lists given as tensors held an invalid entry for the row (include/params.h, kRowListInvalid). */
export const ROW_LIST_INVALID = 4;

/** Throws for the first row whose status is an error; `deviceLists`: the lists given as tensors. */
export function checkRows(result: NativeResult, deviceLists: string[] = []): void {
  for (let b = 0; b < result.rowStatus.length; b++) {
    if (result.rowStatus[b] === ROW_LIST_INVALID) {
      throw new RangeError(
        `${deviceLists.join(' or ')}: row ${b} holds a token id outside [0, V), a repeated id, a non-finite ` +
          'bias, a negative count or offsets out of order (tensor lists are checked on the device)',
      );
    }
    if (result.rowStatus[b] === ROW_NO_CANDIDATE) {
      throw new RangeError(
        `row ${b}: no token can be drawn: every logit of the row is NaN or -Infinity, or masked out by allowedTokens`,
      );
    }
  }
}

export function toResult(result: NativeResult, deviceLists: string[] = []): SampleResult {
  checkRows(result, deviceLists);
  const out: SampleResult = { tokens: result.tokens ?? new Int32Array(0), fallbackRows: result.fallbackRows };
  if (result.logprobs) out.logprobs = result.logprobs;
  if (result.topTokens) {
    out.topTokens = result.topTokens;
    out.topLogprobs = result.topLogprobs;
  }
  return out;
}

