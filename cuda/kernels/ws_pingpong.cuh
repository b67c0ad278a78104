// wgmma_ws_tma_kernel: the warp-specialized ping-pong kernel (sm_90a). The fused sampling epilogue
// of one work item runs while the other consumer warpgroup's wgmmas run. On compute capability 9.0
// it serves the reference's logits (kStore) and several samples per row (kSampleFew, each draw
// pruned, up to kPrunedSamples; kSampleMany beyond); one sample a row is the split tile's
// (ws_split.cuh), which reuses this kernel's producer and its k-slice MMAs. Where tensor maps
// cannot be encoded, dispatch.cuh runs the mma.sync tiles instead.
//
// CTA = 3 warpgroups (384 threads), 1 CTA per SM, persistent over the work items (item =
// (vocabulary tile of 128 rows, batch chunk of N columns), vtile-major, item = blockIdx.x +
// j·gridDim.x for the CTA's local items j = 0, 1, ...; num_vtiles / num_chunks from
// launch_persistent):
//   * warpgroup 0 = producer: streams the k-slices (W tile 128 x 64 + H tile N x 64) of every local
//     item, in item order, through a kStages-deep shared-memory ring: one thread issuing one bulk
//     tensor copy per tile and stage (natural row order, SW128 swizzle). setmaxnreg.dec to 40
//     registers;
//   * warpgroups 1 and 2 = consumers (setmaxnreg.inc to 232): consumer c takes the local items
//     j with j % 2 == c - 1, runs the whole K loop of its item (both m64 blocks, all N columns:
//     128 fp32 accumulators per thread at N = 128), then the epilogue of that item while the other
//     consumer runs the K loop of item j + 1. Each consumer keeps one running winner per column
//     (S = 1; per sample and column for S <= kPrunedSamples) in shared memory as a packed candidate
//     (pack_candidate), raised with a shared atomicMax by any lane that beats it; before an item's
//     epilogue it is merged with the grid's winners word of the column (the best any CTA has
//     published), after the epilogue published to it with the same 64-bit atomicMax as the other
//     kernels. Exact: every threshold is the score of a candidate that exists (of the same row and
//     sample), and the max of packed candidates does not depend on the order.
//
// Synchronization (all in shared memory of the CTA; no __syncthreads after the set-up):
//   full[s]  (mbarrier, count 1): stage slot s holds its k-slice. The producer thread arrives with
//            expect-tx of the stage's bytes before issuing the two copies, which complete the
//            phase's transaction count as they land.
//   empty[s] (mbarrier, count 128): the 128 threads of the consumer that used stage k·S + s
//            arrive after wgmma.wait_group has retired the wgmmas that read it (phase k completes).
//   turn     (named barriers 1 and 2, 256 threads): consumer c may start the K loop of its item j
//            (j >= 1) only after the consumer of item j - 1 has issued the last wgmma of item j - 1
//            (bar.arrive by that consumer, bar.sync by c). This serializes the MMA phases (the
//            ping-pong), and it is what makes the parity waits below unambiguous.
//   params   (named barriers 3 and 4, 128 threads): a consumer's own row-parameter reload.
//
// Phase / parity bookkeeping. Stages are numbered p = 0, 1, 2, ... over the CTA's items in order
// (item j, k-slice kt: p = j·KT + kt); stage p lives in slot p % S, round r = p / S; phase r of
// full[slot] / empty[slot] belongs to stage p. mbarrier.try_wait.parity(P) only sees the parity
// of the phase, so it reports "phase r complete" both when r is complete (correct) and when only
// r - 2 is (wrong): each wait must be known to be at most one phase behind.
//   * producer, stage p >= S: waits empty[slot] parity ((r - 1) & 1), i.e. the release of stage
//     p - S. Stage p - S was filled by this producer only after it saw the release of p - 2S, so
//     phase r - 2 of empty[slot] is complete; stage p is not yet filled, so phase r cannot be:
//     unambiguous. Stages p < S wait for nothing (fresh slots).
//   * consumer, stage p: waits full[slot] parity (r & 1). Phase r + 1 cannot be complete (stage
//     p + S needs the release of p, which this consumer has not given). Phase r - 1 (stage p - S)
//     must already be complete, and that is the turn barrier's job: stage p - S is either an
//     earlier stage of the same item (this consumer waited on it), or a stage of an earlier item,
//     all of whose stages were filled before the previous item's consumer passed its last full wait
//     and signalled the turn (stages are filled in order). Without the turn barrier, a consumer
//     going from item j to j + 2 could wait on stage p while p - S (item j + 1) is unfilled and the
//     parity test would pass on phase r - 2: a wrong-data race. With it: unambiguous.
//   * empty[slot] arrivals happen in stage order per slot (p - S released before p can be filled),
//     though not across slots (the two consumers release independently); the producer only waits
//     per slot, so that is fine.
// Deadlock freedom: the producer blocks only on the release of a stage it already filled; that
// stage's consumer needs only stages <= it (all filled) and, for its turn, the previous item's
// consumer, which itself needs only earlier stages. Every stage that is produced belongs to an
// existing item (the producer walks exactly the CTA's my_items items) and is consumed and released
// by exactly one consumer. A consumer with no further item simply leaves its loop; the turn is only
// signalled when item j + 1 exists (j + 1 < my_items) and only awaited for j >= 1, so every
// bar.arrive meets exactly one bar.sync, and a consumer cannot arrive twice on a turn barrier before
// the other has synced it (it must first sync its own barrier, which the other arrives on only
// after that sync). With an odd my_items consumer 1 simply has one item more.
//
// Proxies: the bulk copies write through the async proxy and complete on the mbarrier, which the
// consumers wait for; their wgmmas read through the async proxy too. The consumers still execute
// fence.proxy.async.shared::cta after each full[] wait (one instruction per stage; ws_split.cuh's
// consumer does the same). The write-after-read direction (the producer refilling a slot) is
// ordered by wgmma.wait_group before the empty[] arrive.
#pragma once

#include "wgmma_common.cuh"

namespace flashsample {
namespace cuda {
namespace detail {

// Tile of one consumer: 128 vocabulary rows (two m64 blocks) x N batch columns (one batch chunk).
// Items are vtile-major (item -> vtile = item / num_chunks, chunk = item % num_chunks): the
// num_chunks items of one vocabulary tile run on neighbouring CTAs at about the same time, so the W
// tile is read from HBM once, then from L2.
// The sampling epilogues are rolled loops over the n8 column groups (the
// accumulators rotated down by one group per trip): unrolled, the kernel's code was 170 KB at N = 64
// and 316 KB at N = 128, far beyond the instruction caches, and the epilogue ran ~25x slower than
// its instruction count.
// The producer is one thread issuing bulk tensor copies (expect-tx on full[]) of the W tile in
// natural row order (one box of kBV rows x 64) and the H tile; the epilogue moves each thread's
// four values into a vocabulary quad with a 4 x 4 transpose over lanes g ^ 1, g ^ 2
// (transpose_quad_lanes). Needs WsTensorMaps (D % 8 == 0 and 16-byte aligned W, H: tensor_core_path_ok;
// V, B below 2^31: int32 coordinates).
// kSampleFew prunes each sample's draw against its running winner, for up to this many samples a
// row (a shared word per consumer, sample and column: 8 KB at N = 128); kSampleMany, for more,
// draws every value.
constexpr int kPrunedSamples = 4;

template <int N, int STAGES>
struct WsTile {
  static constexpr uint32_t kFullArrivals = 1u;
  static constexpr uint32_t kEmptyArrivals = 128u;
  static constexpr int kBV = 128;  // vocabulary rows per item
  static constexpr int kNB = N;    // batch columns per chunk = wgmma N of each consumer
  static constexpr int kBK = 64;
  static constexpr int kConsumers = 2;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kNT = N / 8;   // n8 column groups
  static constexpr int kAcc = N / 2;  // fp32 accumulators per thread per m64 block
  static constexpr int kStages = STAGES;
  static constexpr int kWStageBytes = kBV * 128;
  static constexpr int kHStageBytes = kNB * 128;
  static constexpr int kRingBytes = STAGES * (kWStageBytes + kHStageBytes);
  // ring (1024-byte aligned) + full[] and empty[] mbarriers + 1024 for aligning the dynamic base
  static constexpr int kSmemBytes = kRingBytes + 2 * STAGES * 8 + 1024;
  // static shared memory: row parameters of each consumer's current chunk, and the running
  // winners of each (consumer, column), one packed word (kPrunedSamples for kSampleFew)
  static constexpr int kStaticSmemBytes = kConsumers * kNB * (4 + 8 + 8 + 1) + kConsumers * kNB * 8 * kPrunedSamples;
  // Launch: 384 threads x 168 registers = 64512 (__launch_bounds__(384, 1)); setmaxnreg moves them
  // to 40 per producer thread and 232 per consumer thread (CUTLASS's ping-pong split):
  // 40·128 + 232·256 = 64512. ptxas allocates each role's code within its new limit; 0 spills at
  // 40 needs the producer's offsets precomputed as below.
  static constexpr int kProducerRegs = 40;
  static constexpr int kConsumerRegs = 232;
  static_assert(N % 16 == 0 && N >= 16 && N <= 128, "wgmma N; 8 H chunks per row over 128 threads");
  static_assert(STAGES >= 2, "ring");
  static_assert(kSmemBytes + static_smem_padded(kStaticSmemBytes) <= 227 * 1024, "sm_90 shared memory per block");
  // setmaxnreg.inc blocks until the registers exist: never ask for more than the launch holds.
  static_assert(kProducerRegs * 128 + kConsumerRegs * 128 * kConsumers <= 168 * kThreads,
                "setmaxnreg split must fit the 168 x 384 registers of the launch");
  static_assert(kProducerRegs % 8 == 0 && kConsumerRegs % 8 == 0, "setmaxnreg granularity");
};

// WsTileT<N>: the ping-pong tile of N columns, its ring as deep as shared memory allows (12 x 18 KB
// at N = 16, 11 x 20 KB, 9 x 24 KB, 6 x 32 KB at N = 128: W streamed with 192+ KB in flight per SM).
// TMA against a cp.async producer of the same tile (llama3-8b, H200, harness.cu): B = 1 249.4 /
// 259.8 us, B = 128 442.7 / 468.4, B = 256 739.8 / 867.8.
template <int N>
using WsTileT = WsTile<N, (N >= 128 ? 6 : N >= 64 ? 9 : N >= 32 ? 11 : 12)>;

template <class Cfg>
__device__ __forceinline__ void ws_item_coords(int64_t item, const GemmArgs& a, int64_t& chunk,
                                               int64_t& vtile) {
  vtile = item / a.num_chunks;
  chunk = item % a.num_chunks;
}

// A chunk's batch rows [b0, b_end): chunk_cols apart, the last chunk cut at the batch. The one
// place that says which rows a chunk holds (producer's H box, epilogues, transform words).
__device__ __forceinline__ void ws_chunk_rows(int64_t chunk, const GemmArgs& a, int64_t& b0, int64_t& b_end) {
  b0 = chunk * a.chunk_cols;
  b_end = b0 + a.chunk_cols < a.batch ? b0 + a.chunk_cols : a.batch;
}

// The producer (one thread): per stage one box of the W tile's kBV rows (natural
// order) and one of the H tile's N rows, 64 k columns each, completing on full[slot] (expect-tx),
// over the CTA's local items in order; a slot is refilled only after the release of its previous
// stage (empty[slot], see the parity bookkeeping above).
template <class Cfg>
__device__ __forceinline__ void ws_tma_produce(const GemmArgs& a, const WsTensorMaps* maps, uint32_t smem_w,
                                               uint32_t smem_h, uint32_t bar_full, uint32_t bar_empty,
                                               int64_t my_items, int KT) {
  prefetch_tensormap(&maps->w);
  prefetch_tensormap(&maps->h);
  const uint64_t stream_once = l2_evict_first_policy();
  // a stage's bytes: W's box and H's (encode_ws_maps: h_box_rows rows of 128 bytes)
  const uint32_t stage_bytes = Cfg::kWStageBytes + static_cast<uint32_t>(h_box_rows(a.chunk_cols, Cfg::kNB)) * 128u;
  int slot = 0;
  uint32_t phase = 0;
  bool wrapped = false;
  for (int64_t j = 0; j < my_items; ++j) {
    const int64_t item = blockIdx.x + j * gridDim.x;
    int64_t chunk, vtile;
    ws_item_coords<Cfg>(item, a, chunk, vtile);
    int64_t rows0, rows_end;
    ws_chunk_rows(chunk, a, rows0, rows_end);
    const int32_t v0 = static_cast<int32_t>(vtile * Cfg::kBV), b0 = static_cast<int32_t>(rows0);
    for (int kt = 0; kt < KT; ++kt) {
      if (wrapped) mbar_wait(bar_empty + 8 * slot, phase ^ 1u);  // release of stage p - S
      const uint32_t full = bar_full + 8 * slot;
      mbar_arrive_expect_tx(full, stage_bytes);
      const int32_t k0 = kt * Cfg::kBK;
      tma_load_2d_hinted(smem_w + slot * Cfg::kWStageBytes, &maps->w, k0, v0, full, stream_once);
      tma_load_2d(smem_h + slot * Cfg::kHStageBytes, &maps->h, k0, b0, full);
      ring_advance<Cfg::kStages>(slot, phase, wrapped);
    }
  }
}

// The wgmmas of one k-slice of a 128 x N consumer tile: both m64 blocks (W rows 0..63 at sw, 64..127
// 8 KB above), the H tile at sh, four k16 steps; `accumulate` false: the item's first k-slice, whose
// first step overwrites the accumulators (D = A·B). Issued between wgmma_fence and the caller's
// wgmma_commit.
template <class Cfg, bool kF16>
__device__ __forceinline__ void ws_kslice_mma(float (&acc0)[Cfg::kAcc], float (&acc1)[Cfg::kAcc], uint32_t sw,
                                              uint32_t sh, bool accumulate) {
  wgmma_fence();
  // sw128_desc's descriptors by one add each (~97 instructions a k-slice instead of 144: the K loop
  // is issue-bound beside the epilogue at B >= 128): shared-window addresses are below 2^18, so the low word (addr & 0x3FFFF) >> 4 |
  // 1 << 16 is (addr >> 4) + 0x10000 and a k16 step (32 bytes) or the second m64 block (8 KB)
  // adds 2 or 512; the high word is a constant. The same descriptors bit for bit.
  const uint32_t lo_w = (sw >> 4) + 0x10000u, lo_h = (sh >> 4) + 0x10000u;
#pragma unroll
  for (int ks = 0; ks < Cfg::kBK / 16; ++ks) {
    const uint64_t db = sw128_desc_from_lo(lo_h + 2 * ks);
    const uint32_t scale_d = (accumulate || ks > 0) ? 1u : 0u;  // item's first k16 step: D = A·B
    WgmmaZ<Cfg::kNB, kF16>::mma(acc0, sw128_desc_from_lo(lo_w + 2 * ks), db, scale_d);
    WgmmaZ<Cfg::kNB, kF16>::mma(acc1, sw128_desc_from_lo(lo_w + (64 * 128 >> 4) + 2 * ks), db, scale_d);
  }
}

// Named barrier ids (0 is __syncthreads): turn of consumer c (0/1) = 1 + c, its params sync = 3 + c.
constexpr int kTurnBarrier = 1;
constexpr int kParamsBarrier = 3;

// One stage of transpose_quad_lanes, over lane bit kM of g (lane ^ 4 kM): a lane sends the two
// elements whose index bit kM differs from its own g bit and takes the partner's in their place.
template <int kM>
__device__ __forceinline__ void transpose_quad_stage(float (&x)[4], int g) {
  constexpr int kOther = kM ^ 3;  // the other index bit
  const bool set = (g & kM) != 0;
  float s0 = set ? x[0] : x[kM], s1 = set ? x[kOther] : x[kM + kOther];
  s0 = __shfl_xor_sync(0xffffffffu, s0, 4 * kM);
  s1 = __shfl_xor_sync(0xffffffffu, s1, 4 * kM);
  if (set) {
    x[0] = s0;
    x[kOther] = s1;
  } else {
    x[kM] = s0;
    x[kM + kOther] = s1;
  }
}

// 4 x 4 transpose of x over the lanes g = 4 k + r, r = 0..3 (lane = 4 g + t4, so g ^ 1 is lane ^ 4
// and g ^ 2 lane ^ 8): afterwards lane r holds what lanes 4 k + i held in element r, for i = 0..3.
// In the ring's layout element o = 2 p + h of lane g is vocabulary row 64 p + 16 wi + 8 h + g of the
// tile, so lane r ends up with the quad 64 (r >> 1) + 16 wi + 8 (r & 1) + 4 k + 0..3: four
// consecutive vocabulary rows, the unit of one Philox call. Two xor-butterfly stages.
__device__ __forceinline__ void transpose_quad_lanes(float (&x)[4], int g) {
  transpose_quad_stage<1>(x, g);
  transpose_quad_stage<2>(x, g);
}

// The logits of this thread's vocabulary quad vq + 0..3 in one column: accumulator e (and e + 2,
// the row 8 below) of both m64 blocks, gathered into the quad (transpose_quad_lanes), plus the
// quad's bias.
template <int kAcc>
__device__ __forceinline__ void quad_logits(float (&l)[4], const float (&acc0)[kAcc], const float (&acc1)[kAcc],
                                            int e, const float (&bias)[4], int g) {
  l[0] = acc0[e];
  l[1] = acc0[e + 2];
  l[2] = acc1[e];
  l[3] = acc1[e + 2];
  transpose_quad_lanes(l, g);
#pragma unroll
  for (int o = 0; o < 4; ++o) l[o] += bias[o];
}

// After an item (a ping-pong consumer's kSampleFew item, or any split-kernel
// item): the running winners `win` (kSlots samples a column; the call draws `samples` <= kSlots of
// them, so the slots past it stay 0) go to the grid's when the next local item (j + kItemStep) is
// another chunk, or there is none (flush, then reset); otherwise the thread's column publishes its
// winners so far, for the other CTAs' thresholds. The kThreads threads that share `win` (a consumer
// warpgroup, or the split kernel's epilogue) call it together, ctid their index, `barrier` their
// named barrier.
template <class Cfg, int64_t kItemStep, int kThreads, int kSlots>
__device__ __forceinline__ void ws_flush_or_publish(const GemmArgs& a, unsigned long long (&win)[kSlots][Cfg::kNB],
                                                    int samples, int barrier, int ctid, int64_t j, int64_t my_items,
                                                    int64_t item, int64_t chunk, int64_t b0, int64_t b_end,
                                                    const unsigned long long (&grid_best)[kSlots]) {
  constexpr int kNB = Cfg::kNB;
  bool flush = j + kItemStep >= my_items;
  if (!flush) {
    int64_t nchunk, nvtile;
    ws_item_coords<Cfg>(item + kItemStep * static_cast<int64_t>(gridDim.x), a, nchunk, nvtile);
    flush = nchunk != chunk;
  }
  if (flush) {  // uniform over the kThreads threads
    named_bar_sync(barrier, kThreads);  // every warp's raises of this chunk done
    for (int i = ctid; i < kSlots * kNB; i += kThreads) {
      const int s = kSlots == 1 ? 0 : i / kNB, n = kSlots == 1 ? i : i % kNB;
      const unsigned long long c = win[s][n];
      win[s][n] = 0ull;
      if (b0 + n < b_end && c != 0ull) atomicMax(a.winners + (b0 + n) * samples + s, c);
    }
    named_bar_sync(barrier, kThreads);  // reset before the next chunk's reads
  } else if (ctid < kNB && b0 + ctid < b_end) {
    // a warp still in its trips may raise the column later: that reaches the grid with a later
    // publish or the flush, which waits for every warp
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
      if (s >= samples) break;
      const unsigned long long c = ld_relaxed_shared_u64(&win[s][ctid]);
      if (c > grid_best[s]) atomicMax(a.winners + (b0 + ctid) * samples + s, c);
    }
  }
}

// One sample a column (kSampleOne).
template <class Cfg, int64_t kItemStep, int kThreads>
__device__ __forceinline__ void ws_flush_or_publish(const GemmArgs& a, unsigned long long (&win)[Cfg::kNB],
                                                    int barrier, int ctid, int64_t j, int64_t my_items,
                                                    int64_t item, int64_t chunk, int64_t b0, int64_t b_end,
                                                    unsigned long long grid_best) {
  const unsigned long long best[1] = {grid_best};
  ws_flush_or_publish<Cfg, kItemStep, kThreads, 1>(
      a, reinterpret_cast<unsigned long long(&)[1][Cfg::kNB]>(win), 1, barrier, ctid, j, my_items, item, chunk, b0, b_end,
      best);
}

// The ping-pong epilogue's work on one n8 group of an item: the logits l[jj] of this thread's
// vocabulary quad vq .. vq + 3 for its two batch columns n = 8 nt + 2 t4 + jj (jj = 0, 1).
// kStore: the logits themselves.
__device__ __forceinline__ void ws_store_group(const GemmArgs& a, const float (&l)[2][4], int nt, int t4, int64_t b0,
                                               int64_t vq) {
  const int64_t V = a.vocab;
#pragma unroll
  for (int jj = 0; jj < 2; ++jj) {
    const int64_t b = b0 + nt * 8 + t4 * 2 + jj;
    if (b < a.batch) {
#pragma unroll
      for (int o = 0; o < 4; ++o)
        if (vq + o < V) a.logits[b * V + vq + o] = l[jj][o];
    }
  }
}

// kSampleFew: both columns together (quads_update_pruned<2>: one branch for both
// Philox calls), each sample's draw pruned against its column's running winner in win_s, which a
// lane whose best beats the winner it read raises (no cross-lane reduction per group).
template <Epi kEpi, int kSlots, int kNB>
__device__ __forceinline__ void ws_pruned_group(const GemmArgs& a, float (&l)[2][4], int nt, int t4, int64_t b0,
                                                int64_t vq, const float* row_inv_t, const uint8_t* row_greedy,
                                                const unsigned long long* row_seed,
                                                const unsigned long long* row_offset,
                                                unsigned long long (&win_s)[kSlots][kNB]) {
  RowParams rp[2];
  int64_t vend[2];
  int nn[2];
#pragma unroll
  for (int jj = 0; jj < 2; ++jj) {
    const int n = nt * 8 + t4 * 2 + jj;
    const int64_t b = b0 + n;
    nn[jj] = n;
    vend[jj] = b < a.batch ? a.vocab + a.vocab_base : 0;  // global ids: a shard's noise and tokens
    rp[jj] = staged_row_params(a, row_inv_t, row_greedy, row_seed, row_offset, n, b);
  }
  const int samples = a.num_samples;
  for (int s = 0; s < samples; ++s) {
    float thr[2], bs[2];
    uint32_t bk[2];
    unsigned long long thr_packed[2];
#pragma unroll
    for (int jj = 0; jj < 2; ++jj) {
      // the score of the column's running winner (a real candidate of the row, or -Inf)
      thr_packed[jj] = ld_relaxed_shared_u64(&win_s[s][nn[jj]]);
      thr[jj] = packed_score(thr_packed[jj]);
      bs[jj] = -INFINITY;
      bk[jj] = kNoToken;
    }
    quads_update_pruned<2, false, 4>(l, rp, static_cast<uint32_t>(s), vq + a.vocab_base, vend, false, thr, bs, bk);
#pragma unroll
    for (int jj = 0; jj < 2; ++jj)
      if (bk[jj] != kNoToken) {
        const unsigned long long c = pack_candidate(bs[jj], bk[jj]);
        if (c > thr_packed[jj]) atomicMax(&win_s[s][nn[jj]], c);
      }
  }
}

// kSampleMany: every sample's best of the quad, reduced over the column's lanes, into the grid's
// winners.
__device__ __forceinline__ void ws_sampled_group(const GemmArgs& a, const float (&l)[2][4], int nt, int t4, int g,
                                                 int64_t b0, int64_t vq, const float* row_inv_t,
                                                 const uint8_t* row_greedy, const unsigned long long* row_seed,
                                                 const unsigned long long* row_offset) {
#pragma unroll
  for (int jj = 0; jj < 2; ++jj) {
    const int n = nt * 8 + t4 * 2 + jj;
    const int64_t b = b0 + n;
    const bool col_ok = b < a.batch;
    const RowParams rp = staged_row_params(a, row_inv_t, row_greedy, row_seed, row_offset, n, b);
    for (int s = 0; s < a.num_samples; ++s) {
      float best_s;
      uint32_t best_k;
      best_of_quad(l[jj], rp, static_cast<uint32_t>(s), vq + a.vocab_base, col_ok ? a.vocab + a.vocab_base : 0,
                   best_s, best_k);
      warp_best<4, 16>(best_s, best_k);  // lanes with the same t4 share the column
      if (g == 0 && col_ok && best_k != kNoToken)
        atomicMax(a.winners + b * a.num_samples + s, pack_candidate(best_s, best_k));
    }
  }
}

// The kernel body; maps points at the kernel's __grid_constant__ parameter.
template <class Cfg, bool kF16, Epi kEpi>
__device__ __forceinline__ void wgmma_ws_body(const GemmArgs& a, const WsTensorMaps* maps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  constexpr int kBV = Cfg::kBV, kNB = Cfg::kNB, kNT = Cfg::kNT, kAcc = Cfg::kAcc;
  constexpr int kStages = Cfg::kStages;
  const uint32_t smem_w = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const uint32_t smem_h = smem_w + kStages * Cfg::kWStageBytes;
  const uint32_t bar_full = smem_w + Cfg::kRingBytes;  // full[s] at bar_full + 8 s
  const uint32_t bar_empty = bar_full + 8 * kStages;   // empty[s] at bar_empty + 8 s

  // Row parameters of each consumer's current batch chunk.
  __shared__ float row_inv_t[2][kNB];
  __shared__ unsigned long long row_seed[2][kNB], row_offset[2][kNB];
  __shared__ uint8_t row_greedy[2][kNB];
  // kSampleFew (kPruned): the running winner of each (consumer, sample, column),
  // packed (pack_candidate): the threshold of the sample's pruned draw in that column, raised with
  // a shared-memory atomicMax by any lane whose candidate beats the value it read (the max of
  // packed candidates does not depend on the order), merged with the grid's winners before each
  // item's epilogue, published to them after it.
  static_assert(kEpi != Epi::kSampleOne, "one sample a row takes the split tile (ws_split.cuh)");
  constexpr bool kPruned = kEpi == Epi::kSampleFew;
  constexpr int kSlots = kEpi == Epi::kSampleFew ? kPrunedSamples : 1;
  __shared__ unsigned long long win_s[2][kSlots][kNB];

  const int tid = threadIdx.x;
  const int wg = tid >> 7;  // warpgroup: 0 producer, 1 and 2 consumers (uniform per warp)

  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(bar_full + 8 * s, Cfg::kFullArrivals);  // the producer's one expect-tx arrive
      mbar_init(bar_empty + 8 * s, Cfg::kEmptyArrivals);  // one arrive per consumer thread that reads it
    }
    mbar_init_fence();
  }
  __syncthreads();  // the only CTA-wide barrier: from here the roles never wait on each other's
                    // program order, only on the mbarriers and the named barriers above.

  const int64_t V = a.vocab, D = a.dim, B = a.batch;
  const int KT = static_cast<int>((D + Cfg::kBK - 1) / Cfg::kBK);
  const int64_t total_items = a.num_vtiles * a.num_chunks;
  const int64_t my_items =
      blockIdx.x < total_items ? (total_items - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
  // Programmatic launch (launch_fused_sample on compute capability 9.0): this grid may start while
  // the kernel that zeroes `winners` still runs, and the finalize kernel after it may be scheduled
  // now. Every CTA waits for the zeroing grid before its first winner write and before it exits,
  // so this grid's completion (what the finalize kernel waits for) implies the zeroing's.
  if (tid == 0) griddep_launch_dependents();
  if (KT == 0 || my_items == 0) {  // no stage will ever be produced (D = 0 runs no item);
    griddep_wait();                 // CTA-uniform
    return;
  }

  if (wg == 0) {
    // ================================ producer ================================
    setmaxnreg_dec<Cfg::kProducerRegs>();
    if (tid == 0) ws_tma_produce<Cfg>(a, maps, smem_w, smem_h, bar_full, bar_empty, my_items, KT);
    return;  // the copies complete on the mbarriers, which the consumers wait for
  }

  // ================================ consumers ================================
  setmaxnreg_inc<Cfg::kConsumerRegs>();
  griddep_wait();  // the winners are zeroed (programmatic launch); overlaps the first stages' copies
  const int cw = wg - 1;  // consumer 0 or 1: local items j with j % 2 == cw
  const int ctid = tid & 127;
  const int lane = tid & 31, wi = (tid >> 5) & 3;
  const int g = lane >> 2, t4 = lane & 3;

  if constexpr (kPruned) {
    for (int i = ctid; i < kSlots * kNB; i += 128) win_s[cw][i / kNB][i % kNB] = 0ull;
    // (ordered before the first epilogue's reads by the params barrier there: the first item
    // always loads its chunk's parameters)
  }
  int64_t params_chunk = -1;

  float acc0[kAcc], acc1[kAcc];  // m64 blocks p = 0 and p = 1
#pragma unroll
  for (int e = 0; e < kAcc; ++e) acc0[e] = acc1[e] = 0.0f;  // defined before any wgmma

  constexpr int64_t kItemStep = 2;  // consumer c takes the local items j = c, c + 2, ...
  for (int64_t j = cw; j < my_items; j += kItemStep) {
    const int64_t item = blockIdx.x + j * gridDim.x;
    // First stage of the item and its slot / round parity.
    const int64_t p0 = j * KT;
    int slot = static_cast<int>(p0 % kStages);
    uint32_t phase = static_cast<uint32_t>((p0 / kStages) & 1);
    int prev_slot = slot;

    // The grid's best candidate of this thread's column so far (any CTA's published items): read
    // now, merged after the K loop, so the load's latency is hidden. A candidate that exists is a
    // valid pruning threshold wherever it was found, and with ~4 items per consumer at B = 128 the
    // consumer's own winners alone stay weak (B = 128 -5 %, B = 256 -12 % with this read).
    unsigned long long grid_best[kSlots];
#pragma unroll
    for (int s = 0; s < kSlots; ++s) grid_best[s] = 0ull;
    if constexpr (kPruned) {
      int64_t chunk0, vtile0;
      ws_item_coords<Cfg>(item, a, chunk0, vtile0);
      int64_t rows0, rows_end;
      ws_chunk_rows(chunk0, a, rows0, rows_end);
      const int64_t b = rows0 + ctid;
      const int samples = a.num_samples;
      if (ctid < kNB && b < rows_end) {
#pragma unroll
        for (int s = 0; s < kSlots; ++s)
          if (s < samples) grid_best[s] = ld_relaxed_u64(a.winners + b * samples + s);
      }
    }
    if (j >= 1) named_bar_sync(kTurnBarrier + cw, 256);  // item j - 1's wgmmas are all issued

    for (int kt = 0; kt < KT; ++kt) {
      mbar_wait(bar_full + 8 * slot, phase);
      fence_proxy_async_smem();
      const uint32_t sw = smem_w + slot * Cfg::kWStageBytes;
      const uint32_t sh = smem_h + slot * Cfg::kHStageBytes;
      ws_kslice_mma<Cfg, kF16>(acc0, acc1, sw, sh, kt > 0);
      wgmma_commit();
      // Last k-slice issued: every stage of this item has been waited for, so the other consumer
      // may start item j + 1 (its stages follow these in the ring).
      if (kt == KT - 1 && j + 1 < my_items)
        named_bar_arrive(kTurnBarrier + (1 - cw), 256);
      // The wgmmas of the previous k-slice have retired (at kt = 0 there is none in flight: the
      // previous item ended with wait_group 0): release its slot.
      wgmma_wait<1>();
      if (kt > 0) mbar_arrive(bar_empty + 8 * prev_slot);
      prev_slot = slot;
      ring_advance<kStages>(slot, phase);
    }
    wgmma_wait<0>();
    mbar_arrive(bar_empty + 8 * prev_slot);
    pin_registers(acc0);
    pin_registers(acc1);

    // ---------------- epilogue of one work item (one warpgroup) ----------------------------------
    int64_t chunk, vtile;
    ws_item_coords<Cfg>(item, a, chunk, vtile);
    int64_t b0, b_end;  // b_end - b0 = kNB but in the last chunk: ping-pong tiles keep chunk_cols = kNB
    ws_chunk_rows(chunk, a, b0, b_end);
    const int64_t v0 = vtile * kBV;
    // This thread's vocabulary quad, the one transpose_quad_lanes gathers for it.
    const int64_t vq = v0 + 64 * ((g & 3) >> 1) + 16 * wi + 8 * (g & 1) + 4 * (g >> 2);

    if constexpr (kPruned) {
#pragma unroll
      for (int s = 0; s < kSlots; ++s)
        if (grid_best[s] != 0ull) atomicMax(&win_s[cw][s][ctid], grid_best[s]);
    }
    if constexpr (kEpi != Epi::kStore) {
      if (chunk != params_chunk) {  // uniform over the consumer warpgroup
        named_bar_sync(kParamsBarrier + cw, 128);  // nobody still reads the previous chunk's
        stage_row_params(a, b0, ctid, 128, kNB, row_inv_t[cw], row_greedy[cw], row_seed[cw], row_offset[cw]);
        named_bar_sync(kParamsBarrier + cw, 128);
        params_chunk = chunk;
      }
    }

    float bias[4];
    load_bias_quad<kF16>(a.bias, vq, V, bias);

    // vocabulary vq + o with o = 2p + h: block p, accumulator row half h; column c = 2 nt + jj
    // of this thread is batch column n = 8 nt + 2 t4 + jj.
    {
      // The sampling epilogues rolled: group nt's accumulators are always at the front of acc0 /
      // acc1, the rest rotated down by 4 after each trip (compile-time register indices; the
      // rotation is 2 (kAcc - 4) register moves per trip). kStore's code is small: its unrolled
      // stores stay.
      constexpr bool kRoll = kEpi != Epi::kStore;
#pragma unroll
      for (int nt0 = 0; nt0 < (kRoll ? 1 : kNT); ++nt0) {
#pragma unroll 1
        for (int nt = nt0; nt < (kRoll ? kNT : nt0 + 1); ++nt) {
          const int e0 = kRoll ? 0 : nt0 * 4;
          float l[2][4];
#pragma unroll
          for (int jj = 0; jj < 2; ++jj) {
            quad_logits(l[jj], acc0, acc1, e0 + jj, bias, g);
          }
          if constexpr (kRoll) {
#pragma unroll
            for (int e = 0; e + 4 < kAcc; ++e) {
              acc0[e] = acc0[e + 4];
              acc1[e] = acc1[e + 4];
            }
          }
          if constexpr (kEpi == Epi::kStore)
            ws_store_group(a, l, nt, t4, b0, vq);
          else if constexpr (kPruned)
            ws_pruned_group<kEpi, kSlots, kNB>(a, l, nt, t4, b0, vq, row_inv_t[cw], row_greedy[cw], row_seed[cw],
                                               row_offset[cw], win_s[cw]);
          else
            ws_sampled_group(a, l, nt, t4, g, b0, vq, row_inv_t[cw], row_greedy[cw], row_seed[cw], row_offset[cw]);
        }
      }
    }

    // (no zeroing: the next item's first wgmmas overwrite the accumulators, scale-d = 0)

    if constexpr (kPruned)
      ws_flush_or_publish<Cfg, kItemStep, 128, kSlots>(a, win_s[cw], a.num_samples,
                                                       kParamsBarrier + cw, ctid, j, my_items, item, chunk, b0, b_end,
                                                       grid_best);
  }
#else
  __trap();  // sm_90a only
#endif
}

template <class Cfg, bool kF16, Epi kEpi>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    wgmma_ws_tma_kernel(const GemmArgs a, const __grid_constant__ WsTensorMaps maps) {
  wgmma_ws_body<Cfg, kF16, kEpi>(a, &maps);
}

}  // namespace detail
}  // namespace cuda
}  // namespace flashsample
