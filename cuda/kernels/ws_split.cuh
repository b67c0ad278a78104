// wgmma_split_kernel: the warp-specialized kernel with the sampling epilogue on warpgroups of its
// own (sm_90a): one sample per row (kSampleOne) at every batch size on compute capability 9.0
// (dispatch.cuh); wgmma_split_transformed_kernel the same with softcap, mask and listed tokens,
// wgmma_split_filtered_kernel with the filters' summaries and candidates.
//
// Why: in the ping-pong kernel (ws_pingpong.cuh) each consumer warpgroup runs its item's epilogue
// while the other runs the next K loop, so the tensor pipe is busy only if an epilogue fits under
// a K loop. At B >= 128 it did not (a cycle probe measured ~73 K cycles of epilogue against ~49 K
// of K loop an item at B = 128, ~62 K against ~42 K at B = 256): one warp per
// scheduler ran the epilogue's dependent chains (Philox, shuffles, shared loads) at ~6 cycles an
// instruction, and ~240 of its ~560 instructions a trip were bookkeeping of the accumulator layout
// (transposes, rotation, per-trip row parameters).
//
// CTA = 4 warpgroups (512 threads), 1 CTA per SM, persistent over the same items as the other
// kernels (item = (vocabulary tile of 128 rows, batch chunk of N columns), vtile-major, item =
// blockIdx.x + j·gridDim.x for the CTA's local items j = 0, 1, ...):
//   * warpgroup 0: the TMA producer of ws_pingpong.cuh (one thread, ws_tma_produce), the same ring;
//   * warpgroup 1: the MMA warpgroup: the K loop of every local item in turn (ws_kslice_mma, the
//     ping-pong consumer's k-slices), then the 128 x N fp32 accumulators into a logits buffer in
//     shared memory, column-major (column n at n·kLogitStride floats), and on to the next item;
//   * warpgroups 2 and 3: the epilogue, 8 warps. Warp w samples columns w, w + 8, w + 16, ..., four
//     at a time (two below N = 32, and in the filtered epilogue); lane l takes vocabulary rows
//     4 l .. 4 l + 3 of the tile (one 16-byte load, one Philox block), so every lane of a warp
//     shares the column's parameters and threshold and no accumulator is moved between lanes.
//     Running winners per column in shared memory (packed candidates raised with atomicMax),
//     merged with the grid's winners word before the item and published after it, exactly as the
//     ping-pong kernel does.
// The epilogue of item j runs while the MMA warpgroup runs the K loop of item j + 1: it only has to
// be faster than a K loop, with two warps per scheduler and ~half the instructions per value.
// The logits are the same fp32 sums as every other wgmma kernel's (same k16 steps in the same
// order into the same accumulators), the bias is added the same way, the candidates and the
// pruning are quads_update_pruned's: winners identical to the ping-pong kernel's.
//
// Synchronization, beyond the ring of ws_pingpong.cuh (full[] count 1 with expect-tx, empty[] count
// 128: only the MMA warpgroup consumes, in stage order, so every wait is at most one phase behind):
//   logits_full  (mbarrier, count 128): phase j completes when the MMA warpgroup has written item
//                j's logits (each thread arrives after its stores; arrive is a release, the
//                epilogue's wait an acquire, at CTA scope).
//   logits_empty (mbarrier, count 256): phase j completes when the epilogue threads have read item
//                j's logits. The MMA warpgroup writes item j >= 1 only after phase j - 1 (parity
//                (j - 1) & 1): phase j - 2 is complete (it waited for it before writing j - 1) and
//                phase j cannot be (item j is not written yet), so the parity wait is unambiguous;
//                the same argument holds for the epilogue's wait on logits_full phase j.
//   named barrier 1 (256 threads): the epilogue's own row-parameter reloads and chunk flushes.
// Deadlock freedom: the MMA warpgroup waits only for stages the producer fills unconditionally (it
// releases each after use) and for the epilogue of the previous item, which needs only that item's
// logits, already written. Every CTA runs griddepcontrol.wait in the epilogue threads before its
// first winner access (programmatic launch: the winners are zeroed by the previous grid).
#pragma once

#include "filter_epilogue.cuh"
#include "ws_pingpong.cuh"

namespace flashsample {
namespace cuda {
namespace detail {

// N batch columns per chunk (the wgmma N), STAGES ring stages of (W 128 x 64 + H N x 64) bf16.
// SAMPLE_COLS_PER_TRIP columns per trip of the kSampleOne epilogue (quads_update_pruned<K>: that
// many Philox chains interleaved); the filtered epilogue takes 1, whose appends and k-th searches
// then run alone (H100, qwen3-0.6b B = 64: top-k 50 +54 % over plain, +72 % at 2), and 2 when it
// writes summaries only, whose warp reductions overlap (logprobs alone +20 %, +29 % at 1).
// kSampleOne only: the other epilogues (kStore for the reference sampler, kSampleMany) and shapes
// whose tensor maps cannot be encoded run PingPong, the ping-pong tile of the same N (of 128
// columns for N = 96).
template <int N, int STAGES, int SAMPLE_COLS_PER_TRIP = 2>
struct WsSplitTile {
  static constexpr bool kTma = true;
  static constexpr int kBV = 128;  // vocabulary rows per item (two m64 blocks)
  static constexpr int kNB = N;
  static constexpr int kBK = 64;
  static constexpr int kAcc = N / 2;  // fp32 accumulators per thread per m64 block
  static constexpr int kStages = STAGES;
  static constexpr int kSampleColsPerTrip = SAMPLE_COLS_PER_TRIP;
  static constexpr int kFilteredColsPerTrip = 1;
  static constexpr int kSummaryColsPerTrip = 2;
  static constexpr int kEpilogueWarps = 8;
  // The batch spread evenly over the chunks (B = 200: 100 + 100 columns, not 128 + 72): unequal
  // chunks cost 14-19 % more at B = 160 / 200 / 300 (H100, llama3-8b B = 160: 471 -> 390 µs).
  static constexpr bool kEvenChunks = true;
  static constexpr int kThreads = 128 * 4;  // producer, MMA, 2 epilogue warpgroups
  static constexpr int kWStageBytes = kBV * 128;
  static constexpr int kHStageBytes = kNB * 128;
  static constexpr int kRingBytes = STAGES * (kWStageBytes + kHStageBytes);
  // 4 floats of padding per column: the MMA warpgroup's stores (column 8 nt + 2 t4 + jj, row
  // 16 w + 8 h + g) hit bank 8 t4 + g + const, 32 different banks per warp store
  static constexpr int kLogitStride = kBV + 4;
  static constexpr int kLogitBytes = kNB * kLogitStride * 4;
  // ring (1024-byte aligned) + logits buffer + full[], empty[], logits_full, logits_empty + 1024
  // for aligning the dynamic base
  static constexpr int kSmemBytes = kRingBytes + kLogitBytes + (2 * STAGES + 2) * 8 + 1024;
  // static shared memory: the row parameters of the current chunk and the running winners
  static constexpr int kStaticSmemBytes = kNB * (4 + 8 + 8 + 1) + kNB * 8;
  // Launch: 512 threads x 128 registers = 65536 (__launch_bounds__(512, 1)). The classic split: the
  // producer gives 88 per thread back, the MMA warpgroup takes them (128 accumulators + descriptors
  // and loop state), the epilogue warps keep the launch's 128: 40·128 + 216·128 + 128·256 = 65536.
  static constexpr int kProducerRegs = 40;
  static constexpr int kMmaRegs = 216;
  // The lean split, for the filtered epilogue and the sampling one at 4 columns a trip (both spill
  // at 128 registers): the producer needs few for its one TMA thread, and below N = 128 the MMA
  // warpgroup holds only N accumulators, so the epilogue warps get what the other two do not need
  // (168 / 152 / 136 at N <= 64 / 96 / 128).
  static constexpr bool kLeanSampleSplit = SAMPLE_COLS_PER_TRIP > 2;
  static constexpr int kMmaRegsLean = N <= 64 ? 152 : N <= 96 ? 184 : kMmaRegs;
  static constexpr int kProducerRegsLean = 24;  // one thread issuing TMA: setmaxnreg's minimum
  static constexpr int kEpilogueRegsLean = (65536 - kProducerRegsLean * 128 - kMmaRegsLean * 128) / 256 / 8 * 8;
  // (N = 96 has no ping-pong tile of its own: its other epilogues run the 128-column one)
  using PingPong = WsTileT<(N > 64 ? 128 : N)>;
  static_assert(N % 16 == 0 && N >= 16 && N <= 128, "wgmma N");
  static_assert(N % (8 * SAMPLE_COLS_PER_TRIP) == 0 && N % (8 * kFilteredColsPerTrip) == 0 &&
                    N % (8 * kSummaryColsPerTrip) == 0,
                "every epilogue warp takes N / 8 columns, a trip's columns at a time");
  static_assert(STAGES >= 2, "ring");
  static_assert(kHStageBytes % 1024 == 0, "stage slots stay 1024-byte aligned (SW128)");
  static_assert(kSmemBytes + static_smem_padded(kStaticSmemBytes) <= 227 * 1024, "sm_90 shared memory per block");
  static_assert(kProducerRegs * 128 + kMmaRegs * 128 + 128 * 256 <= 65536, "setmaxnreg split");
  static_assert(kProducerRegs % 8 == 0 && kMmaRegs % 8 == 0, "setmaxnreg granularity");
  static_assert(kProducerRegsLean * 128 + kMmaRegsLean * 128 + kEpilogueRegsLean * 256 <= 65536 &&
                    kMmaRegsLean % 8 == 0 && kEpilogueRegsLean >= 128,
                "setmaxnreg split (lean)");
};

// The kSampleOne tiles on compute capability 9.0: one chunk of the smallest N >= B up to 64, chunks
// of N = 96 or 128 above (prefer_96_column_chunks); the ring as deep as shared memory allows beside
// the logits buffer. Against the ping-pong tiles of the same N (llama3-8b, H200, bench CLI, old and
// new builds alternated): B = 1 / 16 / 32 / 64 249.6 / 250.2 / 251.5 / 264.0 -> 247.4 / 248.4 /
// 249.6 / 256.3 us; B = 128 / 256 339 / 538 -> 304 / 491 us (N = 128: 4 stages of 32 KB beside
// 66 KB of logits; 3 stages 16 % slower at B = 128). Four columns a trip from N = 32 (twice the
// Philox chains in flight per warp; the epilogue is latency-bound, ~8.5 cycles an instruction):
// qwen3-0.6b B = 64 / 96 / 128 / 256 94.6 / 123.5 / 154.4 / 266.0 -> 90.6 / 115.2 / 147.4 / 257.8
// us, llama3-8b B = 128 / 256 303.0 / 490.0 -> 290.5 / 460.9 (bench CLI, builds alternated).
using WsSplitTile16 = WsSplitTile<16, 11>;
using WsSplitTile32 = WsSplitTile<32, 9, 4>;
using WsSplitTile64 = WsSplitTile<64, 7, 4>;
// N = 96 (m64n96k16): 6 stages of 28 KB beside a 50 KB buffer, for the batches 96-column chunks
// cover with less padding than 128-column ones (llama3-8b B = 96 / 192 312 / 612 -> 270 / 405 us
// against 128-column chunks; bench CLI, old and new builds alternated).
using WsSplitTile96 = WsSplitTile<96, 6, 4>;
using WsSplitTile128 = WsSplitTile<128, 4, 4>;

constexpr int kSplitEpilogueBarrier = 1;

// A lane's quad of raw logits (vocabulary vq .. vq + 3) into row b of the extra pass's logits. Out
// of line: the filtered epilogue's trips keep their registers. A top-p row stores them in case its
// nucleus outgrows the candidates, and few rows do: those stores go evict-first (st.global.cs), so
// they do not push the call's other lines out of L2 (top-p 0.9, llama3-8b, B = 64: +44 -> +36 % over
// plain). Rows that every call reads back (read_back: logprobsMode 'raw') stay in L2 (st.global.cg).
static __device__ __noinline__ void store_row_logits(float* logits, int64_t b, int64_t vq, int64_t V, float4 l,
                                                     bool read_back) {
  float* const row = logits + b * V;
  if (vq + 3 < V && (V & 3) == 0) {
    float4* const at = reinterpret_cast<float4*>(row + vq);
    if (read_back) {
      __stcg(at, l);
    } else {
      __stcs(at, l);
    }
  } else {  // rows not 16-byte aligned (V % 4 != 0) and the last quad: a value at a time, same policy
    const float v4[4] = {l.x, l.y, l.z, l.w};
#pragma unroll
    for (int o = 0; o < 4; ++o) {
      if (vq + o >= V) break;
      if (read_back) {
        __stcg(row + vq + o, v4[o]);
      } else {
        __stcs(row + vq + o, v4[o]);
      }
    }
  }
}

// The filtered epilogue's per-column state, in static shared memory of the filtered kernels only.
template <int N>
struct FilterColumns {
  ColumnState state[N];
  FilterRow row[N];
};
template <int N>
__device__ __forceinline__ FilterColumns<N>* filter_columns_smem() {
  __shared__ FilterColumns<N> s;
  return &s;
}

// kSampleTransformed: the listed marks and allowed words of an item's columns, loaded one item
// ahead: a (row, tile)'s words are read once a call, from DRAM, and loaded in the trips each cost
// the trip that round trip (A/B, H200: the mask alone +33 -> +6 % over plain at qwen3-0.6b B = 64,
// 512 listed tokens a row +48 -> +30 %). Lane l holds
// slots s = l + 32 k: the warp's column c = s / 4 (batch column ew + 8 c), word s % 4 of the tile.
template <int kSlots>
struct TransformWords {
  uint2 marks[kSlots];
  uint32_t allowed[kSlots];
};

template <class Cfg, int kSlots>
__device__ __forceinline__ TransformWords<kSlots> load_transform_words(const GemmArgs& a, const FilterArgs& f,
                                                                      int64_t item, int ew, int lane) {
  TransformWords<kSlots> t;
  int64_t chunk, vtile;
  ws_item_coords<Cfg>(item, a, chunk, vtile);
  int64_t b0, b_end;
  ws_chunk_rows(chunk, a, b0, b_end);
#pragma unroll
  for (int k = 0; k < kSlots; ++k) {
    const int s = lane + 32 * k, c = s >> 2;
    const int64_t b = b0 + ew + 8 * c, word = vtile * (Cfg::kBV / 32) + (s & 3);
    const bool in = c < Cfg::kNB / 8 && b < b_end && word < f.allowed_words;
    const int64_t at = b * f.allowed_words + word;
    t.marks[k] = f.listed != nullptr && in ? f.listed[at] : make_uint2(0u, 0u);
    t.allowed[k] = f.allowed != nullptr && in ? f.allowed[at] : 0u;
  }
  return t;
}

// The words of the lane's quad in the warp's column c (held by the lane of slot 4 c + lane / 8).
template <int kSlots>
__device__ __forceinline__ void transform_words_of(const FilterArgs& f, const TransformWords<kSlots>& t, int c, int lane,
                                                   uint2& marks, uint32_t& allowed) {
  const int s = 4 * c + (lane >> 3), k = s >> 5, from = s & 31;
  marks = make_uint2(0u, 0u);
  allowed = ~0u;
  if (f.listed != nullptr) {
    marks.x = __shfl_sync(0xffffffffu, kSlots > 1 && k ? t.marks[kSlots - 1].x : t.marks[0].x, from);
    marks.y = __shfl_sync(0xffffffffu, kSlots > 1 && k ? t.marks[kSlots - 1].y : t.marks[0].y, from);
  }
  if (f.allowed != nullptr) allowed = __shfl_sync(0xffffffffu, kSlots > 1 && k ? t.allowed[kSlots - 1] : t.allowed[0], from);
}

// kSampleTransformed's transforms of a lane's quad of raw logits l (SEMANTICS §2, steps 1-2d):
// softcap, the listed tokens' steps (or, with a deferred_listed_table, their values stored and NaN
// here), then NaN where the mask disallows; marks and allowed are the quad's words (zero past the
// vocabulary and in padding columns, whose values quads_update_pruned drops). -Inf (a banned token)
// makes no candidate.
__device__ __forceinline__ void transform_quad(const FilterArgs& f, int64_t vq, uint2 marks, uint32_t allowed,
                                               float (&l)[4]) {
  if (f.softcap > 0.0f) {  // one uniform test a column
#pragma unroll
    for (int o = 0; o < 4; ++o) l[o] = softcap_logit(l[o], f.softcap);
  }
  if ((marks.x >> (vq & 31)) & 0xfu) {  // rare: out of line, so it costs the common path no registers
    const float4 q4 = epilogue_listed_quad(f.listed_table, marks, vq, make_float4(l[0], l[1], l[2], l[3]));
    l[0] = q4.x;
    l[1] = q4.y;
    l[2] = q4.z;
    l[3] = q4.w;
  }
  allowed >>= (vq & 31);
#pragma unroll
  for (int o = 0; o < 4; ++o)
    if (((allowed >> o) & 1u) == 0u) l[o] = NAN;
}

// kEpi: kSampleOne (the winners word of each row), kSampleTransformed (the same on the transformed
// logits: transform_quad, through `f`), or kSampleFiltered / kSampleFilteredWords (the same
// winners, plus filter_epilogue.cuh's tile summaries and candidates, through `f`), or
// kSampleFilteredSummaries (the same with summaries only: no row of the call gathers candidates),
// or kSampleFilteredNoTopP (no top-p row and no stored logits: no mass bound, no row stores).
template <class Cfg, bool kF16, Epi kEpi>
__device__ __forceinline__ void wgmma_split_body(const GemmArgs& a, const WsTensorMaps* maps, const FilterArgs& f) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr bool kFiltered = kEpi == Epi::kSampleFiltered || kEpi == Epi::kSampleFilteredWords ||
                             kEpi == Epi::kSampleFilteredSummaries || kEpi == Epi::kSampleFilteredNoTopP;
  constexpr bool kTopP = kEpi != Epi::kSampleFilteredNoTopP;  // (kFiltered) top-p rows and row stores
  constexpr bool kGathers = kEpi != Epi::kSampleFilteredSummaries;  // (kFiltered) rows may append candidates
  constexpr bool kTransformed = kEpi == Epi::kSampleTransformed;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  constexpr int kNB = Cfg::kNB, kAcc = Cfg::kAcc, kLS = Cfg::kLogitStride;
  // Two columns a trip keep the transformed epilogue at N = 96 and 128 unspilled (four spilled 20 /
  // 40 bytes at N = 128), and its softcap and lists cost 2-10 points less over plain on small heads.
  constexpr int kK = kTransformed && kNB > 64 ? 2
                     : !kFiltered ? Cfg::kSampleColsPerTrip
                     : kGathers   ? Cfg::kFilteredColsPerTrip
                                  : Cfg::kSummaryColsPerTrip;
  constexpr bool kLean = kFiltered || kTransformed || Cfg::kLeanSampleSplit;
  const uint32_t smem_base = smem_u32(smem_raw);
  const uint32_t smem_w = (smem_base + 1023u) & ~1023u;
  const uint32_t smem_h = smem_w + Cfg::kStages * Cfg::kWStageBytes;
  float* const logits_s = reinterpret_cast<float*>(smem_raw + (smem_w - smem_base) + Cfg::kRingBytes);
  const uint32_t bar_full = smem_w + Cfg::kRingBytes + Cfg::kLogitBytes;  // full[s] at bar_full + 8 s
  const uint32_t bar_empty = bar_full + 8 * Cfg::kStages;
  const uint32_t bar_logits_full = bar_empty + 8 * Cfg::kStages;
  const uint32_t bar_logits_empty = bar_logits_full + 8;

  __shared__ float row_inv_t[kNB];
  __shared__ unsigned long long row_seed[kNB], row_offset[kNB];
  __shared__ uint8_t row_greedy[kNB];
  __shared__ unsigned long long win_packed_s[kNB];
  // kFiltered: each column's threshold mode and this CTA's running statistics of its row (the
  // column's warp alone reads and writes them between parameter reloads)
  FilterColumns<kNB>* filt = nullptr;
  if constexpr (kFiltered) filt = filter_columns_smem<kNB>();
  static_assert(!kFiltered || Cfg::kSmemBytes + static_smem_padded(Cfg::kStaticSmemBytes + sizeof(FilterColumns<kNB>)) <=
                                  227 * 1024,
                "sm_90 shared memory per block (filtered epilogue)");

  const int tid = threadIdx.x;
  const int wg = tid >> 7;
  if (tid == 0) {
    for (int s = 0; s < Cfg::kStages; ++s) {
      mbar_init(bar_full + 8 * s, 1);      // the producer's expect-tx arrive
      mbar_init(bar_empty + 8 * s, 128);   // every MMA thread, after its wgmmas read the stage
    }
    mbar_init(bar_logits_full, 128);
    mbar_init(bar_logits_empty, 128 * 2);
    mbar_init_fence();
  }
  __syncthreads();  // the only CTA-wide barrier

  const int64_t V = a.vocab, B = a.batch;
  const int KT = static_cast<int>((a.dim + Cfg::kBK - 1) / Cfg::kBK);
  const int64_t total_items = a.num_vtiles * a.num_chunks;
  const int64_t my_items =
      blockIdx.x < total_items ? (total_items - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
  if (tid == 0) griddep_launch_dependents();
  if (KT == 0 || my_items == 0) {  // CTA-uniform: nothing is produced
    griddep_wait();
    return;
  }

  if (wg == 0) {
    // ================================ producer ================================
    setmaxnreg_dec<kLean ? Cfg::kProducerRegsLean : Cfg::kProducerRegs>();
    if (tid == 0) ws_tma_produce<Cfg>(a, maps, smem_w, smem_h, bar_full, bar_empty, my_items, KT);
    return;
  }

  if (wg == 1) {
    // ================================ MMA ================================
    setmaxnreg_inc<kLean ? Cfg::kMmaRegsLean : Cfg::kMmaRegs>();
    const int lane = tid & 31, wi = (tid >> 5) & 3;
    const int g = lane >> 2, t4 = lane & 3;
    float acc0[kAcc], acc1[kAcc];
#pragma unroll
    for (int e = 0; e < kAcc; ++e) acc0[e] = acc1[e] = 0.0f;
    int slot = 0, prev_slot = 0;
    uint32_t phase = 0;
    // this thread's logits: accumulator nt·4 + 2 h + jj of m64 block p is row 64 p + 16 wi + 8 h + g,
    // column 8 nt + 2 t4 + jj (the wgmma D fragment)
    float* const my_logits = logits_s + (2 * t4) * kLS + 16 * wi + g;
    for (int64_t j = 0; j < my_items; ++j) {
      for (int kt = 0; kt < KT; ++kt) {
        mbar_wait(bar_full + 8 * slot, phase);
        fence_proxy_async_smem();
        ws_kslice_mma<Cfg, kF16>(acc0, acc1, smem_w + slot * Cfg::kWStageBytes, smem_h + slot * Cfg::kHStageBytes,
                                 kt > 0);
        wgmma_commit();
        wgmma_wait<1>();  // the previous k-slice's wgmmas have retired: release its stage
        if (kt > 0) mbar_arrive(bar_empty + 8 * prev_slot);
        prev_slot = slot;
        ring_advance<Cfg::kStages>(slot, phase);
      }
      wgmma_wait<0>();
      mbar_arrive(bar_empty + 8 * prev_slot);
      pin_registers(acc0);
      pin_registers(acc1);
      if (j >= 1) mbar_wait(bar_logits_empty, static_cast<uint32_t>((j - 1) & 1));  // item j - 1 read
#pragma unroll
      for (int nt = 0; nt < kNB / 8; ++nt)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int jj = 0; jj < 2; ++jj) {
            float* const dst = my_logits + (8 * nt + jj) * kLS + 8 * h;
            dst[0] = acc0[nt * 4 + 2 * h + jj];
            dst[64] = acc1[nt * 4 + 2 * h + jj];
          }
      mbar_arrive(bar_logits_full);
    }
    return;
  }

  // ================================ epilogue ================================
  if constexpr (kLean && Cfg::kEpilogueRegsLean > 128) setmaxnreg_inc<Cfg::kEpilogueRegsLean>();
  griddep_wait();  // the winners are zeroed (programmatic launch)
  const int et = tid - 256;  // 0..255
  const int ew = et >> 5, lane = et & 31;
  for (int n = et; n < kNB; n += 256) win_packed_s[n] = 0ull;
  // (ordered before the first trip's reads by the parameter barrier: the first item loads them)
  int64_t params_chunk = -1;
  // kFiltered: this CTA's slice of its rows' candidates (CTA 0 publishes their size for the decision)
  CtaSlice slice{0, 0u};
  if constexpr (kFiltered) {
    slice = cta_slice(f, a.num_chunks);
    if (blockIdx.x == 0 && et == 0) *f.slice_cap = slice.cap;
  }
  // kFiltered: bit i set when this warp's column ew + 8 i stores this item's raw logits
  // (FilterRow::dense_gap, then row_looks_wide), a register test in the trips
  uint32_t dense_columns = 0u;
  // kTransformed, kSampleFilteredWords: this item's words (load_transform_words), the next item's
  // loaded during its trips
  constexpr bool kWords = kTransformed || kEpi == Epi::kSampleFilteredWords;
  constexpr int kWordSlots = kWords && kNB > 64 ? 2 : 1;
  // The transformed epilogue at N > 64 loads an item's words at its start, where they wait beside
  // the logits: two items' words spilled its 136 registers at N = 128 (52 bytes stored, 80 loaded).
  constexpr bool kWordsAhead = kWords && !(kTransformed && kNB > 64);
  TransformWords<kWordSlots> words{}, next_words{};
  if constexpr (kWordsAhead) next_words = load_transform_words<Cfg, kWordSlots>(a, f, blockIdx.x, ew, lane);
  for (int64_t j = 0; j < my_items; ++j) {
    const int64_t item = blockIdx.x + j * gridDim.x;
    if constexpr (kWordsAhead) {
      words = next_words;
      if (j + 1 < my_items) next_words = load_transform_words<Cfg, kWordSlots>(a, f, item + gridDim.x, ew, lane);
    } else if constexpr (kWords) {
      words = load_transform_words<Cfg, kWordSlots>(a, f, item, ew, lane);
    }
    int64_t chunk, vtile;
    ws_item_coords<Cfg>(item, a, chunk, vtile);
    // this chunk's rows b0 .. B_end - 1 (columns past them are padding, as are rows past the batch)
    int64_t b0, B_end;
    ws_chunk_rows(chunk, a, b0, B_end);
    const int64_t v0 = vtile * Cfg::kBV;
    const int64_t vq = v0 + 4 * lane;  // this lane's vocabulary quad
    const bool tile_whole = v0 + Cfg::kBV <= V;  // no quad of the tile crosses the vocabulary's end
    // The grid's best candidate of column et so far: a valid threshold wherever it was found.
    unsigned long long grid_best = 0ull;
    if (et < kNB && b0 + et < B_end) grid_best = ld_relaxed_u64(a.winners + b0 + et);
    // the grid's largest θ and highest histogram bucket of each of this warp's columns (lane i:
    // column ew + 8 i), for the item's thresholds
    uint32_t theta_pref = 0u, top_pref = 0u;
    if constexpr (kFiltered && kGathers) {
      const int64_t b = b0 + ew + 8 * lane;
      if (lane < kNB / 8 && b < B_end) {
        theta_pref = *reinterpret_cast<volatile const uint32_t*>(f.theta_used + b);
        top_pref = *reinterpret_cast<volatile const uint32_t*>(f.top_bucket + b);
      }
    }
    float bias[4];
    load_bias_quad<kF16>(a.bias, vq, V, bias);
    // kFiltered: which of this lane's four values lie inside the vocabulary (bit o: vq + o < V),
    // once an item, so the per-value tests below need no 64-bit compare
    const uint32_t in_vocab = vq + 4 <= V ? 0xfu : vq >= V ? 0u : (1u << static_cast<int>(V - vq)) - 1u;
    const bool chunk_start = chunk != params_chunk;
    if (chunk_start) {  // uniform over the epilogue threads
      named_bar_sync(kSplitEpilogueBarrier, 256);  // nobody still reads the previous chunk's
      stage_row_params(a, b0, et, 256, kNB, row_inv_t, row_greedy, row_seed, row_offset);
      if constexpr (kFiltered) {
        for (int n = et; n < kNB; n += 256) {
          const int64_t b = b0 + n;
          filt->row[n] = b < B_end ? filter_row(f, b, row_greedy[n] != 0) : FilterRow{kThetaNone, 0, 0.0f, 0, 0, 0, 0.0f};
          // (a CTA that comes back to a chunk goes on filling its slices of the chunk's rows)
          const uint32_t fill = b < B_end && slice.cap != 0u ? slice_fills(f, b)[slice.index] : 0u;
          filt->state[n] = ColumnState{-INFINITY, 0.0f, -INFINITY, fill};
        }
      }
      named_bar_sync(kSplitEpilogueBarrier, 256);
      params_chunk = chunk;
    }
    if constexpr (kFiltered) {
      if (kTopP && f.row_logits != nullptr) {
        const int n = ew + 8 * lane;
        const float gap = lane < kNB / 8 ? filt->row[n].dense_gap : 0.0f;
        const bool dense = gap > 0.0f &&
                           (f.store_all || chunk_start || row_looks_wide(theta_pref, top_pref, row_inv_t[n], gap));
        dense_columns = __ballot_sync(0xffffffffu, dense);
      }
    }
    mbar_wait(bar_logits_full, static_cast<uint32_t>(j & 1));
    if (grid_best != 0ull) atomicMax(&win_packed_s[et], grid_best);

    // A shard's global ids (noise and tokens; 0 unsharded). The filtered epilogue's candidates and
    // tile summaries keep local ids: filtered_columns takes the base to map its winners back.
    const int64_t base = a.vocab_base;
#pragma unroll 1
    for (int trip = 0; trip < kNB / (8 * kK); ++trip) {
      float l[kK][4], thr[kK], bs[kK];
      uint32_t bk[kK];
      unsigned long long thr_packed[kK];
      RowParams rp[kK];
      int64_t vend[kK];
      int nn[kK];
#pragma unroll
      for (int jj = 0; jj < kK; ++jj) {
        const int n = ew + 8 * (kK * trip + jj);
        const int64_t b = b0 + n;
        nn[jj] = n;
        vend[jj] = b < B_end ? V + base : 0;
        const float4 q = *reinterpret_cast<const float4*>(logits_s + n * kLS + 4 * lane);
        l[jj][0] = q.x + bias[0];
        l[jj][1] = q.y + bias[1];
        l[jj][2] = q.z + bias[2];
        l[jj][3] = q.w + bias[3];
        if constexpr (kTransformed) {
          uint2 marks;
          uint32_t allowed;
          transform_words_of(f, words, kK * trip + jj, lane, marks, allowed);
          transform_quad(f, vq, marks, allowed, l[jj]);
        }
        if constexpr (kFiltered) {
          if ((dense_columns >> (kK * trip + jj)) & 1u) {
            store_row_logits(f.row_logits, b, vq, V, make_float4(l[jj][0], l[jj][1], l[jj][2], l[jj][3]),
                             f.store_all != 0);
            if (lane == 0 && f.stored_tiles != nullptr) f.stored_tiles[b * f.num_vtiles + vtile] = 1u;
          }
          // the values that can be drawn: softcap, the listed tokens' steps, then NaN for masked,
          // NaN, -Inf and past the vocabulary (listed.cuh's candidate_value, a quad at a time)
          // (kSampleFiltered: no list and no mask, so every quad is allowed and unmarked)
          uint2 marks = make_uint2(0u, 0u);
          uint32_t allowed = in_vocab;
          if constexpr (kWords) {
            transform_words_of(f, words, kK * trip + jj, lane, marks, allowed);
            allowed = (allowed >> (vq & 31)) & in_vocab;
          }
          if (f.softcap > 0.0f) {  // one uniform test a column
#pragma unroll
            for (int o = 0; o < 4; ++o) l[jj][o] = softcap_logit(l[jj][o], f.softcap);
          }
          if (f.raw_tiles != nullptr)  // logprobsMode 'raw': the raw values, before the lists and the mask
            raw_tile_stats(f.raw_tiles + b * f.num_vtiles + vtile, make_float4(l[jj][0], l[jj][1], l[jj][2], l[jj][3]),
                           in_vocab, b < B_end);
          if ((marks.x >> (vq & 31)) & 0xfu) {  // rare: out of line, so it costs the common path no registers
            const float4 q4 = apply_listed_quad(f.listed_table, marks, vq, make_float4(l[jj][0], l[jj][1], l[jj][2], l[jj][3]));
            l[jj][0] = q4.x;
            l[jj][1] = q4.y;
            l[jj][2] = q4.z;
            l[jj][3] = q4.w;
          }
#pragma unroll
          for (int o = 0; o < 4; ++o) {
            const float x = l[jj][o];
            l[jj][o] = ((allowed >> o) & 1u) == 0u || x == -INFINITY ? NAN : x;
          }
          // a row the decision draws: no Gumbel here, except in a quad that holds a +Inf value
          // (the +Inf tier beats every finite candidate, so the quad's others cannot win)
          if (filt->row[n].drawn_by_decision && l[jj][0] != INFINITY && l[jj][1] != INFINITY &&
              l[jj][2] != INFINITY && l[jj][3] != INFINITY)
            vend[jj] = 0;
        }
        rp[jj] = staged_row_params(a, row_inv_t, row_greedy, row_seed, row_offset, n, b);
        // Threshold: the column's running winner (a real candidate of the row, or -Inf).
        thr_packed[jj] = ld_relaxed_shared_u64(&win_packed_s[n]);
        thr[jj] = packed_score(thr_packed[jj]);
        bs[jj] = -INFINITY;
        bk[jj] = kNoToken;
      }
      // the last trip's loads are done: the MMA warpgroup may overwrite the buffer
      if (trip == kNB / (8 * kK) - 1) mbar_arrive(bar_logits_empty);
      quads_update_pruned<kK, kFiltered>(l, rp, 0u, vq + base, vend, tile_whole, thr, bs, bk);
#pragma unroll
      for (int jj = 0; jj < kK; ++jj)
        if (bk[jj] != kNoToken) {
          const unsigned long long c = pack_candidate(bs[jj], bk[jj]);
          if (c > thr_packed[jj]) atomicMax(&win_packed_s[nn[jj]], c);
        }
      if constexpr (kFiltered) {
        int64_t rows[kK];
        bool live[kK], any_live = false;
        float inv_t[kK], grid_theta[kK];
        int grid_top[kK];
        FilterRow fr[kK];
        ColumnState* st[kK];
#pragma unroll
        for (int jj = 0; jj < kK; ++jj) {
          const int n = nn[jj];
          const uint32_t g = __shfl_sync(0xffffffffu, theta_pref, kK * trip + jj);
          rows[jj] = b0 + n;
          fr[jj] = filt->row[n];
          live[jj] = b0 + n < B_end && fr[jj].stats;  // warp-uniform: one column per warp
          any_live |= live[jj];
          inv_t[jj] = rp[jj].inv_temperature;
          grid_theta[jj] = g == 0u ? -INFINITY : from_ordered_bits(g);
          grid_top[jj] = static_cast<int>(__shfl_sync(0xffffffffu, top_pref, kK * trip + jj)) - 1;
          st[jj] = &filt->state[n];
        }
        // rows the winner alone decides (no filter, no logprobs) take no summaries: unfiltered rows
        // in a filter-capable sampler then cost what plain sampling does, but for the decision
        if (any_live)
          filtered_columns<kK, kGathers, kTopP>(f, rows, live, vtile, vq, base, V, l, inv_t, bs, bk, fr, grid_theta, grid_top, slice, st);
      }
    }

    ws_flush_or_publish<Cfg, 1, 256>(a, win_packed_s, kSplitEpilogueBarrier, et, j, my_items, item, chunk, b0, B_end,
                                     grid_best);
  }
#else
  __trap();  // sm_90a only
#endif
}

template <class Cfg, bool kF16>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    wgmma_split_kernel(const GemmArgs a, const __grid_constant__ WsTensorMaps maps) {
  wgmma_split_body<Cfg, kF16, Epi::kSampleOne>(a, &maps, FilterArgs{});
}

template <class Cfg, bool kF16>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    wgmma_split_transformed_kernel(const GemmArgs a, const __grid_constant__ WsTensorMaps maps,
                                   const __grid_constant__ FilterArgs f) {
  wgmma_split_body<Cfg, kF16, Epi::kSampleTransformed>(a, &maps, f);
}

template <class Cfg, bool kF16, Epi kEpi>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    wgmma_split_filtered_kernel(const GemmArgs a, const __grid_constant__ WsTensorMaps maps,
                                const __grid_constant__ FilterArgs f) {
  wgmma_split_body<Cfg, kF16, kEpi>(a, &maps, f);
}

}  // namespace detail
}  // namespace cuda
}  // namespace flashsample
