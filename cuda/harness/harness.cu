// Standalone harness for the CUDA kernels (llm.c dev/cuda style): checks the fused sampler and the
// reference end to end against a CPU implementation (float64 logits from the stored operand values,
// the same noise.h on the host), then every kernel and tile the dispatch table (cuda/dispatch.cuh)
// can run against the others (stored logits, winner words), then times them on the llama3-8b LM
// head. Build and run: cuda/harness/run.sh [--bench-only | --ws-only | --profile NAME B | --probe]
// (timings only; the wgmma tiles only; NAME's kernel alone at batch B, for ncu, PROFILE_GREEDY=1 for
// greedy rows; whether a device answers). Exits on a CUDA error outside the tile launches.
//
// Only what production dispatches lives in cuda/kernels; a variant being tried lives here as a config
// of its own. Variants that lost are one line each in bench/TUNING.md ("Tried and did not work").
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "../dispatch.cuh"
#include "../include/launchers.h"
#include "../include/noise.h"
#include "../include/params.h"

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

// Device copy of a host vector, and host copy of n device elements.
template <class T>
static T* upload(const std::vector<T>& h) {
  T* d;
  CK(cudaMalloc(&d, h.size() * sizeof(T)));
  CK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}
template <class T>
static std::vector<T> download(const T* d, int64_t n) {
  std::vector<T> h(n);
  CK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
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
// A row's logits: float(float64 logit), as the GPU's fp32 logits would be.
using CpuRow = std::vector<float>;

static CpuRow cpu_logits(const float* h, const float* w, const float* bias, int64_t V, int64_t D) {
  CpuRow r(V);
  parallel_for(V, [&](int64_t lo, int64_t hi) {
    for (int64_t v = lo; v < hi; ++v) {
      const float* wr = w + v * D;
      double acc = 0.0;
      for (int64_t d = 0; d < D; ++d) acc += static_cast<double>(h[d]) * static_cast<double>(wr[d]);
      if (bias) acc += static_cast<double>(bias[v]);
      r[v] = static_cast<float>(acc);
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
  return make_candidate(r[v], inv, greedy, g, static_cast<uint32_t>(v));
}

static Candidate cpu_gumbel(const CpuRow& r, float T, uint64_t seed, uint64_t off, uint32_t stream,
                            uint32_t s) {
  Candidate best = empty_candidate();
  const int64_t V = r.size();
  for (int64_t v = 0; v < V; ++v) {
    const Candidate c = cpu_candidate(r, T, seed, off, stream, s, v);
    if (candidate_better(c, best)) best = c;
  }
  return best;
}

static int32_t cpu_inverse_cdf(const CpuRow& r, float T, uint64_t seed, uint64_t off, uint32_t stream,
                               uint32_t s) {
  const int64_t V = r.size();
  if (T == 0.0f) {  // greedy: the argmax, as the Gumbel-max sampler's
    const Candidate best = cpu_gumbel(r, T, seed, off, stream, s);
    return best.key == kNoToken ? -1 : static_cast<int32_t>(best.key & 0x7fffffffu);
  }
  float mx = -INFINITY;
  bool any = false, inf = false;
  for (float l : r) {
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
  for (float l : r) total += weight(l);
  const Philox4 x = philox4x32_10(s, stream, static_cast<uint32_t>(off), static_cast<uint32_t>(off >> 32),
                                  static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  const double target = (static_cast<double>(x.x[0]) + 0.5) * 0x1p-32 * total;
  double cum = 0.0;
  int32_t last = -1;
  for (int64_t v = 0; v < V; ++v) {
    const double w = weight(r[v]);
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
  float* dT = upload(T);
  uint64_t *dSeed = upload(seed), *dOff = upload(off);
  int32_t *dTokF, *dTokG, *dTokI, *dStatF, *dStatG, *dStatI;
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

  const std::vector<int32_t> tokF = download(dTokF, B * S), tokG = download(dTokG, B * S),
                             tokI = download(dTokI, B * S), stF = download(dStatF, B), stG = download(dStatG, B),
                             stI = download(dStatI, B);

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
// A failing tile launch prints its error and costs its row or check, not the run; a sticky error
// (a fault inside a kernel) leaves the context unusable, so sticky() stops the harness.
static bool soft(cudaError_t e, const char* what, int line) {
  if (e == cudaSuccess) return true;
  printf("  CUDA error %s (%s) in %s, harness.cu:%d\n", cudaGetErrorName(e), cudaGetErrorString(e), what, line);
  fflush(stdout);
  return false;
}
#define SOFT(call) soft((call), #call, __LINE__)

static void sticky(const char* where) {
  cudaGetLastError();  // clears a non-sticky launch error
  const cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) {
    printf("  %s: device error %s (%s) is sticky: the CUDA context is lost, harness stops\n", where,
           cudaGetErrorName(e), cudaGetErrorString(e));
    fflush(stdout);
    exit(2);
  }
}

// Median of `iters` back-to-back calls: events between consecutive calls, all enqueued before one
// synchronize, so host-side launch work overlaps the device (as in a decode loop). -1 on a CUDA
// error (printed).
static double median_us(int iters, const std::function<cudaError_t(int)>& fn) {
  for (int i = 0; i < 5; ++i)  // warm-up
    if (!SOFT(fn(i))) return -1.0;
  if (!SOFT(cudaDeviceSynchronize())) return -1.0;
  std::vector<cudaEvent_t> ev(iters + 1);
  for (auto& e : ev) CK(cudaEventCreate(&e));
  bool ok = SOFT(cudaEventRecord(ev[0]));
  for (int i = 0; ok && i < iters; ++i) ok = SOFT(fn(i)) && SOFT(cudaEventRecord(ev[i + 1]));
  ok = ok && SOFT(cudaEventSynchronize(ev[iters]));
  std::vector<float> ts;
  for (int i = 0; ok && i < iters; ++i) {
    float ms = 0.0f;
    ok = SOFT(cudaEventElapsedTime(&ms, ev[i], ev[i + 1]));
    ts.push_back(ms * 1000.0f);
  }
  for (auto& e : ev) cudaEventDestroy(e);
  sticky("median_us");
  if (!ok) return -1.0;
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

// The llama3-8b LM head (or HARNESS_SHAPE=V,D), bf16, 3 weight buffers rotated (> 2 x the 60 MB L2
// for heads of 40 MB and more); logits of std 3 at every D.
struct Bench {
  int64_t V = 128256, D = 4096, Bmax = 256;
  Bench() {
    const char* s = getenv("HARNESS_SHAPE");
    long long v = 0, d = 0;
    if (s != nullptr && sscanf(s, "%lld,%lld", &v, &d) == 2 && v > 0 && d > 0) {
      V = v;
      D = d;
    }
  }
  int nbuf = 3;
  char* wbase = nullptr;
  void* H = nullptr;
  float* T = nullptr;
  float* T0 = nullptr;  // all zeros: every row greedy (no noise)
  uint64_t *seed = nullptr, *off = nullptr;
  int32_t* tok = nullptr;
  int32_t* status = nullptr;
  unsigned long long* winners = nullptr;
  float* logits = nullptr;  // [Bmax, V], the kStore rows
  size_t wbytes() const { return V * D * 2; }
  const void* W(int i) const { return wbase + (i % nbuf) * wbytes(); }

  void init() {
    CK(cudaMalloc(&wbase, nbuf * wbytes()));
    fill(wbase, nbuf * V * D, DType::kBF16, 99, 3.0f / std::sqrt(static_cast<float>(D)), 0);
    CK(cudaMalloc(&H, Bmax * D * 2));
    fill(H, Bmax * D, DType::kBF16, 98, 1.0f, 0);
    std::vector<uint64_t> s(Bmax);
    for (int64_t b = 0; b < Bmax; ++b) s[b] = 1000 + b;
    T = upload(std::vector<float>(Bmax, 1.0f));
    T0 = upload(std::vector<float>(Bmax, 0.0f));
    seed = upload(s);
    off = upload(std::vector<uint64_t>(Bmax, 7));
    CK(cudaMalloc(&tok, Bmax * 64 * 4));
    CK(cudaMalloc(&status, Bmax * 4));
    CK(cudaMalloc(&winners, Bmax * 64 * 8));
    CK(cudaMalloc(&logits, Bmax * V * 4));
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

// ---- the production tiles ------------------------------------------------------------------------
// Each launches exactly one kernel (no fallback), bf16 operands, on stream 0; launch_persistent
// raises this TU's copy's shared-memory limit (its registry is keyed by the kernel's pointer).
using cuda::detail::Epi;
using cuda::detail::GemmArgs;

template <class F>
static cudaError_t with_epi(Epi epi, F f) {
  switch (epi) {
    case Epi::kSampleOne: return f(std::integral_constant<Epi, Epi::kSampleOne>{});
    case Epi::kSampleMany: return f(std::integral_constant<Epi, Epi::kSampleMany>{});
    default: return f(std::integral_constant<Epi, Epi::kStore>{});
  }
}

// The split tile (kSampleOne only); cudaErrorNotSupported where its tensor maps cannot be encoded.
template <class Cfg>
static cudaError_t launch_split(GemmArgs a, Epi epi) {
  using namespace cuda::detail;
  WsTensorMaps maps{};
  if (epi != Epi::kSampleOne || !encode_ws_maps<Cfg>(a, false, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, &maps))
    return cudaErrorNotSupported;
  return launch_persistent<Cfg, false, true>(wgmma_split_kernel<Cfg, false>, a, 0, maps);
}

// The ping-pong tile (several samples a row, or the logits; one sample is the split tile's).
template <class Cfg>
static cudaError_t launch_pingpong_tma(GemmArgs a, Epi epi) {
  using namespace cuda::detail;
  WsTensorMaps maps{};
  if (!encode_ws_maps<Cfg>(a, false, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, &maps)) return cudaErrorNotSupported;
  return with_epi(epi, [&](auto e) -> cudaError_t {
    if constexpr (decltype(e)::value == Epi::kSampleOne) return cudaErrorNotSupported;
    else return launch_persistent<Cfg, false, true>(wgmma_ws_tma_kernel<Cfg, false, decltype(e)::value>, a, 0, maps);
  });
}

template <class Cfg, bool kBalanced>
static cudaError_t launch_mma(GemmArgs a, Epi epi) {
  return with_epi(epi, [&](auto e) {
    return cuda::detail::launch_mma_sync<Cfg, false, decltype(e)::value, kBalanced>(a, 0);
  });
}

// The SIMT rows run kSampleMany for one sample too (launch_gemm); same winner words.
template <class Cfg>
static cudaError_t launch_simt(GemmArgs a, Epi epi) {
  if (epi == Epi::kSampleOne) epi = Epi::kSampleMany;
  return with_epi(epi, [&](auto e) -> cudaError_t {
    if constexpr (decltype(e)::value == Epi::kSampleOne) return cudaErrorNotSupported;
    else return cuda::detail::launch_simt<Cfg, __nv_bfloat16, decltype(e)::value>(a, 0);
  });
}

enum class Family { kWgmma, kMmaSync, kSimt };
constexpr unsigned kOne = 1u << int(Epi::kSampleOne), kAll = 7u, kNotOne = kAll & ~kOne;

struct TileEntry {
  const char* name;  // row label and --profile name
  Family family;
  unsigned epis;      // the epilogues production runs it with (bit per Epi)
  int64_t bench[2];   // the llama3-8b batches it is timed at (0: none), within its dispatch range
  cudaError_t (*launch)(GemmArgs, Epi);
  bool runs(Epi e) const { return (epis >> int(e)) & 1u; }
};

// Every kernel and tile the dispatch table can run, in its order (bf16; f16 is the same code with
// the other MMA type and is covered end to end by the CPU checks).
static const TileEntry kTiles[] = {
    // 9.0, kSampleOne: the split tiles (96 where 96-column chunks pad fewer than 128-column ones)
    {"split16", Family::kWgmma, kOne, {1, 16}, launch_split<cuda::detail::WsSplitTile16>},
    {"split32", Family::kWgmma, kOne, {32, 0}, launch_split<cuda::detail::WsSplitTile32>},
    {"split64", Family::kWgmma, kOne, {64, 0}, launch_split<cuda::detail::WsSplitTile64>},
    {"split96", Family::kWgmma, kOne, {96, 192}, launch_split<cuda::detail::WsSplitTile96>},
    {"split128", Family::kWgmma, kOne, {128, 256}, launch_split<cuda::detail::WsSplitTile128>},
    // 9.0, several samples and kStore: the ping-pong tiles
    {"ws16", Family::kWgmma, kNotOne, {1, 16}, launch_pingpong_tma<cuda::detail::WsTileT<16>>},
    {"ws32", Family::kWgmma, kNotOne, {32, 0}, launch_pingpong_tma<cuda::detail::WsTileT<32>>},
    {"ws64", Family::kWgmma, kNotOne, {64, 0}, launch_pingpong_tma<cuda::detail::WsTileT<64>>},
    {"ws128", Family::kWgmma, kNotOne, {128, 256}, launch_pingpong_tma<cuda::detail::WsTileT<128>>},
    // 8.x, FLASHSAMPLE_NO_WGMMA, or no tensor maps: mma.sync, balanced ranges for B <= 16
    {"tile8", Family::kMmaSync, kAll, {1, 8}, launch_mma<cuda::detail::Tile8, true>},
    {"tile16", Family::kMmaSync, kAll, {16, 0}, launch_mma<cuda::detail::Tile16, true>},
    {"tile32", Family::kMmaSync, kAll, {32, 0}, launch_mma<cuda::detail::Tile32, false>},
    {"tile64", Family::kMmaSync, kAll, {64, 0}, launch_mma<cuda::detail::Tile64, false>},
    {"tile128", Family::kMmaSync, kAll, {128, 256}, launch_mma<cuda::detail::Tile128, false>},
    // f32 operands or rows not 16-byte aligned (timed here on the aligned bf16 bench inputs)
    {"simt-small", Family::kSimt, kAll, {1, 8}, launch_simt<cuda::detail::SimtSmall>},
    {"simt-large", Family::kSimt, kAll, {64, 0}, launch_simt<cuda::detail::SimtLarge>},
};

static const TileEntry& tile(const char* name) {
  for (const TileEntry& t : kTiles)
    if (strcmp(t.name, name) == 0) return t;
  fprintf(stderr, "no tile %s\n", name);
  exit(2);
}

static bool g_ws_only = false;
static bool selected(const TileEntry& t) { return !g_ws_only || t.family == Family::kWgmma; }

static int g_check_failures = 0;

// Winner words of one launch (`epi` a sampling epilogue, S = a.num_samples), or empty on an error.
static std::vector<unsigned long long> winners_of(const TileEntry& t, GemmArgs a, Epi epi, unsigned long long* d) {
  const int64_t n = a.batch * a.num_samples;
  a.winners = d;
  CK(cudaMemset(d, 0, n * 8));
  const bool ok = SOFT(t.launch(a, epi));
  sticky(t.name);
  return ok ? download(d, n) : std::vector<unsigned long long>();
}

// Every selected tile's winner words against tile128's (S = a.num_samples; S > 1: kSampleMany).
// The mma.sync and wgmma kernels sum each logit in k16 steps into fp32 accumulators and their
// winners have been identical in every logged run; SIMT sums in another order, so a near-tie may
// move: at most 1 % of the words. Returns the failing tiles; `notes` gets every tile that differs.
static int check_winners(const GemmArgs& a, unsigned long long* d, int* tiles, std::string* notes) {
  const Epi epi = a.num_samples == 1 ? Epi::kSampleOne : Epi::kSampleMany;
  const int64_t n = a.batch * a.num_samples;
  const std::vector<unsigned long long> ref = winners_of(tile("tile128"), a, epi, d);
  int bad = 0;
  for (const TileEntry& t : kTiles) {
    if (!selected(t) || !t.runs(epi)) continue;
    ++*tiles;
    const std::vector<unsigned long long> w = winners_of(t, a, epi, d);
    const bool launched = !ref.empty() && w.size() == ref.size();
    int64_t diff = launched ? 0 : n + 1, empty = 0;
    for (size_t i = 0; launched && i < w.size(); ++i) {
      diff += w[i] != ref[i];
      empty += w[i] == 0;
    }
    const bool ok = empty == 0 && (t.family == Family::kSimt ? diff <= n / 100 : diff == 0);
    bad += !ok;
    if (diff != 0 || empty != 0)
      *notes += std::string(" ") + t.name + ": " + std::to_string(diff) + " differ, " + std::to_string(empty) +
                " empty" + (ok ? ";" : " (MISMATCH);");
  }
  return bad;
}

// One odd shape (partial vocabulary tile, padding columns, bias): every selected tile's stored
// logits (kStore) against the ws128 tile's (the reference sampler's kernel for B > 64), bitwise for
// the wgmma tiles (same summation), max |difference| below 1e-3 for the others, every [B, V]
// element written and nothing past it; then the winner words (check_winners).
static void check_shape(const Bench& bb, int64_t V, int64_t D, int64_t B) {
  const int64_t guard = 4096, nl = B * V;
  void *dW, *dH, *dBias;
  float* dL;
  CK(cudaMalloc(&dW, V * D * 2));
  CK(cudaMalloc(&dH, B * D * 2));
  CK(cudaMalloc(&dBias, V * 2));
  CK(cudaMalloc(&dL, (nl + guard) * 4));
  fill(dW, V * D, DType::kBF16, 501, 3.0f / std::sqrt(static_cast<float>(D)), 0);
  fill(dH, B * D, DType::kBF16, 502, 1.0f, 0);
  fill(dBias, V, DType::kBF16, 503, 1.0f, 0);
  SampleParams p = bb.params(B, 1, 0);
  p.hidden = dH;
  p.weight = dW;
  p.bias = dBias;
  p.vocab = V;
  p.dim = D;
  GemmArgs a = cuda::detail::gemm_args(p);
  auto stored = [&](const TileEntry& t) -> std::vector<uint32_t> {
    CK(cudaMemset(dL, 0xFF, (nl + guard) * 4));  // NaN sentinel
    GemmArgs s = a;
    s.logits = dL;
    const bool ok = SOFT(t.launch(s, Epi::kStore));
    sticky(t.name);
    return ok ? download(reinterpret_cast<const uint32_t*>(dL), nl + guard) : std::vector<uint32_t>();
  };
  const std::vector<uint32_t> ref = stored(tile("ws128"));
  int bad = 0, n_store = 0, n_win = 0;
  double worst = 0.0;
  for (const TileEntry& t : kTiles) {
    if (!selected(t) || !t.runs(Epi::kStore)) continue;
    ++n_store;
    const std::vector<uint32_t> h = stored(t);
    const bool launched = !h.empty() && !ref.empty();
    int64_t unwritten = 0, guard_hit = 0, bit_diff = 0;
    double max_abs = 0.0;
    for (int64_t i = 0; launched && i < nl + guard; ++i) {
      if (i >= nl) {
        guard_hit += h[i] != 0xFFFFFFFFu;
        continue;
      }
      unwritten += h[i] == 0xFFFFFFFFu;
      bit_diff += h[i] != ref[i];
      float x, y;
      memcpy(&x, &h[i], 4);
      memcpy(&y, &ref[i], 4);
      max_abs = std::max(max_abs, static_cast<double>(std::fabs(x - y)));
    }
    worst = std::max(worst, max_abs);
    if (!launched || unwritten || guard_hit || (t.family == Family::kWgmma ? bit_diff != 0 : !(max_abs < 1e-3))) {
      ++bad;
      printf("    %-10s store: %lld/%lld differ in bits from ws128, max |diff| %.3g, unwritten %lld, written "
             "past the end %lld%s => MISMATCH\n", t.name, (long long)bit_diff, (long long)nl, max_abs,
             (long long)unwritten, (long long)guard_hit, launched ? "" : " (launch failed)");
    }
  }
  std::string notes;
  bad += check_winners(a, bb.winners, &n_win, &notes);
  printf("  V=%-6lld D=%-4lld B=%-3lld bias: stored logits of %d tiles = ws128 (wgmma bitwise; max |diff| %.3g), "
         "winners of %d tiles = tile128%s => %s\n", (long long)V, (long long)D, (long long)B, n_store, worst, n_win,
         notes.c_str(), bad == 0 ? "OK" : "MISMATCH");
  fflush(stdout);
  g_check_failures += bad;
  CK(cudaFree(dL));
  CK(cudaFree(dW));
  CK(cudaFree(dH));
  CK(cudaFree(dBias));
}

// The bench inputs (llama3-8b) at batch B, S samples: the winner words (check_winners).
static void check_bench(const Bench& bb, int64_t B, int S) {
  std::string notes;
  int n = 0;
  const int bad = check_winners(cuda::detail::gemm_args(bb.params(B, S, 0)), bb.winners, &n, &notes);
  printf("  llama3-8b B=%-3lld S=%d: winners of %d tiles = tile128%s => %s\n", (long long)B, S, n, notes.c_str(),
         bad == 0 ? "IDENTICAL" : "MISMATCH");
  fflush(stdout);
  g_check_failures += bad;
}

// kSampleOne, kSampleOne with every row greedy (no noise), kSampleMany with 4 samples, kStore.
enum class Mode { kOne, kGreedy, kMany, kStore };

// The tile's kernel alone on the bench inputs (the winners memset included for the sampling
// epilogues); NAN where production does not run the tile with that epilogue, -1 on an error.
static double time_tile(const Bench& bb, const TileEntry& t, int64_t B, Mode m, int iters = 50) {
  const int S = m == Mode::kMany ? 4 : 1;
  const Epi epi = m == Mode::kStore ? Epi::kStore : m == Mode::kMany ? Epi::kSampleMany : Epi::kSampleOne;
  if (!t.runs(epi)) return NAN;
  return median_us(iters, [&](int i) -> cudaError_t {
    SampleParams p = bb.params(B, S, i);
    if (m == Mode::kGreedy) p.temperature = bb.T0;
    GemmArgs a = cuda::detail::gemm_args(p);
    a.winners = bb.winners;
    a.logits = bb.logits;
    if (epi != Epi::kStore) {
      const cudaError_t e = cudaMemsetAsync(bb.winners, 0, B * S * 8, 0);
      if (e != cudaSuccess) return e;
    }
    return t.launch(a, epi);
  });
}

static std::string us_cell(double us) {
  if (us != us) return "-";
  if (us < 0) return "FAILED";
  char s[32];
  snprintf(s, sizeof s, "%.1f", us);
  return s;
}

int main(int argc, char** argv) {
  g_threads = std::max(2u, std::thread::hardware_concurrency());
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "--probe") {
    int n = 0;
    CK(cudaGetDeviceCount(&n));
    printf("probe ok: %d device(s)\n", n);
    return 0;
  }
  if (mode == "--profile") {
    if (argc < 4) {
      fprintf(stderr, "usage: harness --profile NAME B (NAME:");
      for (const TileEntry& t : kTiles) fprintf(stderr, " %s", t.name);
      fprintf(stderr, ")\n");
      return 2;
    }
    // NAME's kernel alone, 5 + 20 calls, nothing else: the target of an ncu run
    const char* greedy = getenv("PROFILE_GREEDY");
    Bench bb;
    bb.init();
    const double us = time_tile(bb, tile(argv[2]), atoll(argv[3]),
                                greedy != nullptr && greedy[0] == '1' ? Mode::kGreedy : Mode::kOne, 20);
    printf("profiled %s B=%s: %.1f us\n", argv[2], argv[3], us);
    return us < 0 ? 1 : 0;
  }
  if (mode == "--split") {
    // The split tiles at the batches of argv[2] (default 1,16,32,64,96,128,192,256) on the bench
    // shape: sampled rows against greedy ones (no noise: what the Gumbel epilogue costs), and the
    // end-to-end call.
    Bench bb;
    bb.init();
    std::vector<int64_t> batches = {1, 16, 32, 64, 96, 128, 192, 256};
    if (argc > 2) {
      batches.clear();
      for (const char* q = argv[2]; *q;) {
        batches.push_back(atoll(q));
        while (*q && *q != ',') ++q;
        if (*q == ',') ++q;
      }
    }
    printf("V=%lld D=%lld floor(B=1) %.1f us\n", (long long)bb.V, (long long)bb.D, bb.floor_us(1));
    printf("%-5s %-9s %9s %9s %7s %7s\n", "B", "tile", "sample", "greedy", "s/g", "ratio");
    for (int64_t B : batches) {
      const double f = median_us(50, [&](int i) { return cuda::launch_fused_sample(bb.params(B, 1, i), 0); });
      printf("%-5lld %-9s %9.1f %9s %7s %7.3f\n", (long long)B, "call", f, "", "", f / bb.floor_us(B));
      const struct {
        const char* name;
        int n;  // the tile's batch columns
      } splits[] = {{"split16", 16}, {"split32", 32}, {"split64", 64}, {"split96", 96}, {"split128", 128}};
      for (const auto& [name, n] : splits) {
        const TileEntry& t = tile(name);
        if (n < 96 && B > n) continue;
        const double s1 = time_tile(bb, t, B, Mode::kOne), g1 = time_tile(bb, t, B, Mode::kGreedy);
        printf("%-5lld %-9s %9.1f %9.1f %7.3f %7.3f\n", (long long)B, name, s1, g1, s1 / g1, s1 / bb.floor_us(B));
      }
      fflush(stdout);
    }
    return 0;
  }
  const bool bench_only = mode == "--bench-only";
  g_ws_only = mode == "--ws-only";
  if (!mode.empty() && !bench_only && !g_ws_only) {
    fprintf(stderr, "usage: harness [--bench-only | --ws-only | --profile NAME B | --probe]\n");
    return 2;
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("device %s, %d SMs, L2 %d MB, smem/block optin %zu KB, host threads %d\n", prop.name,
         prop.multiProcessorCount, prop.l2CacheSize >> 20, prop.sharedMemPerBlockOptin >> 10, g_threads);
  if (prop.major != 9 || prop.minor != 0) {
    printf("the harness is built for sm_90a only (compute capability 9.0)\n");
    return 2;
  }
  cudaMemPool_t pool;
  CK(cudaDeviceGetDefaultMemPool(&pool, 0));
  uint64_t threshold = UINT64_MAX;
  CK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));

  bool cases_pass = true;
  if (!bench_only && !g_ws_only) {
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
    cases_pass = tot.failures == 0 && tot.agree >= 0.999 * tot.tokens && tot.inv_agree >= 0.99 * tot.inv_total;
    printf("\nCHECKS: fused~cpu %lld/%lld = %.4f%% (hard mismatches %lld) | fused==refGumbel %lld/%lld | "
           "invcdf~cpu %lld/%lld | failing cases %d => %s\n\n",
           (long long)tot.agree, (long long)tot.tokens, 100.0 * tot.agree / std::max<int64_t>(1, tot.tokens),
           (long long)tot.hard, (long long)tot.ref_same, (long long)tot.ref_total, (long long)tot.inv_agree,
           (long long)tot.inv_total, tot.failures,
           cases_pass ? "ALL PASS" : "SOME FAIL");
    fflush(stdout);
  }

  Bench bb;
  bb.init();
  if (!bench_only) {
    printf("tile checks (%s):\n", g_ws_only ? "the wgmma tiles" : "every tile of the dispatch table");
    // {V, D, B <= bb.Bmax}; the last: balanced ranges (tile8, tile16), the last range partial
    const int64_t shapes[][3] = {{111, 64, 3},     {111, 64, 129},    {1000, 4096, 1},   {1000, 4096, 99},
                                 {1000, 200, 67},  {32000, 256, 200}, {32000, 256, 256}, {151936, 64, 3}};
    for (const auto& s : shapes) check_shape(bb, s[0], s[1], s[2]);
    for (int64_t B : {1, 16, 32, 64, 96, 128, 192, 256}) check_bench(bb, B, 1);
    for (int64_t B : {1, 64, 256}) check_bench(bb, B, 4);
    printf("TILE CHECKS: %d failing => %s\n\n", g_check_failures, g_check_failures == 0 ? "ALL PASS" : "SOME FAIL");
    fflush(stdout);
  }

  if (!g_ws_only) {
    unsigned int* sink;
    CK(cudaMalloc(&sink, 4));
    const size_t bytes = bb.nbuf * bb.wbytes();
    const double us = median_us(20, [&](int) { return cuda::launch_read_stream(bb.wbase, bytes, sink, 0); });
    printf("read_stream %.2f GB: %.1f us = %.3f TB/s\n", bytes / 1e9, us, bytes / us / 1e6);
    // End to end: launch_fused_sample (dispatch, clear and finalize kernels) against the reference.
    printf("\n%-5s %-3s %10s %10s %8s | %12s %12s\n", "B", "S", "fused_us", "floor_us", "ratio", "refInv_us",
           "refGumbel_us");
    for (int64_t B : {1, 8, 16, 32, 64, 96, 128, 192, 256}) {
      const double f = median_us(50, [&](int i) { return cuda::launch_fused_sample(bb.params(B, 1, i), 0); });
      const double ri = median_us(20, [&](int i) {
        return cuda::launch_reference_sample(bb.params(B, 1, i), ReferenceMethod::kInverseCdf, 0);
      });
      const double rg = median_us(20, [&](int i) {
        return cuda::launch_reference_sample(bb.params(B, 1, i), ReferenceMethod::kGumbel, 0);
      });
      printf("%-5lld %-3d %10.1f %10.1f %8.3f | %12.1f %12.1f   (W stream %.2f TB/s)\n", (long long)B, 1, f,
             bb.floor_us(B), f / bb.floor_us(B), ri, rg, bb.wbytes() / f / 1e6);
      fflush(stdout);
    }
    for (int64_t B : {1, 64}) {
      const double f = median_us(50, [&](int i) { return cuda::launch_fused_sample(bb.params(B, 4, i), 0); });
      printf("%-5lld %-3d %10.1f %10.1f %8.3f\n", (long long)B, 4, f, bb.floor_us(B), f / bb.floor_us(B));
    }
  }

  // Each tile's kernel alone (us; "-": production does not run it with that epilogue), and the
  // ratio of kSampleOne (else kStore) to the floor.
  printf("\ntiles (kernel alone, us):\n  %-10s %-5s %9s %9s %9s %9s %7s\n", "tile", "B", "sample", "greedy",
         "S=4", "store", "ratio");
  for (const TileEntry& t : kTiles) {
    if (!selected(t)) continue;
    for (int64_t B : t.bench) {
      if (B == 0) continue;
      double us[4];
      for (int m = 0; m < 4; ++m) us[m] = time_tile(bb, t, B, static_cast<Mode>(m));
      const double head = us[0] == us[0] ? us[0] : us[3];
      printf("  %-10s %-5lld %9s %9s %9s %9s %7.3f\n", t.name, (long long)B, us_cell(us[0]).c_str(),
             us_cell(us[1]).c_str(), us_cell(us[2]).c_str(), us_cell(us[3]).c_str(), head / bb.floor_us(B));
      fflush(stdout);
    }
  }
  printf("done\n");
  return cases_pass && g_check_failures == 0 ? 0 : 1;
}
