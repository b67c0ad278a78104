// Standalone harness for the CUDA kernels (llm.c dev/cuda style): checks the fused sampler and the
// reference against a CPU implementation (float64 logits from the stored operand values, the same
// noise.h on the host), then times them on the llama3-8b LM head. Build and run: cuda/harness/run.sh
//
// Exits on a CUDA error (fine in a harness; library code never does).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "../gemm_dispatch.cuh"
#include "../launchers.h"
#include "../noise.h"
#include "../params.h"
#include "../wgmma_ws.cuh"

using namespace flashsample;

#define CK(call)                                                                           \
  do {                                                                                     \
    cudaError_t e_ = (call);                                                               \
    if (e_ != cudaSuccess) {                                                               \
      fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorName(e_), __FILE__, __LINE__, \
              cudaGetErrorString(e_));                                                     \
      exit(1);                                                                             \
    }                                                                                      \
  } while (0)

static int g_threads = 16;

static void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  const int nt = static_cast<int>(std::min<int64_t>(g_threads, std::max<int64_t>(n, 1)));
  std::vector<std::thread> ts;
  for (int t = 0; t < nt; ++t) {
    const int64_t lo = n * t / nt, hi = n * (t + 1) / nt;
    ts.emplace_back([=, &fn] { fn(lo, hi); });
  }
  for (auto& t : ts) t.join();
}

// ---- device-side input generation (hash of the index: fast, reproducible) ----------------------
__device__ __forceinline__ uint64_t splitmix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// kind 0: approx N(0, scale^2) (sum of 4 uniforms); kind 1: integer in [-2, 2].
__global__ void fill_kernel(void* out, int64_t n, DType dt, uint64_t seed, float scale, int kind) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const uint64_t h = splitmix(seed * 0x100000001B3ull + i);
    float x;
    if (kind == 1) {
      x = static_cast<float>(static_cast<int>(h % 5) - 2);
    } else {
      float s = 0.0f;
      for (int j = 0; j < 4; ++j) s += static_cast<float>((h >> (16 * j)) & 0xffff) * (1.0f / 65536.0f);
      x = (s - 2.0f) * 1.7320508f * scale;
    }
    if (dt == DType::kF32) static_cast<float*>(out)[i] = x;
    else if (dt == DType::kF16) static_cast<__half*>(out)[i] = __float2half_rn(x);
    else static_cast<__nv_bfloat16*>(out)[i] = __float2bfloat16_rn(x);
  }
}

static void fill(void* d, int64_t n, DType dt, uint64_t seed, float scale, int kind) {
  fill_kernel<<<1024, 256>>>(d, n, dt, seed, scale, kind);
  CK(cudaGetLastError());
}

static float half_bits_to_float(uint16_t b) {
  __half_raw r;
  r.x = b;
  return __half2float(__half(r));
}

// Host copy of a device array as floats (the exact stored values).
static std::vector<float> to_host_floats(const void* d, int64_t n, DType dt) {
  std::vector<float> out(n);
  if (dt == DType::kF32) {
    CK(cudaMemcpy(out.data(), d, n * 4, cudaMemcpyDeviceToHost));
    return out;
  }
  std::vector<uint16_t> raw(n);
  CK(cudaMemcpy(raw.data(), d, n * 2, cudaMemcpyDeviceToHost));
  parallel_for(n, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      if (dt == DType::kBF16) {
        const uint32_t bits = static_cast<uint32_t>(raw[i]) << 16;
        memcpy(&out[i], &bits, 4);
      } else {
        out[i] = half_bits_to_float(raw[i]);
      }
    }
  });
  return out;
}

// ---- CPU reference -----------------------------------------------------------------------------
struct CpuRow {
  std::vector<float> logit;  // float(float64 logit), as the GPU's fp32 logits would be
};

static CpuRow cpu_logits(const float* h, const float* w, const float* bias, int64_t V, int64_t D) {
  CpuRow r;
  r.logit.resize(V);
  parallel_for(V, [&](int64_t lo, int64_t hi) {
    for (int64_t v = lo; v < hi; ++v) {
      const float* wr = w + v * D;
      double acc = 0.0;
      for (int64_t d = 0; d < D; ++d) acc += static_cast<double>(h[d]) * static_cast<double>(wr[d]);
      if (bias) acc += static_cast<double>(bias[v]);
      r.logit[v] = static_cast<float>(acc);
    }
  });
  return r;
}

// Gumbel argmax on the CPU; also the CPU score of any index (for near-tie classification).
static Candidate cpu_candidate(const CpuRow& r, float T, uint64_t seed, uint64_t off, uint32_t stream,
                               uint32_t s, int64_t v) {
  const bool greedy = T == 0.0f;
  const float inv = greedy ? 0.0f : 1.0f / T;
  const float g = greedy ? 0.0f : gumbel_noise(seed, off, stream, s, static_cast<uint64_t>(v));
  return make_candidate(r.logit[v], inv, greedy, g, static_cast<uint32_t>(v));
}

static Candidate cpu_gumbel(const CpuRow& r, float T, uint64_t seed, uint64_t off, uint32_t stream,
                            uint32_t s) {
  Candidate best = empty_candidate();
  const int64_t V = r.logit.size();
  for (int64_t v = 0; v < V; ++v) {
    const Candidate c = cpu_candidate(r, T, seed, off, stream, s, v);
    if (candidate_better(c, best)) best = c;
  }
  return best;
}

static int32_t cpu_inverse_cdf(const CpuRow& r, float T, uint64_t seed, uint64_t off, uint32_t stream,
                               uint32_t s) {
  const int64_t V = r.logit.size();
  if (T == 0.0f) {
    Candidate best = empty_candidate();
    for (int64_t v = 0; v < V; ++v) {
      const Candidate c = make_candidate(r.logit[v], 0.0f, true, 0.0f, static_cast<uint32_t>(v));
      if (candidate_better(c, best)) best = c;
    }
    return best.key == kNoToken ? -1 : static_cast<int32_t>(best.key & 0x7fffffffu);
  }
  float mx = -INFINITY;
  bool any = false, inf = false;
  for (float l : r.logit) {
    if (l == INFINITY) inf = true;
    else if (l == l && l != -INFINITY) { any = true; mx = std::max(mx, l); }
  }
  if (!any && !inf) return -1;
  auto weight = [&](float l) -> double {
    if (inf) return l == INFINITY ? 1.0 : 0.0;
    if (l != l || l == -INFINITY) return 0.0;
    return std::exp((static_cast<double>(l) - static_cast<double>(mx)) / static_cast<double>(T));
  };
  double total = 0.0;
  for (float l : r.logit) total += weight(l);
  const Philox4 x = philox4x32_10(s, stream, static_cast<uint32_t>(off), static_cast<uint32_t>(off >> 32),
                                  static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  const double target = (static_cast<double>(x.x[0]) + 0.5) * 0x1p-32 * total;
  double cum = 0.0;
  int32_t last = -1;
  for (int64_t v = 0; v < V; ++v) {
    const double w = weight(r.logit[v]);
    if (w > 0.0) {
      cum += w;
      last = static_cast<int32_t>(v);
      if (cum > target) return last;
    }
  }
  return last;
}

// ---- one checked case --------------------------------------------------------------------------
enum class BiasKind { kNone, kRandom, kNanNegInf, kPlusInf, kAllNan };

struct Case {
  const char* name;
  int64_t V, D, B;
  int S;
  DType dt;
  int kind = 0;              // 0 random normal, 1 small integers
  BiasKind bias = BiasKind::kNone;
  bool per_row_seed = false;
  int greedy_mode = 0;       // 0: 1 row in 8 greedy, 1: all greedy, 2: none greedy
  int64_t misalign = 0;      // bytes added to the W pointer (forces the SIMT path)
  double cpu_budget = 4e9;   // multiply-adds the CPU spends on logits
};

struct Totals {
  int64_t tokens = 0, agree = 0, hard = 0, ref_same = 0, ref_total = 0, inv_agree = 0, inv_total = 0;
  int failures = 0;
};

static const char* dt_name(DType d) {
  return d == DType::kF32 ? "f32" : d == DType::kF16 ? "f16" : "bf16";
}

static void run_case(const Case& c, Totals& tot, uint64_t seed0) {
  const size_t es = dtype_bytes(c.dt);
  const int64_t V = c.V, D = c.D, B = c.B;
  const int S = c.S;
  void *dW = nullptr, *dH = nullptr, *dBias = nullptr;
  CK(cudaMalloc(&dW, V * D * es + 64));
  CK(cudaMalloc(&dH, B * D * es));
  void* W = static_cast<char*>(dW) + c.misalign;
  const float wscale = (c.kind == 0) ? 3.0f / std::sqrt(static_cast<float>(D)) : 1.0f;
  fill(W, V * D, c.dt, seed0 * 7 + 1, wscale, c.kind);
  fill(dH, B * D, c.dt, seed0 * 7 + 2, 1.0f, c.kind);
  std::vector<float> hbias;
  if (c.bias != BiasKind::kNone) {
    CK(cudaMalloc(&dBias, V * es));
    fill(dBias, V, c.dt, seed0 * 7 + 3, 1.0f, 0);
    CK(cudaDeviceSynchronize());
    hbias = to_host_floats(dBias, V, c.dt);
    for (int64_t v = 0; v < V; ++v) {
      if (c.bias == BiasKind::kNanNegInf) {
        if (v % 7 == 0) hbias[v] = NAN;
        else if (v % 11 == 0) hbias[v] = -INFINITY;
      } else if (c.bias == BiasKind::kPlusInf) {
        if (v == V / 2 || v == V / 3) hbias[v] = INFINITY;
        else if (v % 5 == 0) hbias[v] = NAN;
      } else if (c.bias == BiasKind::kAllNan) {
        hbias[v] = NAN;
      }
    }
    // write back in the dtype
    if (c.dt == DType::kF32) {
      CK(cudaMemcpy(dBias, hbias.data(), V * 4, cudaMemcpyHostToDevice));
    } else {
      std::vector<uint16_t> raw(V);
      for (int64_t v = 0; v < V; ++v) {
        if (c.dt == DType::kBF16) raw[v] = __nv_bfloat16_raw(__float2bfloat16_rn(hbias[v])).x;
        else raw[v] = __half_raw(__float2half_rn(hbias[v])).x;
      }
      CK(cudaMemcpy(dBias, raw.data(), V * 2, cudaMemcpyHostToDevice));
    }
    hbias = to_host_floats(dBias, V, c.dt);
  }

  // per-row parameters
  std::vector<float> T(B);
  std::vector<uint64_t> seed(B), off(B);
  uint64_t st = seed0 * 0x9E3779B97F4A7C15ull + 12345;
  auto rnd = [&]() { st ^= st << 13; st ^= st >> 7; st ^= st << 17; return st; };
  for (int64_t b = 0; b < B; ++b) {
    const bool greedy = c.greedy_mode == 1 || (c.greedy_mode == 0 && rnd() % 8 == 0);
    T[b] = greedy ? 0.0f : 0.5f + static_cast<float>(rnd() % 1000) / 1000.0f;
    seed[b] = rnd();
    off[b] = (b % 3 == 0) ? rnd() : (rnd() & 0xffff);
  }
  float* dT;
  uint64_t *dSeed, *dOff;
  int32_t *dTokF, *dTokG, *dTokI, *dStatF, *dStatG, *dStatI;
  CK(cudaMalloc(&dT, B * 4));
  CK(cudaMalloc(&dSeed, B * 8));
  CK(cudaMalloc(&dOff, B * 8));
  CK(cudaMemcpy(dT, T.data(), B * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dSeed, seed.data(), B * 8, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dOff, off.data(), B * 8, cudaMemcpyHostToDevice));
  for (int32_t** p : {&dTokF, &dTokG, &dTokI}) {
    CK(cudaMalloc(p, B * S * 4));
    CK(cudaMemset(*p, 0xA5, B * S * 4));  // poison
  }
  for (int32_t** p : {&dStatF, &dStatG, &dStatI}) {
    CK(cudaMalloc(p, B * 4));
    CK(cudaMemset(*p, 0xA5, B * 4));
  }

  SampleParams p;
  p.hidden = dH;
  p.weight = W;
  p.bias = dBias;
  p.dtype = c.dt;
  p.batch = B;
  p.vocab = V;
  p.dim = D;
  p.num_samples = S;
  p.temperature = dT;
  p.seed = dSeed;
  p.offset = dOff;
  p.per_row_seed = c.per_row_seed;
  p.tokens = dTokF;
  p.row_status = dStatF;
  CK(cuda::launch_fused_sample(p, 0));
  CK(cudaGetLastError());
  p.tokens = dTokG;
  p.row_status = dStatG;
  CK(cuda::launch_reference_sample(p, ReferenceMethod::kGumbel, 0));
  p.tokens = dTokI;
  p.row_status = dStatI;
  CK(cuda::launch_reference_sample(p, ReferenceMethod::kInverseCdf, 0));
  CK(cudaDeviceSynchronize());

  std::vector<int32_t> tokF(B * S), tokG(B * S), tokI(B * S), stF(B), stG(B), stI(B);
  CK(cudaMemcpy(tokF.data(), dTokF, B * S * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(tokG.data(), dTokG, B * S * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(tokI.data(), dTokI, B * S * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(stF.data(), dStatF, B * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(stG.data(), dStatG, B * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(stI.data(), dStatI, B * 4, cudaMemcpyDeviceToHost));

  // fused vs reference-gumbel (same GEMM, same noise): must be identical on every row
  int64_t ref_same = 0;
  for (int64_t i = 0; i < B * S; ++i) ref_same += tokF[i] == tokG[i];
  bool status_ok = true;
  for (int64_t b = 0; b < B; ++b) status_ok &= stF[b] == stG[b] && stF[b] == stI[b];

  // CPU check of a subset of rows
  const std::vector<float> hW = to_host_floats(W, V * D, c.dt);
  const std::vector<float> hH = to_host_floats(dH, B * D, c.dt);
  int64_t nrows = std::max<int64_t>(2, static_cast<int64_t>(c.cpu_budget / (double(V) * double(D))));
  nrows = std::min(nrows, B);
  int64_t agree = 0, hard = 0, inv_agree = 0, toks = 0;
  double worst = 0.0;
  for (int64_t i = 0; i < nrows; ++i) {
    const int64_t b = nrows == 1 ? 0 : i * (B - 1) / (nrows - 1);
    const CpuRow row = cpu_logits(hH.data() + b * D, hW.data(), hbias.empty() ? nullptr : hbias.data(), V, D);
    const uint32_t stream = c.per_row_seed ? 0u : static_cast<uint32_t>(b);
    std::vector<Candidate> best(S);
    std::vector<int32_t> inv(S);
    parallel_for(S, [&](int64_t lo, int64_t hi) {
      for (int64_t s = lo; s < hi; ++s) {
        best[s] = cpu_gumbel(row, T[b], seed[b], off[b], stream, static_cast<uint32_t>(s));
        inv[s] = cpu_inverse_cdf(row, T[b], seed[b], off[b], stream, static_cast<uint32_t>(s));
      }
    });
    bool no_cand = true;
    for (int s = 0; s < S; ++s) {
      const int32_t want = best[s].key == kNoToken ? -1 : static_cast<int32_t>(best[s].key & 0x7fffffffu);
      no_cand &= want == -1;
      const int32_t got = tokF[b * S + s];
      ++toks;
      if (got == want) {
        ++agree;
      } else {
        double diff = INFINITY;
        if (got >= 0 && got < V && want >= 0) {
          const Candidate cg = cpu_candidate(row, T[b], seed[b], off[b], stream, s, got);
          if ((cg.key >> 31) == (best[s].key >> 31)) diff = std::fabs(double(best[s].score) - double(cg.score));
        }
        worst = std::max(worst, diff);
        if (!(diff <= 1e-3)) {
          ++hard;
          if (hard <= 5)
            printf("    MISMATCH %s row %lld sample %d: gpu %d cpu %d (T=%g, score diff %g)\n", c.name,
                   (long long)b, s, got, want, T[b], diff);
        }
      }
      inv_agree += tokI[b * S + s] == inv[s];
    }
    if ((stF[b] == kRowNoCandidate) != no_cand) status_ok = false;
  }
  // inverse-CDF tokens move with the fp32 rounding of the logits (a boundary of the cumulative
  // sum): expect ~0.1 % mismatches, judged on the aggregate.
  // Inverse-CDF tokens move where fp32 rounding of the logits moves a cumulative-sum boundary:
  // judged per case only with enough tokens to judge (>= 20), otherwise on the aggregate (the big
  // V·D case draws 4 tokens; run 5 printed FAIL there for 3/4).
  const bool inv_ok = toks < 20 || inv_agree >= toks * 0.9;
  const bool ok = hard == 0 && ref_same == B * S && status_ok && inv_ok;
  printf("%-22s %-4s V=%-7lld D=%-5lld B=%-4lld S=%-3d | fused~cpu %5lld/%-5lld hard %lld (worst near-tie %.1e) | "
         "fused==refG %lld/%lld | invcdf~cpu %lld/%lld | status %s | %s\n",
         c.name, dt_name(c.dt), (long long)V, (long long)D, (long long)B, S, (long long)agree,
         (long long)toks, (long long)hard, worst == INFINITY ? -1.0 : worst, (long long)ref_same,
         (long long)(B * S), (long long)inv_agree, (long long)toks, status_ok ? "ok" : "BAD",
         ok ? "PASS" : "FAIL");
  fflush(stdout);
  tot.tokens += toks;
  tot.agree += agree;
  tot.hard += hard;
  tot.ref_same += ref_same;
  tot.ref_total += B * S;
  tot.inv_agree += inv_agree;
  tot.inv_total += toks;
  if (!ok) ++tot.failures;

  CK(cudaFree(dW));
  CK(cudaFree(dH));
  if (dBias) CK(cudaFree(dBias));
  for (void* q : {(void*)dT, (void*)dSeed, (void*)dOff, (void*)dTokF, (void*)dTokG, (void*)dTokI,
                  (void*)dStatF, (void*)dStatG, (void*)dStatI})
    CK(cudaFree(q));
}

// ---- timing --------------------------------------------------------------------------------------
// Median of `iters` back-to-back calls: events between consecutive calls, all enqueued before one
// synchronize, so host-side launch work overlaps the device (as in a decode loop).
static double median_us(int iters, const std::function<void(int)>& fn) {
  for (int i = 0; i < 5; ++i) fn(i);  // warm-up
  CK(cudaDeviceSynchronize());
  std::vector<cudaEvent_t> ev(iters + 1);
  for (auto& e : ev) CK(cudaEventCreate(&e));
  CK(cudaEventRecord(ev[0]));
  for (int i = 0; i < iters; ++i) {
    fn(i);
    CK(cudaEventRecord(ev[i + 1]));
  }
  CK(cudaEventSynchronize(ev[iters]));
  std::vector<float> ts;
  for (int i = 0; i < iters; ++i) {
    float ms;
    CK(cudaEventElapsedTime(&ms, ev[i], ev[i + 1]));
    ts.push_back(ms * 1000.0f);
  }
  for (auto& e : ev) CK(cudaEventDestroy(e));
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

struct Bench {
  int64_t V = 128256, D = 4096, Bmax = 256;
  int nbuf = 3;
  char* wbase = nullptr;
  void* H = nullptr;
  float* T = nullptr;
  float* T0 = nullptr;  // all zeros: every row greedy (no noise)
  uint64_t *seed = nullptr, *off = nullptr;
  int32_t* tok = nullptr;
  int32_t* status = nullptr;
  unsigned long long* winners = nullptr;
  size_t wbytes() const { return V * D * 2; }
  const void* W(int i) const { return wbase + (i % nbuf) * wbytes(); }

  void init() {
    CK(cudaMalloc(&wbase, nbuf * wbytes()));
    fill(wbase, nbuf * V * D, DType::kBF16, 99, 3.0f / 64.0f, 0);
    CK(cudaMalloc(&H, Bmax * D * 2));
    fill(H, Bmax * D, DType::kBF16, 98, 1.0f, 0);
    std::vector<float> t(Bmax, 1.0f);
    std::vector<uint64_t> s(Bmax), o(Bmax, 7);
    for (int64_t b = 0; b < Bmax; ++b) s[b] = 1000 + b;
    CK(cudaMalloc(&T, Bmax * 4));
    CK(cudaMalloc(&T0, Bmax * 4));
    CK(cudaMemset(T0, 0, Bmax * 4));
    CK(cudaMalloc(&seed, Bmax * 8));
    CK(cudaMalloc(&off, Bmax * 8));
    CK(cudaMemcpy(T, t.data(), Bmax * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(seed, s.data(), Bmax * 8, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(off, o.data(), Bmax * 8, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&tok, Bmax * 64 * 4));
    CK(cudaMalloc(&status, Bmax * 4));
    CK(cudaMalloc(&winners, Bmax * 64 * 8));
  }
  SampleParams params(int64_t B, int S, int i) const {
    SampleParams p;
    p.hidden = H;
    p.weight = W(i);
    p.dtype = DType::kBF16;
    p.batch = B;
    p.vocab = V;
    p.dim = D;
    p.num_samples = S;
    p.temperature = T;
    p.seed = seed;
    p.offset = off;
    p.tokens = tok;
    p.row_status = status;
    return p;
  }
  double floor_us(int64_t B) const {
    return 1e6 * std::max(double(V) * D * 2 / 4.48e12, 2.0 * B * V * D / 7.88e14);
  }
};

// Raises the dynamic shared-memory limit of this TU's copy of a tile kernel. launch_persistent
// used to cache "raised" in a per-instance static that the linker shared with the library's TUs,
// so the harness's copy of a kernel the library had launched first never had its limit raised
// (call 3, 2026-11-30: cudaErrorInvalidValue). Its registry is now keyed by the kernel's pointer;
// raising here as well costs nothing and keeps the variants independent of that.
template <class Cfg, bool kWgmma>
static void raise_smem_limit() {
  using cuda::detail::Epi;
  if constexpr (kWgmma) {
    CK(cudaFuncSetAttribute(cuda::detail::wgmma_tile_kernel<Cfg, false, Epi::kSampleOne>,
                            cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes));
    CK(cudaFuncSetAttribute(cuda::detail::wgmma_tile_kernel<Cfg, false, Epi::kSampleMany>,
                            cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes));
  } else {
    CK(cudaFuncSetAttribute(cuda::detail::mma_tile_kernel<Cfg, false, Epi::kSampleOne>,
                            cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes));
    CK(cudaFuncSetAttribute(cuda::detail::mma_tile_kernel<Cfg, false, Epi::kSampleMany>,
                            cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes));
  }
}

template <class Cfg, bool kWgmma = false, bool kBalanced = false>
static double time_variant(Bench& bb, int64_t B, int S = 1) {
  using cuda::detail::Epi;
  raise_smem_limit<Cfg, kWgmma>();
  return median_us(50, [&](int i) {
    SampleParams p = bb.params(B, S, i);
    cuda::detail::GemmArgs a = cuda::detail::gemm_args(p);
    a.winners = bb.winners;
    CK(cudaMemsetAsync(bb.winners, 0, B * S * 8, 0));
    if constexpr (kWgmma) {
      if (S == 1) CK((cuda::detail::launch_wgmma<Cfg, false, Epi::kSampleOne>(a, 0)));
      else CK((cuda::detail::launch_wgmma<Cfg, false, Epi::kSampleMany>(a, 0)));
    } else {
      if (S == 1) CK((cuda::detail::launch_mma<Cfg, false, Epi::kSampleOne, kBalanced>(a, 0)));
      else CK((cuda::detail::launch_mma<Cfg, false, Epi::kSampleMany, kBalanced>(a, 0)));
    }
  });
}

// Winner words of the balanced-range schedule against classic tiles (same kernel): each logit is
// the same sum in the same order, so every row must agree exactly. S samples per row.
template <class Cfg>
static void compare_balanced(Bench& bb, int64_t B, int S) {
  using cuda::detail::Epi;
  raise_smem_limit<Cfg, false>();
  std::vector<unsigned long long> w[2];
  for (int pass = 0; pass < 2; ++pass) {
    w[pass].resize(B * S);
    SampleParams p = bb.params(B, S, 0);
    cuda::detail::GemmArgs a = cuda::detail::gemm_args(p);
    a.winners = bb.winners;
    CK(cudaMemset(bb.winners, 0, B * S * 8));
    if (S == 1) {
      if (pass == 0) CK((cuda::detail::launch_mma<Cfg, false, Epi::kSampleOne, false>(a, 0)));
      else CK((cuda::detail::launch_mma<Cfg, false, Epi::kSampleOne, true>(a, 0)));
    } else {
      if (pass == 0) CK((cuda::detail::launch_mma<Cfg, false, Epi::kSampleMany, false>(a, 0)));
      else CK((cuda::detail::launch_mma<Cfg, false, Epi::kSampleMany, true>(a, 0)));
    }
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(w[pass].data(), bb.winners, B * S * 8, cudaMemcpyDeviceToHost));
  }
  int64_t diff = 0, empty = 0;
  for (int64_t i = 0; i < B * S; ++i) {
    diff += w[0][i] != w[1][i];
    empty += w[1][i] == 0;
  }
  printf("  balanced vs classic winners, V=%lld B=%-3lld S=%d: %lld of %lld differ, %lld empty => %s\n",
         (long long)bb.V, (long long)B, S, (long long)diff, (long long)(B * S), (long long)empty,
         (diff == 0 && empty == 0) ? "OK" : "MISMATCH");
  fflush(stdout);
}

// Winner words of the wgmma kernel against the mma.sync kernel on the bench inputs (std-4-ish
// logits): both accumulate in fp32 but in different orders, so a row can differ only where two
// candidates' scores are within a few ulps. Prints how many of B rows differ.
template <class WgCfg, class MmaCfg>
static void compare_wgmma_mma(Bench& bb, int64_t B) {
  using cuda::detail::Epi;
  raise_smem_limit<WgCfg, true>();
  raise_smem_limit<MmaCfg, false>();
  std::vector<unsigned long long> w1(B), w2(B);
  for (int pass = 0; pass < 2; ++pass) {
    SampleParams p = bb.params(B, 1, 0);
    cuda::detail::GemmArgs a = cuda::detail::gemm_args(p);
    a.winners = bb.winners;
    CK(cudaMemset(bb.winners, 0, B * 8));
    if (pass == 0) CK((cuda::detail::launch_wgmma<WgCfg, false, Epi::kSampleOne>(a, 0)));
    else CK((cuda::detail::launch_mma<MmaCfg, false, Epi::kSampleOne>(a, 0)));
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(pass == 0 ? w1.data() : w2.data(), bb.winners, B * 8, cudaMemcpyDeviceToHost));
  }
  int64_t diff = 0, empty = 0;
  for (int64_t b = 0; b < B; ++b) {
    diff += w1[b] != w2[b];
    empty += w1[b] == 0;
  }
  printf("  wgmma vs mma.sync winners, B=%-4lld: %lld of %lld rows differ, %lld empty => %s\n",
         (long long)B, (long long)diff, (long long)B, (long long)empty,
         (diff <= B / 100 && empty == 0) ? "OK" : "MISMATCH");
  fflush(stdout);
}

// WS_SECTIONS=v6,v8 (say) runs only those sections of the ws rows; unset runs them all.
static bool ws_section(const char* name) {
  const char* e = getenv("WS_SECTIONS");
  return e == nullptr || strstr(e, name) != nullptr;
}

// ---- v5: warp-specialized ping-pong kernel (cuda/wgmma_ws.cuh), harness only ----------------
// These helpers never exit on a CUDA error: they print it and return a failure, so a broken
// configuration (launch refused, shared memory too large) costs its row, not the rest of the run.
// A sticky error (a fault inside the kernel) leaves the context unusable: ws_sticky() says so
// and stops the harness (every later call would fail anyway).
static bool ws_soft(cudaError_t e, const char* what, int line) {
  if (e == cudaSuccess) return true;
  printf("  [ws] CUDA error %s (%s) in %s, harness.cu:%d\n", cudaGetErrorName(e), cudaGetErrorString(e),
         what, line);
  fflush(stdout);
  return false;
}
#define WS_SOFT(call) ws_soft((call), #call, __LINE__)

static void ws_sticky(const char* where) {
  cudaGetLastError();  // clears a non-sticky launch error
  const cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) {
    printf("  [ws] %s: device error %s (%s) is sticky: the CUDA context is lost, harness stops\n", where,
           cudaGetErrorName(e), cudaGetErrorString(e));
    fflush(stdout);
    exit(2);
  }
}

template <class Cfg, cuda::detail::Epi kEpi>
static const void* ws_kernel_ptr() {
  using namespace cuda::detail;
  if constexpr (Cfg::kSplitEpilogue) {
    if constexpr (kEpi == Epi::kSampleOne) return reinterpret_cast<const void*>(wgmma_split_kernel<Cfg, false>);
    else return ws_kernel_ptr<typename Cfg::PingPong, kEpi>();
  } else if constexpr (Cfg::kTma) return reinterpret_cast<const void*>(wgmma_ws_tma_kernel<Cfg, false, kEpi>);
  else return reinterpret_cast<const void*>(wgmma_ws_kernel<Cfg, false, kEpi>);
}

template <class Cfg>
static cudaError_t ws_raise_smem_limit() {
  using namespace cuda::detail;
  cudaError_t e;
  if constexpr (Cfg::kSplitEpilogue) {  // kSampleOne: the split kernel; the rest: its ping-pong tile
    if ((e = cudaFuncSetAttribute(ws_kernel_ptr<Cfg, Epi::kSampleOne>(),
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes)) != cudaSuccess)
      return e;
    return ws_raise_smem_limit<typename Cfg::PingPong>();
  }
  if ((e = cudaFuncSetAttribute(ws_kernel_ptr<Cfg, Epi::kSampleOne>(), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                Cfg::kSmemBytes)) != cudaSuccess)
    return e;
  if ((e = cudaFuncSetAttribute(ws_kernel_ptr<Cfg, Epi::kSampleMany>(), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                Cfg::kSmemBytes)) != cudaSuccess)
    return e;
  return cudaFuncSetAttribute(ws_kernel_ptr<Cfg, Epi::kStore>(), cudaFuncAttributeMaxDynamicSharedMemorySize,
                              Cfg::kSmemBytes);
}

// L2 fill size of the kTma tiles' W copies (v13 rows switch it).
static CUtensorMapL2promotion g_ws_w_promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_128B;

template <class Cfg>
static cudaError_t ws_launch(cuda::detail::GemmArgs a, cuda::detail::Epi epi) {
  using namespace cuda::detail;
  if (epi == Epi::kStore) return launch_ws<Cfg, false, Epi::kStore>(a, 0, g_ws_w_promotion);
  if (epi == Epi::kSampleMany) return launch_ws<Cfg, false, Epi::kSampleMany>(a, 0, g_ws_w_promotion);
  return launch_ws<Cfg, false, Epi::kSampleOne>(a, 0, g_ws_w_promotion);
}

// median_us without exits: -1 on any CUDA error (printed).
static double median_us_soft(int iters, const std::function<cudaError_t(int)>& fn) {
  for (int i = 0; i < 3; ++i)
    if (!WS_SOFT(fn(i))) return -1.0;
  if (!WS_SOFT(cudaDeviceSynchronize())) return -1.0;
  std::vector<cudaEvent_t> ev(iters + 1);
  for (auto& e : ev)
    if (!WS_SOFT(cudaEventCreate(&e))) return -1.0;
  bool ok = WS_SOFT(cudaEventRecord(ev[0]));
  for (int i = 0; ok && i < iters; ++i) ok = WS_SOFT(fn(i)) && WS_SOFT(cudaEventRecord(ev[i + 1]));
  ok = ok && WS_SOFT(cudaEventSynchronize(ev[iters]));
  std::vector<float> ts;
  for (int i = 0; ok && i < iters; ++i) {
    float ms = 0.0f;
    ok = WS_SOFT(cudaEventElapsedTime(&ms, ev[i], ev[i + 1]));
    ts.push_back(ms * 1000.0f);
  }
  for (auto& e : ev) cudaEventDestroy(e);
  if (!ok) return -1.0;
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

// GEMM + sample epilogue of the ws kernel on the bench inputs (memset included, as time_variant).
template <class Cfg>
static double time_ws(Bench& bb, int64_t B, int S = 1) {
  using namespace cuda::detail;
  if (!WS_SOFT(ws_raise_smem_limit<Cfg>())) return -1.0;
  const double us = median_us_soft(50, [&](int i) -> cudaError_t {
    SampleParams p = bb.params(B, S, i);
    GemmArgs a = gemm_args(p);
    a.winners = bb.winners;
    const cudaError_t e = cudaMemsetAsync(bb.winners, 0, B * S * 8, 0);
    if (e != cudaSuccess) return e;
    return ws_launch<Cfg>(a, S == 1 ? Epi::kSampleOne : Epi::kSampleMany);
  });
  ws_sticky("time_ws");
  return us;
}

// The ws kernel's main loop alone, near enough: the kStore epilogue (fp32 logits to memory, no
// noise) into one B x V buffer. Against time_ws it says what the sampling epilogue costs.
template <class Cfg>
static double time_ws_store(Bench& bb, int64_t B) {
  using namespace cuda::detail;
  static float* logits = nullptr;
  if (logits == nullptr) CK(cudaMalloc(&logits, bb.Bmax * bb.V * 4));
  if (!WS_SOFT(ws_raise_smem_limit<Cfg>())) return -1.0;
  const double us = median_us_soft(50, [&](int i) -> cudaError_t {
    SampleParams p = bb.params(B, 1, i);
    GemmArgs a = gemm_args(p);
    a.logits = logits;
    return ws_launch<Cfg>(a, Epi::kStore);
  });
  ws_sticky("time_ws_store");
  return us;
}

// time_ws with every row greedy (temperature 0): the sampling epilogue without any noise.
template <class Cfg>
static double time_ws_greedy(Bench& bb, int64_t B) {
  using namespace cuda::detail;
  if (!WS_SOFT(ws_raise_smem_limit<Cfg>())) return -1.0;
  const double us = median_us_soft(50, [&](int i) -> cudaError_t {
    SampleParams p = bb.params(B, 1, i);
    p.temperature = bb.T0;
    GemmArgs a = gemm_args(p);
    a.winners = bb.winners;
    const cudaError_t e = cudaMemsetAsync(bb.winners, 0, B * 8, 0);
    if (e != cudaSuccess) return e;
    return ws_launch<Cfg>(a, Epi::kSampleOne);
  });
  ws_sticky("time_ws_greedy");
  return us;
}

// v19: the production TMA tiles with the cycle probe on (namespace scope: a kernel template
// argument cannot be a local type).
struct T16P : cuda::detail::WsTile<16, 12, true, true, false, true> { static constexpr bool kProbe = true; };
struct T64P : cuda::detail::WsTile<64, 9, true, true, false, true> { static constexpr bool kProbe = true; };
struct T128P : cuda::detail::WsTile<128, 6, true, true, false, true> { static constexpr bool kProbe = true; };
// v21: T128P with the turn handed over after the epilogue (the epilogue never overlaps a K loop)
struct T128SP : cuda::detail::WsTile<128, 6, true, true, false, true> {
  static constexpr bool kProbe = true;
  static constexpr bool kSerialEpilogue = true;
};

// v19: one launch of a probed ws tile (mode 0 sampled, 1 every row greedy, 2 kStore) after three
// warm-up launches; prints the per-item cycle split of the consumers (WsProbe slots).
template <class Cfg>
static void probe_ws(Bench& bb, int64_t B, int mode, const char* name) {
#ifdef FLASHSAMPLE_WS_PROBE
  using namespace cuda::detail;
  static float* logits = nullptr;
  if (logits == nullptr) CK(cudaMalloc(&logits, bb.Bmax * bb.V * 4));
  if (!WS_SOFT(ws_raise_smem_limit<Cfg>())) return;
  void* probe_ptr = nullptr;
  CK(cudaGetSymbolAddress(&probe_ptr, g_ws_probe));
  const size_t probe_bytes = sizeof(unsigned int) * 2048 * kWsProbeSlots;
  for (int it = 0; it < 4; ++it) {
    SampleParams p = bb.params(B, 1, it);
    if (mode == 1) p.temperature = bb.T0;
    GemmArgs a = gemm_args(p);
    a.winners = bb.winners;
    a.logits = logits;
    CK(cudaMemset(bb.winners, 0, B * 8));
    CK(cudaMemset(probe_ptr, 0, probe_bytes));
    if (!WS_SOFT(ws_launch<Cfg>(a, mode == 2 ? Epi::kStore : Epi::kSampleOne))) return;
  }
  CK(cudaDeviceSynchronize());
  std::vector<unsigned int> h(2048 * kWsProbeSlots);
  CK(cudaMemcpy(h.data(), probe_ptr, probe_bytes, cudaMemcpyDeviceToHost));
  double sum[kWsProbeSlots] = {0};
  int consumers = 0;
  for (int c = 0; c < 2048; ++c) {
    if (h[c * kWsProbeSlots + kProbeItems] == 0) continue;
    ++consumers;
    for (int k = 0; k < kWsProbeSlots; ++k) sum[k] += h[c * kWsProbeSlots + k];
  }
  const double items = sum[kProbeItems];
  auto per = [&](int k) { return items > 0 ? sum[k] / items : 0.0; };
  printf("  %-18s B=%-4lld %d consumers, %.2f items each; cycles/item: turn %.0f | K loop %.0f (full waits %.0f) | "
         "epilogue %.0f (logits %.0f, pruned %.0f, reduce %.0f); consumer total/items %.0f\n",
         name, (long long)B, consumers, consumers ? items / consumers : 0.0, per(kProbeTurn), per(kProbeMain),
         per(kProbeFull), per(kProbeEpi), per(kProbeLogits), per(kProbePruned), per(kProbeReduce),
         per(kProbeTurn) + per(kProbeMain) + per(kProbeEpi));
  fflush(stdout);
#else
  (void)bb; (void)B; (void)mode;
  printf("  %s: probe not compiled (-DFLASHSAMPLE_WS_PROBE)\n", name);
#endif
}

// v29: the split-epilogue tile with the cycle probe on (MMA thread 0 and epilogue thread 0).
struct S128P : cuda::detail::WsSplitTile<128, 4> { static constexpr bool kProbe = true; };
struct S64P : cuda::detail::WsSplitTile<64, 7> { static constexpr bool kProbe = true; };

// v29: probe_ws for a split tile: the two roles printed apart (even slots the MMA warpgroup, odd the
// epilogue), cycles per item.
template <class Cfg>
static void probe_split(Bench& bb, int64_t B, bool greedy, const char* name) {
#ifdef FLASHSAMPLE_WS_PROBE
  using namespace cuda::detail;
  void* probe_ptr = nullptr;
  CK(cudaGetSymbolAddress(&probe_ptr, g_ws_probe));
  const size_t probe_bytes = sizeof(unsigned int) * 2048 * kWsProbeSlots;
  for (int it = 0; it < 4; ++it) {
    SampleParams p = bb.params(B, 1, it);
    if (greedy) p.temperature = bb.T0;
    GemmArgs a = gemm_args(p);
    a.winners = bb.winners;
    CK(cudaMemset(bb.winners, 0, B * 8));
    CK(cudaMemset(probe_ptr, 0, probe_bytes));
    if (!WS_SOFT((launch_ws<Cfg, false, Epi::kSampleOne>(a, 0)))) return;
  }
  CK(cudaDeviceSynchronize());
  std::vector<unsigned int> h(2048 * kWsProbeSlots);
  CK(cudaMemcpy(h.data(), probe_ptr, probe_bytes, cudaMemcpyDeviceToHost));
  for (int role = 0; role < 2; ++role) {
    double sum[kWsProbeSlots] = {0};
    int ctas = 0;
    for (int c = role; c < 2048; c += 2) {
      if (h[c * kWsProbeSlots + kProbeItems] == 0) continue;
      ++ctas;
      for (int k = 0; k < kWsProbeSlots; ++k) sum[k] += h[c * kWsProbeSlots + k];
    }
    const double items = sum[kProbeItems];
    auto per = [&](int k) { return items > 0 ? sum[k] / items : 0.0; };
    if (role == 0)
      printf("  %-22s B=%-4lld MMA: %d CTAs, %.2f items; cycles/item: K loop %.0f (full waits %.0f) | logits_empty wait "
             "%.0f | stores %.0f | total %.0f\n",
             name, (long long)B, ctas, ctas ? items / ctas : 0.0, per(kProbeMain), per(kProbeFull), per(kProbeTurn),
             per(kProbeLogits), per(kProbeMain) + per(kProbeTurn) + per(kProbeLogits));
    else
      printf("  %-22s B=%-4lld epilogue: cycles/item: logits_full wait %.0f | trips %.0f (pruned update %.0f) | "
             "flush/publish %.0f\n",
             name, (long long)B, per(kProbeTurn), per(kProbeEpi), per(kProbePruned), per(kProbeReduce));
  }
  fflush(stdout);
#else
  (void)bb; (void)B; (void)greedy;
  printf("  %s: probe not compiled (-DFLASHSAMPLE_WS_PROBE)\n", name);
#endif
}

// Winner words of the ws kernel against mma.sync (MmaCfg) and wgmma_tile_kernel (WgCfg) on the
// bench inputs, S samples (S = 1: the pruned kSampleOne epilogues; S > 1: kSampleMany). The ws
// kernel sums every logit in the same order as wgmma_tile_kernel (same wgmma k16 steps, same
// fp32 accumulators), so it must match it exactly; against mma.sync only near-ties could move.
template <class WsCfg, class MmaCfg, class WgCfg>
static void compare_ws(Bench& bb, int64_t B, int S, const char* name) {
  using namespace cuda::detail;
  const Epi epi = S == 1 ? Epi::kSampleOne : Epi::kSampleMany;
  raise_smem_limit<WgCfg, true>();
  raise_smem_limit<MmaCfg, false>();
  if (!WS_SOFT(ws_raise_smem_limit<WsCfg>())) {
    printf("  %s: ws vs mma.sync / wgmma_tile, B=%lld S=%d: SKIPPED (launch setup failed)\n", name, (long long)B, S);
    return;
  }
  const int64_t n = B * S;
  std::vector<unsigned long long> w[3] = {std::vector<unsigned long long>(n), std::vector<unsigned long long>(n),
                                          std::vector<unsigned long long>(n)};
  for (int pass = 0; pass < 3; ++pass) {
    SampleParams p = bb.params(B, S, 0);
    GemmArgs a = gemm_args(p);
    a.winners = bb.winners;
    CK(cudaMemset(bb.winners, 0, n * 8));
    if (pass == 0) {
      if (!WS_SOFT(ws_launch<WsCfg>(a, epi))) {
        ws_sticky("compare_ws");
        printf("  %s: B=%lld S=%d: SKIPPED (launch failed)\n", name, (long long)B, S);
        return;
      }
      ws_sticky("compare_ws");
    } else if (pass == 1) {
      if (S == 1) CK((launch_mma<MmaCfg, false, Epi::kSampleOne>(a, 0)));
      else CK((launch_mma<MmaCfg, false, Epi::kSampleMany>(a, 0)));
    } else {
      if (S == 1) CK((launch_wgmma<WgCfg, false, Epi::kSampleOne>(a, 0)));
      else CK((launch_wgmma<WgCfg, false, Epi::kSampleMany>(a, 0)));
    }
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(w[pass].data(), bb.winners, n * 8, cudaMemcpyDeviceToHost));
  }
  int64_t d_mma = 0, d_wg = 0, empty = 0;
  for (int64_t i = 0; i < n; ++i) {
    d_mma += w[0][i] != w[1][i];
    d_wg += w[0][i] != w[2][i];
    empty += w[0][i] == 0;
  }
  printf("  %s: ws vs mma.sync winners B=%-4lld S=%d: %lld of %lld differ; vs wgmma_tile %lld differ; "
         "%lld empty => %s\n",
         name, (long long)B, S, (long long)d_mma, (long long)n, (long long)d_wg, (long long)empty,
         (d_mma == 0 && d_wg == 0 && empty == 0) ? "IDENTICAL" : "MISMATCH");
  fflush(stdout);
}

// The ws kernel on a small odd shape (partial vocabulary tile, padding columns, bias): kStore
// logits against wgmma_tile_kernel's (bitwise: same summation order) and mma.sync's (max abs
// difference; a different order), every [B, V] element written and nothing past it; then the
// kSampleOne winner words against mma.sync's and wgmma_tile_kernel's.
template <class WsCfg>
static void check_ws_small(const Bench& bb, int64_t V, int64_t D, int64_t B, const char* name) {
  using namespace cuda::detail;
  if (!WS_SOFT(ws_raise_smem_limit<WsCfg>())) {
    printf("  %s V=%lld D=%lld B=%lld: SKIPPED (launch setup failed)\n", name, (long long)V, (long long)D,
           (long long)B);
    return;
  }
  CK(cudaFuncSetAttribute(wgmma_tile_kernel<WgTile128, false, Epi::kStore>,
                          cudaFuncAttributeMaxDynamicSharedMemorySize, WgTile128::kSmemBytes));
  CK(cudaFuncSetAttribute(mma_tile_kernel<Tile128, false, Epi::kStore>,
                          cudaFuncAttributeMaxDynamicSharedMemorySize, Tile128::kSmemBytes));
  raise_smem_limit<WgTile128, true>();
  raise_smem_limit<Tile128, false>();
  const int64_t guard = 4096, nl = B * V;
  void *dW, *dH, *dBias;
  float* dL[3];
  CK(cudaMalloc(&dW, V * D * 2));
  CK(cudaMalloc(&dH, B * D * 2));
  CK(cudaMalloc(&dBias, V * 2));
  fill(dW, V * D, DType::kBF16, 501, 3.0f / std::sqrt(static_cast<float>(D)), 0);
  fill(dH, B * D, DType::kBF16, 502, 1.0f, 0);
  fill(dBias, V, DType::kBF16, 503, 1.0f, 0);
  for (auto& l : dL) {
    CK(cudaMalloc(&l, (nl + guard) * 4));
    CK(cudaMemset(l, 0xFF, (nl + guard) * 4));  // NaN sentinel
  }
  SampleParams p = bb.params(B, 1, 0);
  p.hidden = dH;
  p.weight = dW;
  p.bias = dBias;
  p.vocab = V;
  p.dim = D;
  GemmArgs a = gemm_args(p);
  bool launched = true;
  a.logits = dL[0];
  launched = WS_SOFT(ws_launch<WsCfg>(a, Epi::kStore));
  ws_sticky("check_ws_small store");
  a.logits = dL[1];
  CK((launch_wgmma<WgTile128, false, Epi::kStore>(a, 0)));
  a.logits = dL[2];
  CK((launch_mma<Tile128, false, Epi::kStore>(a, 0)));
  CK(cudaDeviceSynchronize());
  std::vector<uint32_t> h[3];
  for (int k = 0; k < 3; ++k) {
    h[k].resize(nl + guard);
    CK(cudaMemcpy(h[k].data(), dL[k], (nl + guard) * 4, cudaMemcpyDeviceToHost));
  }
  int64_t unwritten = 0, guard_hit = 0, bit_diff = 0;
  double max_abs = 0.0;
  for (int64_t i = 0; i < nl; ++i) {
    unwritten += h[0][i] == 0xFFFFFFFFu;
    bit_diff += h[0][i] != h[1][i];
    float x, y;
    memcpy(&x, &h[0][i], 4);
    memcpy(&y, &h[2][i], 4);
    max_abs = std::max(max_abs, static_cast<double>(std::fabs(x - y)));
  }
  for (int64_t i = nl; i < nl + guard; ++i) guard_hit += h[0][i] != 0xFFFFFFFFu;
  const bool store_ok = launched && unwritten == 0 && guard_hit == 0 && bit_diff == 0 && max_abs < 1e-3;
  printf("  %s V=%lld D=%lld B=%lld store: %lld/%lld differ in bits from wgmma_tile, max |ws - mma.sync| %.3g, "
         "unwritten %lld, written past the end %lld => %s\n",
         name, (long long)V, (long long)D, (long long)B, (long long)bit_diff, (long long)nl, max_abs,
         (long long)unwritten, (long long)guard_hit, store_ok ? "OK" : "MISMATCH");
  // winners (kSampleOne, bench temperatures / seeds)
  std::vector<unsigned long long> w[3] = {std::vector<unsigned long long>(B), std::vector<unsigned long long>(B),
                                          std::vector<unsigned long long>(B)};
  a.logits = nullptr;
  a.winners = bb.winners;
  for (int pass = 0; pass < 3; ++pass) {
    CK(cudaMemset(bb.winners, 0, B * 8));
    if (pass == 0) {
      launched = WS_SOFT(ws_launch<WsCfg>(a, Epi::kSampleOne)) && launched;
      ws_sticky("check_ws_small sample");
    } else if (pass == 1) {
      CK((launch_mma<Tile128, false, Epi::kSampleOne>(a, 0)));
    } else {
      CK((launch_wgmma<WgTile128, false, Epi::kSampleOne>(a, 0)));
    }
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(w[pass].data(), bb.winners, B * 8, cudaMemcpyDeviceToHost));
  }
  int64_t d_mma = 0, d_wg = 0, empty = 0;
  for (int64_t b = 0; b < B; ++b) {
    d_mma += w[0][b] != w[1][b];
    d_wg += w[0][b] != w[2][b];
    empty += w[0][b] == 0;
  }
  printf("  %s V=%lld D=%lld B=%lld winners: %lld differ from mma.sync, %lld from wgmma_tile, %lld empty => %s\n",
         name, (long long)V, (long long)D, (long long)B, (long long)d_mma, (long long)d_wg, (long long)empty,
         (launched && d_mma == 0 && d_wg == 0 && empty == 0) ? "IDENTICAL" : "MISMATCH");
  fflush(stdout);
  for (auto& l : dL) CK(cudaFree(l));
  CK(cudaFree(dW));
  CK(cudaFree(dH));
  CK(cudaFree(dBias));
}

// The checks a set of ws tiles for B <= 16 / 32 / 64 / above gets (the production tiles, v13, and
// their cp.async twins, v26): check_ws_small on odd shapes (partial tiles, D = 64 / 200 / 256 /
// 4096, B = 3 / 33 / 99 / 200) and compare_ws against mma.sync and wgmma_tile at B = 1 ... 256
// (S = 4 too). `name` is printf's "<prefix><N,S st,R>" pattern's prefix ("wsT", "ws").
template <class T16, class T32, class T64, class T128>
static void check_ws_tile_set(Bench& bb, const char* prefix) {
  using namespace cuda::detail;
  auto name = [prefix](int n, int stages) {
    return std::string(prefix) + "<" + std::to_string(n) + "," + std::to_string(stages) + "st,R>";
  };
  const std::string n16 = name(16, T16::kStages), n32 = name(32, T32::kStages), n64 = name(64, T64::kStages),
                    n128 = name(128, T128::kStages);
  check_ws_small<T16>(bb, 111, 64, 3, n16.c_str());
  check_ws_small<T16>(bb, 1000, 4096, 99, n16.c_str());
  check_ws_small<T32>(bb, 1000, 200, 33, n32.c_str());
  check_ws_small<T64>(bb, 32000, 256, 200, n64.c_str());
  check_ws_small<T128>(bb, 111, 64, 3, n128.c_str());
  check_ws_small<T128>(bb, 32000, 256, 200, n128.c_str());
  compare_ws<T16, Tile8, WgTile16>(bb, 1, 1, n16.c_str());
  compare_ws<T16, Tile16, WgTile16>(bb, 16, 1, n16.c_str());
  compare_ws<T32, Tile32, WgTile32>(bb, 32, 1, n32.c_str());
  compare_ws<T64, Tile64, WgTile64>(bb, 64, 1, n64.c_str());
  compare_ws<T128, Tile128, WgTile128>(bb, 128, 1, n128.c_str());
  compare_ws<T128, Tile128, WgTile256>(bb, 256, 1, n128.c_str());
  compare_ws<T128, Tile128, WgTile256>(bb, 256, 4, n128.c_str());
}

// One variant, 20 calls at batch B on the bench inputs, nothing else: the target of an ncu run
// (cuda/harness/run.sh --profile NAME B). Names: tile8, wgtile16/32/64, ws16, ws64, ws128, ws16t,
// ws16r, ws128t, split128; PROFILE_GREEDY=1 makes every row greedy.
static int profile_variant(const std::string& name, int64_t B) {
  using namespace cuda::detail;
  Bench bb;
  bb.init();
  const char* greedy_env = getenv("PROFILE_GREEDY");  // set: every row greedy (no noise)
  const bool greedy = greedy_env != nullptr && greedy_env[0] == '1';
  auto go = [&](auto launch) {
    for (int i = 0; i < 20; ++i) {
      SampleParams p = bb.params(B, 1, i);
      if (greedy) p.temperature = bb.T0;
      GemmArgs a = gemm_args(p);
      a.winners = bb.winners;
      CK(cudaMemsetAsync(bb.winners, 0, B * 8, 0));
      CK(launch(a));
    }
    CK(cudaDeviceSynchronize());
    printf("profiled %s B=%lld\n", name.c_str(), (long long)B);
    return 0;
  };
  raise_smem_limit<Tile8, false>();
  if (name == "tile8") return go([](GemmArgs a) { return launch_mma<Tile8, false, Epi::kSampleOne, true>(a, 0); });
  if (name == "wgtile16") return go([](GemmArgs a) { return launch_wgmma<WgTile16, false, Epi::kSampleOne>(a, 0); });
  if (name == "wgtile32") return go([](GemmArgs a) { return launch_wgmma<WgTile32, false, Epi::kSampleOne>(a, 0); });
  if (name == "wgtile64") return go([](GemmArgs a) { return launch_wgmma<WgTile64, false, Epi::kSampleOne>(a, 0); });
  if (name == "ws16") return go([](GemmArgs a) { return launch_ws<WsTile<16, 12, true>, false, Epi::kSampleOne>(a, 0); });
  if (name == "ws64") return go([](GemmArgs a) { return launch_ws<WsTile64, false, Epi::kSampleOne>(a, 0); });
  if (name == "ws128") return go([](GemmArgs a) { return launch_ws<WsTile128, false, Epi::kSampleOne>(a, 0); });
  if (name == "ws16t")
    return go([](GemmArgs a) { return launch_ws<WsTile<16, 12, true, true, false, true>, false, Epi::kSampleOne>(a, 0); });
  if (name == "ws16r") return go([](GemmArgs a) { return launch_ws<WsTile16R, false, Epi::kSampleOne>(a, 0); });
  if (name == "ws128t") return go([](GemmArgs a) { return launch_ws<WsTile128T, false, Epi::kSampleOne>(a, 0); });
  if (name == "split128") return go([](GemmArgs a) { return launch_ws<WsSplitTile128, false, Epi::kSampleOne>(a, 0); });
  fprintf(stderr, "unknown variant %s\n", name.c_str());
  return 2;
}

int main(int argc, char** argv) {
  g_threads = std::max(2u, std::thread::hardware_concurrency());
  // --bench-only: timings only; --ws-only: the warp-specialized rows only (checks and timings);
  // --profile NAME B: NAME's kernel 20 times at batch B and nothing else (for ncu; see run.sh).
  const std::string mode = argc > 1 ? argv[1] : "";
  const bool skip_checks = mode == "--bench-only" || mode == "--ws-only" || mode == "--profile";
  const bool ws_only = mode == "--ws-only";
  if (mode == "--profile") {
    if (argc < 4) {
      fprintf(stderr, "usage: harness --profile NAME B\n");
      return 2;
    }
    return profile_variant(argv[2], atoll(argv[3]));
  }
  if (argc > 1 && std::string(argv[1]) == "--probe") {
    int n = 0;
    CK(cudaGetDeviceCount(&n));
    printf("probe ok: %d device(s)\n", n);
    return 0;
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("device %s, %d SMs, L2 %d MB, smem/block optin %zu KB, host threads %d\n", prop.name,
         prop.multiProcessorCount, prop.l2CacheSize >> 20, prop.sharedMemPerBlockOptin >> 10, g_threads);
  cudaMemPool_t pool;
  CK(cudaDeviceGetDefaultMemPool(&pool, 0));
  uint64_t threshold = UINT64_MAX;
  CK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));

  if (!skip_checks) {
    std::vector<Case> cases = {
        {"tiny", 111, 8, 3, 4, DType::kBF16},
        {"v1000-d64-b1", 1000, 64, 1, 16, DType::kBF16},
        {"v1000-d4096-b99", 1000, 4096, 99, 1, DType::kBF16},
        {"v32000-d64-b256", 32000, 64, 256, 1, DType::kBF16},
        {"v32000-d4096-b3", 32000, 4096, 3, 16, DType::kBF16},
        {"llama-b1-s64", 128256, 4096, 1, 64, DType::kBF16},
        {"llama-b64", 128256, 4096, 64, 1, DType::kBF16},
        {"qwen-b99-s2", 151936, 4096, 99, 2, DType::kBF16},
        {"qwen-d64-b256-s4", 151936, 64, 256, 4, DType::kBF16},
        {"llama-d8-b64-s4", 128256, 8, 64, 4, DType::kBF16},
        {"v32000-d4096-b256", 32000, 4096, 256, 1, DType::kBF16},
        {"v111-d4096-b64-s8", 111, 4096, 64, 8, DType::kBF16},
        {"b200-s2-chunks", 32000, 256, 200, 2, DType::kBF16},
        {"b1000-chunks", 1000, 64, 1000, 1, DType::kBF16},
        {"f16", 32000, 4096, 8, 8, DType::kF16},
        {"f16-b99", 1000, 4096, 99, 1, DType::kF16},
        {"f32", 32000, 4096, 3, 8, DType::kF32},
        {"f32-b99", 1000, 64, 99, 2, DType::kF32},
        {"f32-llama-d512", 128256, 512, 1, 8, DType::kF32},
        {"bf16-d100-simt", 1000, 100, 5, 4, DType::kBF16},
        {"bf16-d4100-simt", 32000, 4100, 40, 1, DType::kBF16},
    };
    Case c;
    c = {"bf16-misaligned-simt", 32000, 64, 3, 4, DType::kBF16}; c.misalign = 8; cases.push_back(c);
    c = {"per-row-seed", 32000, 256, 16, 4, DType::kBF16}; c.per_row_seed = true; cases.push_back(c);
    c = {"bias-random", 32000, 4096, 16, 4, DType::kBF16}; c.bias = BiasKind::kRandom; cases.push_back(c);
    c = {"int-greedy", 32000, 4096, 64, 2, DType::kBF16}; c.kind = 1; c.greedy_mode = 1; cases.push_back(c);
    c = {"int-greedy-b3", 1000, 512, 3, 1, DType::kBF16}; c.kind = 1; c.greedy_mode = 1; cases.push_back(c);
    c = {"int-T", 32000, 512, 16, 16, DType::kBF16}; c.kind = 1; c.greedy_mode = 2; cases.push_back(c);
    c = {"int-greedy-f32", 1000, 256, 9, 1, DType::kF32}; c.kind = 1; c.greedy_mode = 1; cases.push_back(c);
    c = {"bias-nan-neginf", 1000, 64, 8, 4, DType::kBF16}; c.bias = BiasKind::kNanNegInf; cases.push_back(c);
    c = {"bias-plusinf", 1000, 64, 8, 4, DType::kBF16}; c.bias = BiasKind::kPlusInf; cases.push_back(c);
    c = {"bias-plusinf-f32", 1000, 64, 8, 4, DType::kF32}; c.bias = BiasKind::kPlusInf; cases.push_back(c);
    c = {"bias-allnan", 1000, 64, 4, 2, DType::kBF16}; c.bias = BiasKind::kAllNan; cases.push_back(c);
    c = {"big-VD>2^31", 262144, 8192, 2, 2, DType::kBF16}; c.cpu_budget = 1e10; cases.push_back(c);

    Totals tot;
    uint64_t s0 = 1;
    for (const Case& cc : cases) run_case(cc, tot, s0++);
    printf("\nCHECKS: fused~cpu %lld/%lld = %.4f%% (hard mismatches %lld) | fused==refGumbel %lld/%lld | "
           "invcdf~cpu %lld/%lld | failing cases %d => %s\n\n",
           (long long)tot.agree, (long long)tot.tokens, 100.0 * tot.agree / std::max<int64_t>(1, tot.tokens),
           (long long)tot.hard, (long long)tot.ref_same, (long long)tot.ref_total, (long long)tot.inv_agree,
           (long long)tot.inv_total, tot.failures,
           (tot.failures == 0 && tot.agree >= 0.999 * tot.tokens && tot.inv_agree >= 0.99 * tot.inv_total)
               ? "ALL PASS" : "SOME FAIL");
    fflush(stdout);
  }

  // ---- timing: llama3-8b LM head, bf16, 3 weight buffers rotated (3.15 GB > 60 MB L2) ----------
  Bench bb;
  bb.init();
  {
    unsigned int* sink;
    CK(cudaMalloc(&sink, 4));
    const size_t bytes = bb.nbuf * bb.wbytes();
    const double us = median_us(20, [&](int) { CK(cuda::launch_read_stream(bb.wbase, bytes, sink, 0)); });
    printf("read_stream %.2f GB: %.1f us = %.3f TB/s\n", bytes / 1e9, us, bytes / us / 1e6);
  }
  printf("\n%-5s %-3s %10s %10s %8s | %12s %12s\n", "B", "S", "fused_us", "floor_us", "ratio", "refInv_us",
         "refGumbel_us");
  for (int64_t B : {1, 8, 32, 64, 128, 256}) {
    if (ws_only) break;
    const double f = median_us(50, [&](int i) { CK(cuda::launch_fused_sample(bb.params(B, 1, i), 0)); });
    const double ri = median_us(20, [&](int i) {
      CK(cuda::launch_reference_sample(bb.params(B, 1, i), ReferenceMethod::kInverseCdf, 0));
    });
    const double rg = median_us(20, [&](int i) {
      CK(cuda::launch_reference_sample(bb.params(B, 1, i), ReferenceMethod::kGumbel, 0));
    });
    printf("%-5lld %-3d %10.1f %10.1f %8.3f | %12.1f %12.1f   (W stream %.2f TB/s)\n", (long long)B, 1, f,
           bb.floor_us(B), f / bb.floor_us(B), ri, rg, bb.wbytes() / f / 1e6);
    fflush(stdout);
  }
  for (int64_t B : {1, 64}) {
    if (ws_only) break;
    const double f = median_us(50, [&](int i) { CK(cuda::launch_fused_sample(bb.params(B, 4, i), 0)); });
    printf("%-5lld %-3d %10.1f %10.1f %8.3f\n", (long long)B, 4, f, bb.floor_us(B), f / bb.floor_us(B));
  }

  // ---- tile variants (GEMM + sample epilogue only; memset included) ---------------------------
  using namespace cuda::detail;
  printf("\nvariants (us, ratio to floor):\n");
  auto row = [&](const char* name, int64_t B, double us) {
    printf("  %-34s B=%-4lld %8.1f  %.3f\n", name, (long long)B, us, us / bb.floor_us(B));
    fflush(stdout);
  };
#ifndef HARNESS_QUICK  // -DHARNESS_QUICK: only the newest ws section is compiled (a build of minutes)
  if (!ws_only) {
  // Balanced ranges (tile_rows) against classic tiles, llama3-8b and qwen3-8b vocabularies.
  for (int64_t vocab : {int64_t(128256), int64_t(151936)}) {
    const int64_t V0 = bb.V;
    const int nbuf0 = bb.nbuf;
    bb.V = vocab;
    bb.nbuf = vocab == V0 ? nbuf0 : 2;  // the 3 x 1.05 GB allocation holds 2 x 1.25 GB
    compare_balanced<Tile8>(bb, 1, 1);
    compare_balanced<Tile8>(bb, 8, 1);
    compare_balanced<Tile8>(bb, 3, 4);
    compare_balanced<Tile16>(bb, 16, 1);
    char name[96];
    for (int64_t B : {1, 8}) {
      snprintf(name, sizeof name, "Tile8 classic V=%lld", (long long)vocab);
      row(name, B, time_variant<Tile8, false, false>(bb, B));
      snprintf(name, sizeof name, "Tile8 balanced V=%lld", (long long)vocab);
      row(name, B, time_variant<Tile8, false, true>(bb, B));
    }
    bb.V = V0;
    bb.nbuf = nbuf0;
  }
  row("Tile8 <128,8,4w,3st,bk128> (prod)", 1, time_variant<Tile8>(bb, 1));
  row("<128,8,4w,6st> (v2 prod)", 1, time_variant<MmaTile<128, 8, 4, 1, 6>>(bb, 1));
  row("Tile8 (prod) B=8", 8, time_variant<Tile8>(bb, 8));
  row("Tile16 <128,16,4w,3st,bk128> (prod)", 16, time_variant<Tile16>(bb, 16));
  row("<128,16,4w,6st> (v2 prod)", 16, time_variant<MmaTile<128, 16, 4, 1, 6>>(bb, 16));
  row("Tile32 (v2 mma.sync)", 32, time_variant<Tile32>(bb, 32));
  row("<128,32,4w,6st>", 32, time_variant<MmaTile<128, 32, 4, 1, 6>>(bb, 32));
  row("Tile64 <128,64,4x2w,4st> (v2)", 64, time_variant<Tile64>(bb, 64));
  row("<128,64,4x2w,3st>", 64, time_variant<MmaTile<128, 64, 4, 2, 3>>(bb, 64));
  row("Tile128 <128,128,2x4w,4st> (v2)", 128, time_variant<Tile128>(bb, 128));
  row("<256,128,4x2w,3st>", 128, time_variant<MmaTile<256, 128, 4, 2, 3>>(bb, 128));
  row("<128,128,2x4w,3st>", 128, time_variant<MmaTile<128, 128, 2, 4, 3>>(bb, 128));
  }  // !ws_only
#endif  // HARNESS_QUICK
  printf("\nwgmma (sm_90a) checks and variants:\n");
  // v5 first (cuda/wgmma_ws.cuh): a failing configuration prints a [ws] line and the run goes on.
  {
    auto ws_row = [&](const char* name, int64_t B, double us) {
      if (us < 0) printf("  %-34s B=%-4lld   FAILED (error above)\n", name, (long long)B);
      else row(name, B, us);
      fflush(stdout);
    };
    using WsTile128Chunk = WsTile<128, 6, false>;  // wgmma_tile_kernel's item order
    using WsTile128S5 = WsTile<128, 5, true>;
#ifndef HARNESS_QUICK
    if (ws_section("v5")) {
      printf("  v5 warp-specialized ping-pong (wgmma_ws_kernel) checks:\n");
      check_ws_small<WsTile128>(bb, 1000, 4096, 99, "ws<128,6st>");
      check_ws_small<WsTile128>(bb, 111, 64, 3, "ws<128,6st>");
      check_ws_small<WsTile128>(bb, 32000, 256, 200, "ws<128,6st>");
      check_ws_small<WsTile128Chunk>(bb, 32000, 256, 200, "ws<128,6st,chunk-major>");
      check_ws_small<WsTile64>(bb, 1000, 4096, 99, "ws<64,9st>");
      check_ws_small<WsTile64>(bb, 111, 64, 3, "ws<64,9st>");
      check_ws_small<WsTile64>(bb, 32000, 256, 200, "ws<64,9st>");
      compare_ws<WsTile128, Tile128, WgTile128>(bb, 128, 1, "ws<128,6st>");
      compare_ws<WsTile128, Tile128, WgTile256>(bb, 256, 1, "ws<128,6st>");
      compare_ws<WsTile64, Tile128, WgTile128>(bb, 128, 1, "ws<64,9st>");
      compare_ws<WsTile128Chunk, Tile128, WgTile256>(bb, 256, 1, "ws<128,6st,chunk-major>");
      compare_ws<WsTile128, Tile128, WgTile256>(bb, 256, 4, "ws<128,6st>");
      compare_ws<WsTile128, Tile32, WgTile32>(bb, 32, 1, "ws<128,6st>");
      printf("  v5 timings:\n");
      ws_row("ws<128,6st> B=128 (1 chunk)", 128, time_ws<WsTile128>(bb, 128));
      ws_row("ws<128,5st> B=128", 128, time_ws<WsTile128S5>(bb, 128));
      ws_row("ws<64,9st> B=128 (2 chunks)", 128, time_ws<WsTile64>(bb, 128));
      ws_row("ws<128,6st> B=256 (vtile-major)", 256, time_ws<WsTile128>(bb, 256));
      ws_row("ws<128,6st,chunk-major> B=256", 256, time_ws<WsTile128Chunk>(bb, 256));
      ws_row("ws<64,9st> B=256 (4 chunks)", 256, time_ws<WsTile64>(bb, 256));
      ws_row("ws<128,6st> B=256 S=4", 256, time_ws<WsTile128>(bb, 256, 4));
      ws_row("ws<128,6st> B=64", 64, time_ws<WsTile128>(bb, 64));
      printf("  (production wgmma_tile for reference: WgTile128 B=128 and WgTile256 B=256 rows below)\n");
    }  // section v5
    // v6 candidates (written 2026-11-30, not run yet): the ping-pong kernel with one chunk of
    // N <= 64 columns for B <= 64, with the ring as deep as shared memory allows (more bytes in
    // flight than the production tiles: 12 x 18 KB at N = 16 against 6 x 18 KB for WgTile16).
    using WsTile16 = WsTile<16, 12, true>;
    using WsTile32 = WsTile<32, 11, true>;
    if (ws_section("v6")) {
      printf("  v6 candidates (ping-pong for B <= 64):\n");
      check_ws_small<WsTile16>(bb, 111, 64, 3, "ws<16,12st>");
      check_ws_small<WsTile16>(bb, 1000, 4096, 99, "ws<16,12st>");
      compare_ws<WsTile16, Tile16, WgTile16>(bb, 16, 1, "ws<16,12st>");
      compare_ws<WsTile32, Tile32, WgTile32>(bb, 32, 1, "ws<32,11st>");
      compare_ws<WsTile64, Tile64, WgTile64>(bb, 64, 1, "ws<64,9st>");
      ws_row("ws<16,12st> B=1", 1, time_ws<WsTile16>(bb, 1));
      ws_row("ws<16,12st> B=8", 8, time_ws<WsTile16>(bb, 8));
      ws_row("ws<16,12st> B=16", 16, time_ws<WsTile16>(bb, 16));
      ws_row("ws<32,11st> B=32", 32, time_ws<WsTile32>(bb, 32));
      ws_row("ws<64,9st> B=64 (1 chunk)", 64, time_ws<WsTile64>(bb, 64));
    }  // section v6
    // v8: the epilogue of K columns at a time (quads_update_pruned<K>); main loop alone (kStore).
    // v7 (TMA producer), v8 (epilogue K columns at a time), v9 (L2 256-byte prefetch; greedy rows),
    // v10 (cooperative consumers, unrolled epilogue) and v12 (k-blocks per stage): rows in runs
    // 9-13 (NOTES.md). v8's K became the jj pair of the epilogue; the TMA producer, the L2 prefetch
    // and the k-blocks were measured slower and removed from wgmma_ws.cuh (code: commit ad97c74).
    if (ws_section("v11")) {
      // v11: the kSampleOne epilogue rolled (one copy of its code), ping-pong and cooperative.
      using Ws16R = WsTile<16, 12, true, true>;
      using Ws32R = WsTile<32, 11, true, true>;
      using Ws64R = WsTile<64, 9, true, true>;
      using Ws128R = WsTile<128, 6, true, true>;
      using WsC128 = WsTile<128, 4, true, false, true>;
      using WsC128R = WsTile<128, 4, true, true, true>;
      using WsC64R = WsTile<64, 5, true, true, true>;
      printf("  v11 checks (rolled epilogue; cooperative):\n");
      check_ws_small<Ws16R>(bb, 111, 64, 3, "ws<16,12st,R>");
      check_ws_small<Ws16R>(bb, 1000, 4096, 99, "ws<16,12st,R>");
      check_ws_small<Ws128R>(bb, 32000, 256, 200, "ws<128,6st,R>");
      check_ws_small<Ws128R>(bb, 111, 64, 3, "ws<128,6st,R>");
      check_ws_small<WsC128R>(bb, 1000, 4096, 99, "wsC<128,4st,R>");
      check_ws_small<WsC128R>(bb, 111, 200, 3, "wsC<128,4st,R>");
      check_ws_small<WsC128>(bb, 32000, 256, 200, "wsC<128,4st>");
      check_ws_small<WsC64R>(bb, 32000, 256, 200, "wsC<64,5st,R>");
      compare_ws<Ws16R, Tile8, WgTile16>(bb, 1, 1, "ws<16,12st,R>");
      compare_ws<Ws16R, Tile16, WgTile16>(bb, 16, 1, "ws<16,12st,R>");
      compare_ws<Ws32R, Tile32, WgTile32>(bb, 32, 1, "ws<32,11st,R>");
      compare_ws<Ws64R, Tile64, WgTile64>(bb, 64, 1, "ws<64,9st,R>");
      compare_ws<Ws64R, Tile128, WgTile128>(bb, 128, 1, "ws<64,9st,R>");
      compare_ws<Ws128R, Tile128, WgTile128>(bb, 128, 1, "ws<128,6st,R>");
      compare_ws<Ws128R, Tile128, WgTile256>(bb, 256, 1, "ws<128,6st,R>");
      compare_ws<Ws128R, Tile128, WgTile256>(bb, 256, 4, "ws<128,6st,R>");
      compare_ws<WsC128R, Tile128, WgTile128>(bb, 128, 1, "wsC<128,4st,R>");
      compare_ws<WsC128R, Tile128, WgTile256>(bb, 256, 1, "wsC<128,4st,R>");
      compare_ws<WsC128, Tile128, WgTile256>(bb, 256, 1, "wsC<128,4st>");
      compare_ws<WsC64R, Tile128, WgTile256>(bb, 256, 1, "wsC<64,5st,R>");
      printf("  v11 timings:\n");
      ws_row("ws<16,12st> B=1 (prod, jj pairs)", 1, time_ws<WsTile16>(bb, 1));
      ws_row("ws<16,12st,R> B=1", 1, time_ws<Ws16R>(bb, 1));
      ws_row("ws<16,12st,R> B=8", 8, time_ws<Ws16R>(bb, 8));
      ws_row("ws<16,12st,R> B=16", 16, time_ws<Ws16R>(bb, 16));
      ws_row("ws<32,11st,R> B=32", 32, time_ws<Ws32R>(bb, 32));
      ws_row("ws<64,9st> B=64 (prod, jj pairs)", 64, time_ws<WsTile64>(bb, 64));
      ws_row("ws<64,9st,R> B=64", 64, time_ws<Ws64R>(bb, 64));
      ws_row("ws<128,6st,R> B=64", 64, time_ws<Ws128R>(bb, 64));
      ws_row("wsC<64,5st,R> B=64", 64, time_ws<WsC64R>(bb, 64));
      ws_row("ws<64,9st> B=128 (prod, jj pairs)", 128, time_ws<WsTile64>(bb, 128));
      ws_row("ws<64,9st,R> B=128", 128, time_ws<Ws64R>(bb, 128));
      ws_row("ws<128,6st,R> B=128", 128, time_ws<Ws128R>(bb, 128));
      ws_row("ws<128,6st,R> B=128 greedy", 128, time_ws_greedy<Ws128R>(bb, 128));
      ws_row("wsC<128,4st> B=128", 128, time_ws<WsC128>(bb, 128));
      ws_row("wsC<128,4st,R> B=128", 128, time_ws<WsC128R>(bb, 128));
      ws_row("wsC<128,4st> B=128 kStore", 128, time_ws_store<WsC128>(bb, 128));
      ws_row("wsC<64,5st,R> B=128", 128, time_ws<WsC64R>(bb, 128));
      ws_row("ws<64,9st> B=256 (prod, jj pairs)", 256, time_ws<WsTile64>(bb, 256));
      ws_row("ws<64,9st,R> B=256", 256, time_ws<Ws64R>(bb, 256));
      ws_row("ws<128,6st,R> B=256", 256, time_ws<Ws128R>(bb, 256));
      ws_row("wsC<128,4st> B=256", 256, time_ws<WsC128>(bb, 256));
      ws_row("wsC<128,4st,R> B=256", 256, time_ws<WsC128R>(bb, 256));
      ws_row("wsC<128,4st> B=256 kStore", 256, time_ws_store<WsC128>(bb, 256));
      ws_row("wsC<64,5st,R> B=256", 256, time_ws<WsC64R>(bb, 256));
    }  // section v11
#endif  // HARNESS_QUICK
    if (ws_section("v13")) {
      // v13: the TMA producer with W in natural row order, the epilogue's quads gathered by a
      // 4 x 4 lane transpose (kTma); the same stage counts as the production tiles.
      using T16 = WsTile<16, 12, true, true, false, true>;
      using T16s8 = WsTile<16, 8, true, true, false, true>;
      using T32 = WsTile<32, 11, true, true, false, true>;
      using T64 = WsTile<64, 9, true, true, false, true>;
      using T128 = WsTile<128, 6, true, true, false, true>;
      using TC128 = WsTile<128, 4, true, true, true, true>;
      printf("  v13 checks (TMA, natural W rows):\n");
      check_ws_tile_set<T16, T32, T64, T128>(bb, "wsT");
      check_ws_small<TC128>(bb, 1000, 4096, 99, "wsTC<128,4st,R>");
      check_ws_small<TC128>(bb, 111, 200, 3, "wsTC<128,4st,R>");
      compare_ws<TC128, Tile128, WgTile128>(bb, 128, 1, "wsTC<128,4st,R>");
      compare_ws<TC128, Tile128, WgTile256>(bb, 256, 1, "wsTC<128,4st,R>");
      printf("  v13 timings (prod = the dispatched cp.async tile, same run):\n");
      for (int64_t B : {1, 8, 16}) {
        ws_row("ws<16,12st,R> (prod)", B, time_ws<WsTile16R>(bb, B));
        ws_row("wsT<16,12st,R> L2 128B", B, time_ws<T16>(bb, B));
      }
      g_ws_w_promotion = CU_TENSOR_MAP_L2_PROMOTION_NONE;
      ws_row("wsT<16,12st,R> L2 none", 1, time_ws<T16>(bb, 1));
      g_ws_w_promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
      ws_row("wsT<16,12st,R> L2 256B", 1, time_ws<T16>(bb, 1));
      ws_row("wsT<64,9st,R> L2 256B", 64, time_ws<T64>(bb, 64));
      g_ws_w_promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_128B;
      ws_row("wsT<16,8st,R>", 1, time_ws<T16s8>(bb, 1));
      ws_row("ws<32,11st,R> (prod)", 32, time_ws<WsTile32R>(bb, 32));
      ws_row("wsT<32,11st,R>", 32, time_ws<T32>(bb, 32));
      ws_row("ws<64,9st,R> (prod)", 64, time_ws<WsTile64R>(bb, 64));
      ws_row("wsT<64,9st,R>", 64, time_ws<T64>(bb, 64));
      ws_row("wsT<64,9st,R> kStore", 64, time_ws_store<T64>(bb, 64));
      ws_row("wsT<128,6st,R> B=64", 64, time_ws<T128>(bb, 64));
      for (int64_t B : {128, 256}) {
        ws_row("ws<128,6st,R> (prod)", B, time_ws<WsTile128R>(bb, B));
        ws_row("ws<128,6st,R> kStore (prod)", B, time_ws_store<WsTile128R>(bb, B));
        ws_row("wsT<128,6st,R>", B, time_ws<T128>(bb, B));
        ws_row("wsT<128,6st,R> kStore", B, time_ws_store<T128>(bb, B));
        ws_row("wsT<128,6st,R> greedy", B, time_ws_greedy<T128>(bb, B));
        ws_row("wsTC<128,4st,R>", B, time_ws<TC128>(bb, B));
        ws_row("wsTC<128,4st,R> kStore", B, time_ws_store<TC128>(bb, B));
      }
    }  // section v13
#ifndef HARNESS_QUICK  // (v16 ... v31: QUICK builds only v13 and the newest section, v36)
    if (ws_section("v16")) {
      // v16: the cooperative tile with the TMA producer at B = 33..64 (256 vocabulary rows x 64
      // columns an item, half the H fill per FLOP of the ping-pong N = 64 tile).
      using T64 = WsTile<64, 9, true, true, false, true>;
      using TC64 = WsTile<64, 5, true, true, true, true>;
      printf("  v16 checks (cooperative TMA, N = 64):\n");
      check_ws_small<TC64>(bb, 1000, 4096, 99, "wsTC<64,5st,R>");
      check_ws_small<TC64>(bb, 111, 200, 3, "wsTC<64,5st,R>");
      compare_ws<TC64, Tile64, WgTile64>(bb, 64, 1, "wsTC<64,5st,R>");
      printf("  v16 timings:\n");
      for (int64_t B : {48, 64}) {
        ws_row("wsT<64,9st,R> (prod)", B, time_ws<T64>(bb, B));
        ws_row("wsTC<64,5st,R>", B, time_ws<TC64>(bb, B));
        ws_row("wsT<64,9st,R> kStore (prod)", B, time_ws_store<T64>(bb, B));
        ws_row("wsTC<64,5st,R> kStore", B, time_ws_store<TC64>(bb, B));
      }
    }  // section v16
    if (ws_section("v19")) {
      // v19: where a consumer's cycles go (WsProbe, -DFLASHSAMPLE_WS_PROBE): the production TMA tiles
      // with the probe on, per item: turn wait, K loop (of which full[] waits), epilogue (of which
      // logits + parameters + rotation, the pruned update, the cross-lane best + write).
      using T128 = WsTile<128, 6, true, true, false, true>;
      printf("  v19 probe (cycles per item of one consumer warpgroup's thread 0, averaged over consumers):\n");
      compare_ws<T128P, Tile128, WgTile128>(bb, 128, 1, "wsT<128,6st,R> probe");
      for (int64_t B : {128, 256}) {
        ws_row("wsT<128,6st,R> (prod)", B, time_ws<T128>(bb, B));
        ws_row("wsT<128,6st,R> probe", B, time_ws<T128P>(bb, B));
        probe_ws<T128P>(bb, B, 0, "wsT<128> sampled");
        probe_ws<T128P>(bb, B, 1, "wsT<128> greedy");
        probe_ws<T128P>(bb, B, 2, "wsT<128> kStore");
      }
      probe_ws<T64P>(bb, 64, 0, "wsT<64> sampled");
      probe_ws<T64P>(bb, 64, 2, "wsT<64> kStore");
      probe_ws<T16P>(bb, 1, 0, "wsT<16> sampled");
    }  // section v19
    if (ws_section("v21")) {
      // v21: the epilogue alone (T128SP: no overlap with the other consumer's K loop) against the
      // overlapped one (T128P), per item, from the cycle probe.
      for (int64_t B : {128, 256}) {
        probe_ws<T128P>(bb, B, 0, "wsT<128> sampled");
        probe_ws<T128SP>(bb, B, 0, "wsT<128> serial sampled");
        probe_ws<T128P>(bb, B, 1, "wsT<128> greedy");
        probe_ws<T128SP>(bb, B, 1, "wsT<128> serial greedy");
      }
    }  // section v21
    if (ws_section("v26")) {
      // v26: the cp.async twins of the production tiles (what launch_ws runs when the tensor maps
      // cannot be encoded), checked with this session's consumer (shared winners, grid threshold,
      // descriptors by one add): the permuted W layout through the same epilogue.
      printf("  v26 checks (cp.async twins of the production tiles):\n");
      check_ws_tile_set<WsTile16R, WsTile32R, WsTile64R, WsTile128R>(bb, "ws");
      for (int64_t B : {1, 64, 128, 256}) ws_row("ws<..,R> cp.async twin", B, B <= 16 ? time_ws<WsTile16R>(bb, B) : B <= 64 ? time_ws<WsTile64R>(bb, B) : time_ws<WsTile128R>(bb, B));
    }  // section v26
    if (ws_section("v28")) {
      // v28: the sampling epilogue on warpgroups of its own (wgmma_split.cuh): one MMA warpgroup
      // writes each item's logits to shared memory, 8 epilogue warps sample them during the next
      // item's K loop. Checks against mma.sync and wgmma_tile (winners) on odd shapes and on the
      // bench inputs, then timings against the ping-pong tiles of the same N.
      using T16 = WsTile<16, 12, true, true, false, true>;
      using T32 = WsTile<32, 11, true, true, false, true>;
      using T64 = WsTile<64, 9, true, true, false, true>;
      using T128 = WsTile<128, 6, true, true, false, true>;
      using S16 = WsSplitTile<16, 11>;
      using S32 = WsSplitTile<32, 9>;
      using S64 = WsSplitTile<64, 7>;
      using S128 = WsSplitTile<128, 4>;
      using S128K4 = WsSplitTile<128, 4, 4>;
      using S128s3 = WsSplitTile<128, 3>;
      printf("  v28 checks (split epilogue):\n");
      check_ws_small<S128>(bb, 111, 64, 3, "split<128,4st>");
      check_ws_small<S128>(bb, 32000, 256, 200, "split<128,4st>");
      check_ws_small<S128>(bb, 1000, 4096, 99, "split<128,4st>");
      check_ws_small<S128K4>(bb, 1000, 200, 67, "split<128,4st,K4>");
      check_ws_small<S64>(bb, 1000, 200, 33, "split<64,7st>");
      check_ws_small<S16>(bb, 111, 64, 3, "split<16,11st>");
      check_ws_small<S32>(bb, 32000, 256, 20, "split<32,9st>");
      compare_ws<S16, Tile8, WgTile16>(bb, 1, 1, "split<16,11st>");
      compare_ws<S16, Tile16, WgTile16>(bb, 16, 1, "split<16,11st>");
      compare_ws<S32, Tile32, WgTile32>(bb, 32, 1, "split<32,9st>");
      compare_ws<S64, Tile64, WgTile64>(bb, 64, 1, "split<64,7st>");
      compare_ws<S128, Tile128, WgTile128>(bb, 128, 1, "split<128,4st>");
      compare_ws<S128, Tile128, WgTile256>(bb, 256, 1, "split<128,4st>");
      compare_ws<S128, Tile128, WgTile256>(bb, 256, 4, "split<128,4st> (S=4: ping-pong)");
      compare_ws<S128K4, Tile128, WgTile256>(bb, 256, 1, "split<128,4st,K4>");
      compare_ws<S128s3, Tile128, WgTile128>(bb, 128, 1, "split<128,3st>");
      printf("  v28 timings:\n");
      for (int64_t B : {1, 16}) {
        ws_row("wsT<16,12st,R> (prod)", B, time_ws<T16>(bb, B));
        ws_row("split<16,11st>", B, time_ws<S16>(bb, B));
      }
      ws_row("wsT<32,11st,R> (prod)", 32, time_ws<T32>(bb, 32));
      ws_row("split<32,9st>", 32, time_ws<S32>(bb, 32));
      ws_row("wsT<64,9st,R> (prod)", 64, time_ws<T64>(bb, 64));
      ws_row("split<64,7st>", 64, time_ws<S64>(bb, 64));
      ws_row("split<128,4st> B=64", 64, time_ws<S128>(bb, 64));
      for (int64_t B : {96, 128, 256}) {
        ws_row("wsT<128,6st,R> (prod)", B, time_ws<T128>(bb, B));
        ws_row("split<128,4st>", B, time_ws<S128>(bb, B));
        ws_row("split<128,4st,K4>", B, time_ws<S128K4>(bb, B));
        ws_row("split<128,3st>", B, time_ws<S128s3>(bb, B));
        ws_row("split<128,4st> greedy", B, time_ws_greedy<S128>(bb, B));
        ws_row("wsT<128,6st,R> greedy", B, time_ws_greedy<T128>(bb, B));
        ws_row("wsT<128,6st,R> kStore", B, time_ws_store<T128>(bb, B));
      }
      for (int64_t B : {128, 256}) {  // again: the spread between rounds
        ws_row("wsT<128,6st,R> (prod) again", B, time_ws<T128>(bb, B));
        ws_row("split<128,4st> again", B, time_ws<S128>(bb, B));
      }
    }  // section v28
    if (ws_section("v29")) {
      // v29: where the split kernel's cycles go (the probe on MMA thread 0 and epilogue thread 0)
      using S128 = WsSplitTile<128, 4>;
      compare_ws<S128P, Tile128, WgTile256>(bb, 256, 1, "split<128,4st> probe");
      for (int64_t B : {128, 256}) {
        ws_row("split<128,4st> (prod)", B, time_ws<S128>(bb, B));
        ws_row("split<128,4st> probe", B, time_ws<S128P>(bb, B));
        probe_split<S128P>(bb, B, false, "split<128> sampled");
        probe_split<S128P>(bb, B, true, "split<128> greedy");
      }
      probe_split<S64P>(bb, 64, false, "split<64> sampled");
      probe_split<S64P>(bb, 64, true, "split<64> greedy");
    }  // section v29
    if (ws_section("v31")) {
      // v31: B > 64 in chunks of 64 columns (split<64,7st>: 168 KB of ring in flight, W read once
      // per chunk, the second time from L2) against the 128-column tile (128 KB in flight).
      using S64 = WsSplitTile<64, 7>;
      using S128 = WsSplitTile<128, 4>;
      compare_ws<S64, Tile128, WgTile128>(bb, 128, 1, "split<64,7st>");
      compare_ws<S64, Tile128, WgTile256>(bb, 256, 1, "split<64,7st>");
      for (int round = 0; round < 2; ++round)
        for (int64_t B : {96, 128, 256}) {
          ws_row("split<128,4st> (prod)", B, time_ws<S128>(bb, B));
          ws_row("split<64,7st>", B, time_ws<S64>(bb, B));
        }
      probe_split<S64P>(bb, 128, false, "split<64> sampled");
      probe_split<S64P>(bb, 256, false, "split<64> sampled");
    }  // section v31
#endif  // HARNESS_QUICK
    if (ws_section("v36")) {
      // v36: a 96-column tile for 64 < B <= 96 (m64n96k16): a quarter less padding work than the
      // 128-column tile at B = 96, and 6 ring stages of 28 KB (96 KB of W in flight) beside a 50 KB
      // logits buffer instead of 4 of 32 KB.
      using S128 = WsSplitTile<128, 4>;
      using S96 = WsSplitTile<96, 6>;
      using S96s5 = WsSplitTile<96, 5>;
      printf("  v36 checks (96-column split tile):\n");
      check_ws_small<S96>(bb, 111, 64, 3, "split<96,6st>");
      check_ws_small<S96>(bb, 1000, 200, 67, "split<96,6st>");
      check_ws_small<S96>(bb, 1000, 4096, 96, "split<96,6st>");
      check_ws_small<S96>(bb, 32000, 256, 200, "split<96,6st>");
      check_ws_small<S96>(bb, 1000, 200, 389, "split<96,6st>");
      compare_ws<S96, Tile128, WgTile128>(bb, 65, 1, "split<96,6st>");
      compare_ws<S96, Tile128, WgTile128>(bb, 80, 1, "split<96,6st>");
      compare_ws<S96, Tile128, WgTile128>(bb, 96, 1, "split<96,6st>");
      compare_ws<S96, Tile128, WgTile256>(bb, 192, 1, "split<96,6st>");
      printf("  v36 timings (two rounds):\n");
      for (int round = 0; round < 2; ++round)
        for (int64_t B : {65, 80, 96}) {
          ws_row("split<128,4st> (prod)", B, time_ws<S128>(bb, B));
          ws_row("split<96,6st>", B, time_ws<S96>(bb, B));
          ws_row("split<96,5st>", B, time_ws<S96s5>(bb, B));
        }
      for (int64_t B : {96, 192})
        ws_row("split<96,6st> greedy", B, time_ws_greedy<S96>(bb, B));
      ws_row("split<128,4st> greedy", 96, time_ws_greedy<S128>(bb, 96));
      ws_row("split<96,6st> B=192", 192, time_ws<S96>(bb, 192));
      ws_row("split<128,4st> B=192", 192, time_ws<S128>(bb, 192));
    }  // section v36
    // v37 (the last partial chunk moved back to end at row B - 1, so no H rows past the batch; run
    // 41, library A/B in device call 58): slower (B = 160 457 -> 497 us), removed again (code:
    // 421a1f1).
    // v35 (epilogue column groups taken from a shared counter, run 39): no gain, removed again
    // (code: the commit that adds run 39 to NOTES.md).
    // v34 (the logits buffer unpadded and swizzled, a 5th ring stage at N = 128; runs 36-38): -2 ...
    // -4 % at B = 256, worse at B = 96 and B <= 64; not adopted (code: the commit that adds run 36-38
    // to NOTES.md).
    // v33 (the bound of a cluster multicasting H: H copied for even k-slices only, run 35): no
    // gain at B = 128, <= 3 % at 256; its producer was a copy of ws_tma_produce (an explicit
    // specialization) and is removed rather than left to drift from the producer it bounds (code:
    // 363d568).
    // v32 (split rings: W and H in rings of their own, two producer threads; run 34): slower at
    // every B, removed again (code: the commit that adds run 34 to NOTES.md).
    // v30 (W prefetched into L2 ahead of the ring, run 32): slower at every B, removed again (code:
    // the commit that adds run 32 to NOTES.md).
    // v24 / v24b (the Philox bits' leading zeros drawn in the K loop, runs 24-25): slower, removed
    // again; v25 (the K loop's descriptors by one add, run 26): adopted, the only way wgmma_ws.cuh
    // builds them; v25b (its bases through a lane-0 shuffle, run 27): not adopted (code: cf4af26).
    // v20 / v22 (shared packed running winners; each item starting from the grid's winners, runs
    // 19 and 21): adopted, now the only kSampleOne scheme of wgmma_ws.cuh. v23 (the group picked by
    // a switch instead of rotating the accumulators, run 22): no gain, removed again (code: the
    // commit that adds runs 18-22 to NOTES.md).
    // v18 (the first item's pruning threshold seeded with an exact lower bound, run 17): no
    // measurable gain, removed again (code: the commit that adds run 17 to NOTES.md).
    // v14 (U column groups per trip of the rolled epilogue, run 15): measured slower and removed
    // again (code: commit 1ceb7ef).
  }
  if (ws_only) {
    printf("done\n");
    return 0;
  }
#ifndef HARNESS_QUICK
  compare_wgmma_mma<WgTile32, Tile32>(bb, 32);
  compare_wgmma_mma<WgTile64, Tile64>(bb, 64);
  compare_wgmma_mma<WgTile128, Tile128>(bb, 128);
  compare_wgmma_mma<WgTile256, Tile128>(bb, 256);
  compare_wgmma_mma<WgTile<8, 1, 6>, Tile8>(bb, 1);
  compare_wgmma_mma<WgTile<16, 1, 6>, Tile16>(bb, 16);
  row("wg<8,1wg,6st>", 1, time_variant<WgTile<8, 1, 6>, true>(bb, 1));
  row("wg<8,1wg,4st>", 1, time_variant<WgTile<8, 1, 4>, true>(bb, 1));
  row("wg<8,1wg,6st> B=8", 8, time_variant<WgTile<8, 1, 6>, true>(bb, 8));
  row("wg<16,1wg,6st>", 16, time_variant<WgTile<16, 1, 6>, true>(bb, 16));
  row("WgTile32 <32,1wg,5st> (prod)", 32, time_variant<WgTile32, true>(bb, 32));
  row("wg<32,1wg,4st>", 32, time_variant<WgTile<32, 1, 4>, true>(bb, 32));
  row("wg<32,1wg,7st>", 32, time_variant<WgTile<32, 1, 7>, true>(bb, 32));
  row("WgTile64 <64,1wg,4st> (prod)", 64, time_variant<WgTile64, true>(bb, 64));
  row("wg<64,1wg,3st>", 64, time_variant<WgTile<64, 1, 3>, true>(bb, 64));
  row("wg<64,1wg,5st>", 64, time_variant<WgTile<64, 1, 5>, true>(bb, 64));
  row("wg<32,2wg,4st>", 64, time_variant<WgTile<32, 2, 4>, true>(bb, 64));
  row("wg<32,2wg,6st>", 64, time_variant<WgTile<32, 2, 6>, true>(bb, 64));
  compare_wgmma_mma<WgTile<32, 2, 6>, Tile64>(bb, 64);
  compare_wgmma_mma<WgTile<64, 1, 5>, Tile64>(bb, 64);
  row("WgTile128 <64,2wg,4st> (prod)", 128, time_variant<WgTile128, true>(bb, 128));
  row("wg<64,2wg,3st>", 128, time_variant<WgTile<64, 2, 3>, true>(bb, 128));
  row("wg<128,1wg,4st>", 128, time_variant<WgTile<128, 1, 4>, true>(bb, 128));
  row("wg<128,1wg,3st> (2 CTAs/SM)", 128, time_variant<WgTile<128, 1, 3>, true>(bb, 128));
  row("wg<128,1wg,3st> (2 CTAs/SM)", 256, time_variant<WgTile<128, 1, 3>, true>(bb, 256));
  compare_wgmma_mma<WgTile<128, 1, 3>, Tile128>(bb, 128);
  row("WgTile256 <128,2wg,4st> (prod)", 256, time_variant<WgTile256, true>(bb, 256));
  row("wg<128,2wg,3st>", 256, time_variant<WgTile<128, 2, 3>, true>(bb, 256));
  row("WgTile256 S=4", 256, time_variant<WgTile256, true>(bb, 256, 4));
  row("WgTile64 S=4", 64, time_variant<WgTile64, true>(bb, 64, 4));
#endif  // HARNESS_QUICK
  printf("done\n");
  return 0;
}
