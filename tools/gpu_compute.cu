// The GPU side of `vtensor calibrate --compute` (tools/gpu_compute.hpp): cuBLAS GEMMs opened at
// run time, and the decode-attention kernels of Note [Decode attention kernels].

#include "tools/gpu_compute.hpp"

#include <cublas_v2.h>  // types and constants only: every cuBLAS call goes through dlopen/dlsym
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace vtensor::tools {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw gpu_error(std::string(what) + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
  }
}

// ---- cuBLAS, opened at run time ----------------------------------------------------------------

using create_fn = cublasStatus_t (*)(cublasHandle_t*);
using destroy_fn = cublasStatus_t (*)(cublasHandle_t);
using version_fn = cublasStatus_t (*)(cublasHandle_t, int*);
using gemm_ex_fn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                      const void*, cudaDataType, int, const void*, cudaDataType, int, const void*,
                                      void*, cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);

struct cublas_api {
  void* lib = nullptr;
  create_fn create = nullptr;
  destroy_fn destroy = nullptr;
  version_fn version = nullptr;
  gemm_ex_fn gemm_ex = nullptr;

  cublas_api() {
    std::vector<std::string> names;
    if (const char* env = std::getenv("VTENSOR_CUBLAS")) names.emplace_back(env);
    names.insert(names.end(), {"libcublas.so.13", "libcublas.so.12", "libcublas.so",
                               "/usr/local/cuda/lib64/libcublas.so.13", "/usr/local/cuda/lib64/libcublas.so"});
    std::string tried;
    for (const auto& n : names) {
      lib = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (lib != nullptr) break;
      tried += (tried.empty() ? "" : ", ") + n;
    }
    if (lib == nullptr) throw gpu_error("cuBLAS not found (tried " + tried + "; set VTENSOR_CUBLAS to its path)");
    create = reinterpret_cast<create_fn>(sym("cublasCreate_v2"));
    destroy = reinterpret_cast<destroy_fn>(sym("cublasDestroy_v2"));
    version = reinterpret_cast<version_fn>(sym("cublasGetVersion_v2"));
    gemm_ex = reinterpret_cast<gemm_ex_fn>(sym("cublasGemmEx"));
  }
  void* sym(const char* name) {
    void* p = dlsym(lib, name);
    if (p == nullptr) throw gpu_error(std::string("cuBLAS: no symbol ") + name);
    return p;
  }
};

void check_blas(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw gpu_error(std::string(what) + " failed: cuBLAS status " + std::to_string(s));
}

// ---- random data ---------------------------------------------------------------------------------

__host__ __device__ inline std::uint32_t mix(std::uint64_t seed, std::uint64_t i) {
  std::uint64_t z = seed * 0x9e3779b97f4a7c15ULL + i + 0x632be59bd9b4e019ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return static_cast<std::uint32_t>(z ^ (z >> 31));
}

// Uniform in [-scale, scale), as bf16 bits (round to nearest even).
__host__ __device__ inline std::uint16_t random_bf16(std::uint64_t seed, std::uint64_t i, float scale) {
  const float x = (static_cast<float>(mix(seed, i) >> 8) / 8388608.0f - 1.0f) * scale;
  std::uint32_t u = 0;
  memcpy(&u, &x, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

inline double bf16_to_double(std::uint16_t b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f = 0;
  std::memcpy(&f, &u, 4);
  return f;
}

__global__ void fill_random(std::uint16_t* p, std::uint64_t n, std::uint64_t seed, float scale) {
  for (std::uint64_t i = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::uint64_t>(gridDim.x) * blockDim.x) {
    p[i] = random_bf16(seed, i, scale);
  }
}

void fill(void* p, std::uint64_t elements, std::uint64_t seed, float scale) {
  fill_random<<<4096, 256>>>(static_cast<std::uint16_t*>(p), elements, seed, scale);
  check(cudaGetLastError(), "fill kernel launch");
}

// ---- decode attention (Note [Decode attention kernels]) --------------------------------------------

constexpr int k_head_dim = 128;
constexpr int k_partition = 256;        // tokens per thread block
constexpr int k_threads = 128;          // 16 threads per token row (16 bytes each), 8 rows at once
constexpr int k_rows = k_threads / 16;  // token rows per pass
constexpr int k_unroll = 4;             // passes whose loads are in flight together

struct contiguous_slots {
  const long long* start;  // first slot of each request
  __device__ long long operator()(int r, int t) const { return start[r] + t; }
};

struct paged_slots {
  const int* table;  // [request][block of the request] -> physical block
  int blocks_per_request;
  int shift;  // log2(block tokens)
  __device__ long long operator()(int r, int t) const {
    const long long block = table[static_cast<long long>(r) * blocks_per_request + (t >> shift)];
    return (block << shift) + (t & ((1 << shift) - 1));
  }
};

__device__ inline void unpack(const uint4& w, float* f) {
  const std::uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(words[i] << 16);
    f[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
  }
}

template <int G, class Slots>
__global__ void __launch_bounds__(k_threads)
    decode_partition(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v, long long stride,
                     const int* context, int kv_heads, int parts, Slots slots, float* acc_out, float2* ml_out,
                     float scale) {
  __shared__ float scores[G][k_partition];
  __shared__ float reduce[k_rows][G][k_head_dim];
  __shared__ float stat_m[G];
  __shared__ float stat_l[G];
  const int part = blockIdx.x;
  const int h = blockIdx.y;
  const int r = blockIdx.z;
  const int q_heads = kv_heads * G;
  const int len = context[r];
  const int t_begin = part * k_partition;
  const int t_end = min(len, t_begin + k_partition);
  const long long head0 = static_cast<long long>(r) * q_heads + static_cast<long long>(h) * G;
  if (t_begin >= len) {  // past this request's context: an empty partition the merge skips
    if (threadIdx.x < G) ml_out[(head0 + threadIdx.x) * parts + part] = make_float2(-INFINITY, 0.f);
    return;
  }
  const int lane16 = threadIdx.x & 15;  // which 8 of the 128 elements
  const int row = threadIdx.x >> 4;     // which token row of a pass
  float qf[G][8];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    unpack(*reinterpret_cast<const uint4*>(q + (head0 + g) * k_head_dim + lane16 * 8), qf[g]);
#pragma unroll
    for (int i = 0; i < 8; ++i) qf[g][i] *= scale;
  }
  const auto row_of = [&](const __nv_bfloat16* pool, int t) {
    return reinterpret_cast<const uint4*>(pool + slots(r, t) * stride + h * k_head_dim + lane16 * 8);
  };
  // Scores: K read once for the whole GQA group.
  for (int t0 = t_begin; t0 < t_end; t0 += k_rows * k_unroll) {
    uint4 kr[k_unroll];
#pragma unroll
    for (int u = 0; u < k_unroll; ++u) {
      const int t = t0 + u * k_rows + row;
      kr[u] = t < t_end ? __ldg(row_of(k, t)) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < k_unroll; ++u) {
      const int t = t0 + u * k_rows + row;
      float kf[8];
      unpack(kr[u], kf);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        float s = 0;
#pragma unroll
        for (int i = 0; i < 8; ++i) s += qf[g][i] * kf[i];
        s += __shfl_xor_sync(0xffffffffu, s, 8);
        s += __shfl_xor_sync(0xffffffffu, s, 4);
        s += __shfl_xor_sync(0xffffffffu, s, 2);
        s += __shfl_xor_sync(0xffffffffu, s, 1);
        if (lane16 == 0 && t < t_end) scores[g][t - t_begin] = s;
      }
    }
  }
  __syncthreads();
  // Softmax statistics of the partition, one warp per query head.
  const int n = t_end - t_begin;
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  for (int g = warp; g < G; g += k_threads / 32) {
    float m = -INFINITY;
    for (int i = lane; i < n; i += 32) m = fmaxf(m, scores[g][i]);
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float l = 0;
    for (int i = lane; i < n; i += 32) {
      const float p = __expf(scores[g][i] - m);
      scores[g][i] = p;
      l += p;
    }
    for (int o = 16; o > 0; o >>= 1) l += __shfl_xor_sync(0xffffffffu, l, o);
    if (lane == 0) {
      stat_m[g] = m;
      stat_l[g] = l;
    }
  }
  __syncthreads();
  // Weighted sum of V.
  float acc[G][8];
#pragma unroll
  for (int g = 0; g < G; ++g) {
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[g][i] = 0;
  }
  for (int t0 = t_begin; t0 < t_end; t0 += k_rows * k_unroll) {
    uint4 vr[k_unroll];
#pragma unroll
    for (int u = 0; u < k_unroll; ++u) {
      const int t = t0 + u * k_rows + row;
      vr[u] = t < t_end ? __ldg(row_of(v, t)) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < k_unroll; ++u) {
      const int t = t0 + u * k_rows + row;
      if (t >= t_end) continue;
      float vf[8];
      unpack(vr[u], vf);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const float p = scores[g][t - t_begin];
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[g][i] += p * vf[i];
      }
    }
  }
#pragma unroll
  for (int g = 0; g < G; ++g) {
#pragma unroll
    for (int i = 0; i < 8; ++i) reduce[row][g][lane16 * 8 + i] = acc[g][i];
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < G * k_head_dim; idx += k_threads) {
    const int g = idx / k_head_dim;
    const int d = idx % k_head_dim;
    float s = 0;
#pragma unroll
    for (int rr = 0; rr < k_rows; ++rr) s += reduce[rr][g][d];
    acc_out[((head0 + g) * parts + part) * k_head_dim + d] = s;
  }
  if (threadIdx.x < G)
    ml_out[(head0 + threadIdx.x) * parts + part] = make_float2(stat_m[threadIdx.x], stat_l[threadIdx.x]);
}

// Merges the partitions of one (request, query head): one thread per element.
__global__ void decode_merge(const float* acc, const float2* ml, int parts, __nv_bfloat16* out) {
  const long long head = static_cast<long long>(blockIdx.y) * gridDim.x + blockIdx.x;
  const int d = threadIdx.x;
  const long long base = head * parts;
  float m = -INFINITY;
  for (int p = 0; p < parts; ++p) {
    if (ml[base + p].y > 0) m = fmaxf(m, ml[base + p].x);
  }
  float num = 0;
  float den = 0;
  for (int p = 0; p < parts; ++p) {
    const float2 s = ml[base + p];
    if (s.y > 0) {
      const float w = __expf(s.x - m);
      num += w * acc[(base + p) * k_head_dim + d];
      den += w * s.y;
    }
  }
  out[head * k_head_dim + d] = __float2bfloat16(den > 0 ? num / den : 0.f);
}

// Where `layout` puts one layer's K and V of `slots` token slots (Note [Layout addressing]):
// elements per owned pool, the stride, and the offsets of layer `layer`'s K and V in the pool.
struct pool_shape {
  std::uint64_t elems = 0;
  long long stride = 0;
  long long k_offset = 0;
  long long v_offset = 0;
  bool split = true;  // K and V in two pools
};

pool_shape pool_of(std::uint64_t slots, std::uint32_t kv_heads, kv_addressing layout, std::uint32_t layers,
                   std::uint32_t layer) {
  const long long row = static_cast<long long>(kv_heads) * k_head_dim;
  switch (layout) {
    case kv_addressing::kv_split: return {slots * row, row, 0, 0, true};
    case kv_addressing::kv_fused: return {slots * 2 * row, 2 * row, 0, row, false};
    case kv_addressing::token_major:
      return {slots * 2 * row * layers, 2 * row * layers, 2 * row * layer, 2 * row * layer + row, false};
  }
  throw gpu_error("decode attention: unknown layout");
}

// Buffers of one decode problem on the device. `k` and `v` own the pools (`v` null when K and V
// share one); the kernel reads from `k_read` and `v_read` at `pool.stride` (Note [Layout addressing]).
struct decode_buffers {
  void* q = nullptr;
  void* k = nullptr;
  void* v = nullptr;
  const __nv_bfloat16* k_read = nullptr;
  const __nv_bfloat16* v_read = nullptr;
  pool_shape pool;  // the layout's pool, for the reads
  void* context = nullptr;
  void* slots = nullptr;  // start (contiguous) or table (paged)
  void* acc = nullptr;
  void* ml = nullptr;
  void* out = nullptr;
  int parts = 0;
  int blocks_per_request = 0;
  decode_buffers() = default;
  decode_buffers(const decode_buffers&) = delete;
  decode_buffers& operator=(const decode_buffers&) = delete;
  ~decode_buffers() {
    for (void* p : {q, k, v, context, slots, acc, ml, out}) cudaFree(p);
  }
};

template <int G>
void launch_decode_g(const decode_buffers& b, std::uint32_t batch, std::uint32_t kv_heads, std::uint32_t block_tokens) {
  const dim3 grid(static_cast<unsigned>(b.parts), kv_heads, batch);
  const float scale = 1.0f / std::sqrt(static_cast<float>(k_head_dim));
  const auto* q = static_cast<const __nv_bfloat16*>(b.q);
  const __nv_bfloat16* k = b.k_read;
  const __nv_bfloat16* v = b.v_read;
  const auto* ctx = static_cast<const int*>(b.context);
  auto* acc = static_cast<float*>(b.acc);
  auto* ml = static_cast<float2*>(b.ml);
  if (block_tokens == 0) {
    decode_partition<G><<<grid, k_threads>>>(q, k, v, b.pool.stride, ctx, static_cast<int>(kv_heads), b.parts,
                                             contiguous_slots{static_cast<const long long*>(b.slots)}, acc, ml, scale);
  } else {
    int shift = 0;
    while ((1u << shift) < block_tokens) ++shift;
    decode_partition<G><<<grid, k_threads>>>(q, k, v, b.pool.stride, ctx, static_cast<int>(kv_heads), b.parts,
                                             paged_slots{static_cast<const int*>(b.slots), b.blocks_per_request, shift},
                                             acc, ml, scale);
  }
  check(cudaGetLastError(), "decode attention launch");
  decode_merge<<<dim3(kv_heads * G, batch), k_head_dim>>>(acc, ml, b.parts, static_cast<__nv_bfloat16*>(b.out));
  check(cudaGetLastError(), "decode merge launch");
}

void launch_decode(const decode_buffers& b, std::uint32_t batch, std::uint32_t q_heads, std::uint32_t kv_heads,
                   std::uint32_t block_tokens) {
  switch (q_heads / kv_heads) {
    case 1: return launch_decode_g<1>(b, batch, kv_heads, block_tokens);
    case 2: return launch_decode_g<2>(b, batch, kv_heads, block_tokens);
    case 3: return launch_decode_g<3>(b, batch, kv_heads, block_tokens);
    case 4: return launch_decode_g<4>(b, batch, kv_heads, block_tokens);
    case 5: return launch_decode_g<5>(b, batch, kv_heads, block_tokens);
    case 6: return launch_decode_g<6>(b, batch, kv_heads, block_tokens);
    case 7: return launch_decode_g<7>(b, batch, kv_heads, block_tokens);
    case 8: return launch_decode_g<8>(b, batch, kv_heads, block_tokens);
    default: throw gpu_error("decode attention: query heads per KV head must be 1 to 8");
  }
}

void check_shape(std::uint32_t q_heads, std::uint32_t kv_heads, std::uint32_t block_tokens) {
  if (kv_heads == 0 || q_heads % kv_heads != 0 || q_heads / kv_heads > 8) {
    throw gpu_error("decode attention: query heads must be 1 to 8 times the KV heads");
  }
  if (block_tokens != 0 && (block_tokens & (block_tokens - 1)) != 0) {
    throw gpu_error("decode attention: block tokens must be a power of two");
  }
}

// Slot layout of `contexts` (Note [Decode attention kernels]): the per-request starts
// (contiguous) or the block table (paged, blocks in a random permutation of the pool). Returns
// the slots the pool needs; `table` gets the host copy of the table.
std::uint64_t build_slots(decode_buffers& b, const std::vector<std::uint32_t>& contexts, std::uint32_t block_tokens,
                          std::uint64_t seed, std::vector<int>& table) {
  const std::uint32_t max_ctx = *std::max_element(contexts.begin(), contexts.end());
  b.parts = static_cast<int>((max_ctx + k_partition - 1) / k_partition);
  std::vector<int> ctx(contexts.begin(), contexts.end());
  check(cudaMalloc(&b.context, ctx.size() * sizeof(int)), "cudaMalloc (contexts)");
  check(cudaMemcpy(b.context, ctx.data(), ctx.size() * sizeof(int), cudaMemcpyHostToDevice), "cudaMemcpy (contexts)");
  if (block_tokens == 0) {
    std::vector<long long> start(contexts.size());
    long long next = 0;
    for (std::size_t r = 0; r < contexts.size(); ++r) {
      start[r] = next;
      next += contexts[r];
    }
    check(cudaMalloc(&b.slots, start.size() * sizeof(long long)), "cudaMalloc (starts)");
    check(cudaMemcpy(b.slots, start.data(), start.size() * sizeof(long long), cudaMemcpyHostToDevice),
          "cudaMemcpy (starts)");
    return static_cast<std::uint64_t>(next);
  }
  b.blocks_per_request = static_cast<int>((max_ctx + block_tokens - 1) / block_tokens);
  const std::size_t blocks = contexts.size() * static_cast<std::size_t>(b.blocks_per_request);
  table.resize(blocks);
  std::iota(table.begin(), table.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(table.begin(), table.end(), rng);
  check(cudaMalloc(&b.slots, table.size() * sizeof(int)), "cudaMalloc (block table)");
  check(cudaMemcpy(b.slots, table.data(), table.size() * sizeof(int), cudaMemcpyHostToDevice),
        "cudaMemcpy (block table)");
  return blocks * block_tokens;
}

void alloc_decode(decode_buffers& b, std::size_t batch, std::uint32_t q_heads, std::uint32_t kv_heads,
                  std::uint64_t slots, kv_addressing layout = kv_addressing::kv_split, std::uint32_t layers = 1,
                  std::uint32_t layer = 0) {
  b.pool = pool_of(slots, kv_heads, layout, layers, layer);
  const pool_shape& ps = b.pool;
  check(cudaMalloc(&b.q, batch * q_heads * k_head_dim * 2), "cudaMalloc (q)");
  check(cudaMalloc(&b.k, ps.elems * 2), ps.split ? "cudaMalloc (K pool)" : "cudaMalloc (KV pool)");
  if (ps.split) check(cudaMalloc(&b.v, ps.elems * 2), "cudaMalloc (V pool)");
  const auto* base = static_cast<const __nv_bfloat16*>(b.k);
  b.k_read = base + ps.k_offset;
  b.v_read = ps.split ? static_cast<const __nv_bfloat16*>(b.v) : base + ps.v_offset;
  check(cudaMalloc(&b.acc, batch * q_heads * static_cast<std::size_t>(b.parts) * k_head_dim * 4),
        "cudaMalloc (partials)");
  check(cudaMalloc(&b.ml, batch * q_heads * static_cast<std::size_t>(b.parts) * 8), "cudaMalloc (statistics)");
  check(cudaMalloc(&b.out, batch * q_heads * k_head_dim * 2), "cudaMalloc (output)");
}

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  const std::size_t n = x.size();
  return n % 2 == 1 ? x[n / 2] : (x[n / 2 - 1] + x[n / 2]) / 2;
}

constexpr std::uint64_t k_flush_bytes = std::uint64_t{256} << 20;
constexpr int k_warmup = 3;

}  // namespace

struct gpu_compute::impl {
  int device = 0;
  cudaDeviceProp prop{};
  cublas_api api;
  cublasHandle_t handle = nullptr;
  void* flush = nullptr;
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  int flushes = 0;

  void flush_l2() { check(cudaMemsetAsync(flush, ++flushes & 0xff, k_flush_bytes), "cudaMemsetAsync (L2 flush)"); }
  // Median seconds of `op` over `reps`, each after an L2 flush, after k_warmup untimed runs.
  template <class F>
  double time(int reps, F&& op) {
    for (int i = 0; i < k_warmup; ++i) op();
    std::vector<double> s;
    for (int i = 0; i < reps; ++i) {
      flush_l2();
      check(cudaEventRecord(start), "cudaEventRecord");
      op();
      check(cudaEventRecord(stop), "cudaEventRecord");
      check(cudaEventSynchronize(stop), "cudaEventSynchronize");
      float ms = 0;
      check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
      s.push_back(ms / 1e3);
    }
    return median(s);
  }
};

gpu_compute::gpu_compute(int device_index) : impl_(new impl) {
  try {
    int count = 0;
    check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    if (device_index < 0 || device_index >= count) {
      throw gpu_error("CUDA runtime: no device " + std::to_string(device_index) + " (this machine has " +
                      std::to_string(count) + ")");
    }
    impl_->device = device_index;
    check(cudaSetDevice(device_index), "cudaSetDevice");
    check(cudaGetDeviceProperties(&impl_->prop, device_index), "cudaGetDeviceProperties");
    check_blas(impl_->api.create(&impl_->handle), "cublasCreate");
    check(cudaMalloc(&impl_->flush, k_flush_bytes), "cudaMalloc (L2 flush buffer)");
    check(cudaEventCreate(&impl_->start), "cudaEventCreate");
    check(cudaEventCreate(&impl_->stop), "cudaEventCreate");
  } catch (...) {
    delete impl_;
    throw;
  }
}

gpu_compute::~gpu_compute() {
  if (impl_->handle != nullptr) impl_->api.destroy(impl_->handle);
  cudaFree(impl_->flush);
  if (impl_->start != nullptr) cudaEventDestroy(impl_->start);
  if (impl_->stop != nullptr) cudaEventDestroy(impl_->stop);
  delete impl_;
}

std::string gpu_compute::device_name() const { return impl_->prop.name; }

int gpu_compute::cublas_version() const {
  int v = 0;
  check_blas(impl_->api.version(impl_->handle, &v), "cublasGetVersion");
  return v;
}

std::uint64_t gpu_compute::memory_bytes() const { return impl_->prop.totalGlobalMem; }

std::vector<double> gpu_compute::time_gemms(const std::vector<gemm_shape>& shapes,
                                            const std::vector<std::uint32_t>& tokens, int reps) {
  if (shapes.empty() || tokens.empty()) return {};
  const std::uint32_t max_tokens = *std::max_element(tokens.begin(), tokens.end());
  std::uint64_t max_in = 0;
  std::uint64_t max_out = 0;
  std::vector<void*> weights(shapes.size(), nullptr);
  void* x = nullptr;
  void* y = nullptr;
  const auto release = [&] {
    for (void* w : weights) cudaFree(w);
    cudaFree(x);
    cudaFree(y);
  };
  try {
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      const std::uint64_t n = std::uint64_t{shapes[i].out} * shapes[i].in;
      check(cudaMalloc(&weights[i], n * 2), "cudaMalloc (weights)");
      fill(weights[i], n, 1000 + i, 0.02f);
      max_in = std::max<std::uint64_t>(max_in, shapes[i].in);
      max_out = std::max<std::uint64_t>(max_out, shapes[i].out);
    }
    check(cudaMalloc(&x, max_in * max_tokens * 2), "cudaMalloc (activations)");
    check(cudaMalloc(&y, max_out * max_tokens * 2), "cudaMalloc (outputs)");
    fill(x, max_in * max_tokens, 7, 1.0f);
    const float alpha = 1.0f;
    const float beta = 0.0f;
    std::vector<double> out;
    for (const std::uint32_t n : tokens) {
      const auto run = [&] {
        for (std::size_t i = 0; i < shapes.size(); ++i) {
          const int m = static_cast<int>(shapes[i].out);
          const int k = static_cast<int>(shapes[i].in);
          // Column-major: Y^T (out x n) = W (row-major out x in, read transposed) * X^T (in x n).
          check_blas(impl_->api.gemm_ex(impl_->handle, CUBLAS_OP_T, CUBLAS_OP_N, m, static_cast<int>(n), k, &alpha,
                                        weights[i], CUDA_R_16BF, k, x, CUDA_R_16BF, k, &beta, y, CUDA_R_16BF, m,
                                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     "cublasGemmEx");
        }
      };
      out.push_back(impl_->time(reps, run));
    }
    check(cudaDeviceSynchronize(), "GEMMs");
    release();
    return out;
  } catch (...) {
    release();
    throw;
  }
}

std::uint64_t decode_pool_bytes(const decode_shape& s) {
  std::uint64_t slots = std::uint64_t{s.batch} * s.context;
  if (s.block_tokens != 0)
    slots = std::uint64_t{s.batch} * ((s.context + s.block_tokens - 1) / s.block_tokens) * s.block_tokens;
  const kv_addressing layout = s.block_tokens != 0 ? kv_addressing::kv_split : s.layout;
  const pool_shape ps = pool_of(slots, s.kv_heads, layout, std::max(s.layers, 1u), 0);
  return ps.elems * 2 * (ps.split ? 2 : 1);
}

double gpu_compute::time_decode(const decode_shape& s, int reps) {
  check_shape(s.q_heads, s.kv_heads, s.block_tokens);
  if (s.block_tokens != 0 && s.layout != kv_addressing::kv_split) {
    throw gpu_error("decode attention: paged pools are kv-split");
  }
  if (s.layers == 0) throw gpu_error("decode attention: a token-major row needs at least one layer");
  const std::vector<std::uint32_t> contexts(s.batch, s.context);
  decode_buffers b;
  std::vector<int> table;
  const std::uint64_t slots = build_slots(b, contexts, s.block_tokens, 42 + s.batch, table);
  // Token-major: the middle layer, as good as any (every layer's rows have the same stride).
  alloc_decode(b, s.batch, s.q_heads, s.kv_heads, slots, s.layout, s.layers, s.layers / 2);
  fill(b.q, std::uint64_t{s.batch} * s.q_heads * k_head_dim, 1, 1.0f);
  fill(b.k, b.pool.elems, 2, 1.0f);
  if (b.v != nullptr) fill(b.v, b.pool.elems, 3, 1.0f);
  const double t = impl_->time(reps, [&] { launch_decode(b, s.batch, s.q_heads, s.kv_heads, s.block_tokens); });
  check(cudaDeviceSynchronize(), "decode attention");
  return t;
}

double gpu_compute::copy_bandwidth(std::uint64_t bytes, int reps) {
  void* a = nullptr;
  void* c = nullptr;
  try {
    check(cudaMalloc(&a, bytes), "cudaMalloc (copy source)");
    check(cudaMalloc(&c, bytes), "cudaMalloc (copy target)");
    fill(a, bytes / 2, 9, 1.0f);
    const double t = impl_->time(reps, [&] { check(cudaMemcpyAsync(c, a, bytes, cudaMemcpyDeviceToDevice), "copy"); });
    cudaFree(a);
    cudaFree(c);
    return 2.0 * static_cast<double>(bytes) / t;
  } catch (...) {
    cudaFree(a);
    cudaFree(c);
    throw;
  }
}

decode_check_result gpu_compute::check_decode(const std::vector<std::uint32_t>& contexts, std::uint32_t q_heads,
                                              std::uint32_t kv_heads, std::uint32_t block_tokens, std::uint64_t seed,
                                              std::uint32_t layers, std::uint32_t layer) {
  check_shape(q_heads, kv_heads, block_tokens);
  if (contexts.empty() || block_tokens == 0 || *std::min_element(contexts.begin(), contexts.end()) == 0) {
    throw gpu_error("check_decode: needs requests with contexts of at least 1 and a block size");
  }
  if (layer >= layers) throw gpu_error("check_decode: the token-major layer must be below the layer count");
  const std::size_t batch = contexts.size();
  const std::uint64_t row = std::uint64_t{kv_heads} * k_head_dim;  // elements of one slot
  // Host data: q, and K and V of each request in its contiguous range.
  std::vector<std::uint16_t> q(batch * q_heads * k_head_dim);
  for (std::size_t i = 0; i < q.size(); ++i) q[i] = random_bf16(seed, i, 1.0f);
  decode_buffers c;
  std::vector<int> unused;
  const std::uint64_t c_slots = build_slots(c, contexts, 0, seed, unused);
  std::vector<std::uint16_t> k(c_slots * row);
  std::vector<std::uint16_t> v(c_slots * row);
  for (std::size_t i = 0; i < k.size(); ++i) {
    k[i] = random_bf16(seed + 1, i, 2.0f);
    v[i] = random_bf16(seed + 2, i, 1.0f);
  }
  alloc_decode(c, batch, q_heads, kv_heads, c_slots);
  // The paged pool: the same rows, block by block, at the table's blocks.
  decode_buffers p;
  std::vector<int> table;
  const std::uint64_t p_slots = build_slots(p, contexts, block_tokens, seed + 3, table);
  alloc_decode(p, batch, q_heads, kv_heads, p_slots);
  std::vector<std::uint16_t> pk(p_slots * row, 0xffc0);  // NaN where no token lives
  std::vector<std::uint16_t> pv(p_slots * row, 0xffc0);
  std::uint64_t start = 0;
  for (std::size_t r = 0; r < batch; ++r) {
    for (std::uint32_t t = 0; t < contexts[r]; ++t) {
      const std::uint64_t phys =
          static_cast<std::uint64_t>(table[r * p.blocks_per_request + t / block_tokens]) * block_tokens +
          t % block_tokens;
      std::copy_n(k.begin() + static_cast<std::ptrdiff_t>((start + t) * row), row,
                  pk.begin() + static_cast<std::ptrdiff_t>(phys * row));
      std::copy_n(v.begin() + static_cast<std::ptrdiff_t>((start + t) * row), row,
                  pv.begin() + static_cast<std::ptrdiff_t>(phys * row));
    }
    start += contexts[r];
  }
  const auto up = [](void* dst, const std::vector<std::uint16_t>& src) {
    check(cudaMemcpy(dst, src.data(), src.size() * 2, cudaMemcpyHostToDevice), "cudaMemcpy (upload)");
  };
  up(c.q, q);
  up(p.q, q);
  up(c.k, k);
  up(c.v, v);
  up(p.k, pk);
  up(p.v, pv);
  // The kv-fused and token-major pools: the same rows at their layout's places (Note [Layout
  // addressing]), NaN between them.
  decode_buffers f;
  decode_buffers tm;
  for (const auto& [b, layout] : {std::pair{&f, kv_addressing::kv_fused}, std::pair{&tm, kv_addressing::token_major}}) {
    (void)build_slots(*b, contexts, 0, seed, unused);
    alloc_decode(*b, batch, q_heads, kv_heads, c_slots, layout, layers, layer);
    const pool_shape& ps = b->pool;
    std::vector<std::uint16_t> pool(ps.elems, 0xffc0);
    for (std::uint64_t slot = 0; slot < c_slots; ++slot) {
      const auto src = static_cast<std::ptrdiff_t>(slot * row);
      const auto dst = static_cast<std::ptrdiff_t>(slot) * ps.stride;
      std::copy_n(k.begin() + src, row, pool.begin() + dst + ps.k_offset);
      std::copy_n(v.begin() + src, row, pool.begin() + dst + ps.v_offset);
    }
    up(b->q, q);
    up(b->k, pool);
  }
  const std::size_t outs = batch * q_heads * k_head_dim;
  for (decode_buffers* b : {&c, &p, &f, &tm}) {
    check(cudaMemset(b->out, 0xff, outs * 2), "cudaMemset (poison output)");  // NaN: unwritten shows
  }
  launch_decode(c, static_cast<std::uint32_t>(batch), q_heads, kv_heads, 0);
  launch_decode(p, static_cast<std::uint32_t>(batch), q_heads, kv_heads, block_tokens);
  launch_decode(f, static_cast<std::uint32_t>(batch), q_heads, kv_heads, 0);
  launch_decode(tm, static_cast<std::uint32_t>(batch), q_heads, kv_heads, 0);
  check(cudaDeviceSynchronize(), "decode attention");
  const auto down = [outs](const decode_buffers& b) {
    std::vector<std::uint16_t> o(outs);
    check(cudaMemcpy(o.data(), b.out, outs * 2, cudaMemcpyDeviceToHost), "cudaMemcpy (output)");
    return o;
  };
  const std::vector<std::uint16_t> oc = down(c);
  const std::vector<std::uint16_t> op = down(p);
  decode_check_result res;
  for (const std::vector<std::uint16_t>& ol : {down(f), down(tm)}) {
    for (std::size_t i = 0; i < outs; ++i) res.differing_layouts += ol[i] != oc[i] ? 1 : 0;
  }
  // Reference in float64.
  res.elements = outs;
  double err2 = 0;
  double ref2 = 0;
  const std::uint32_t group = q_heads / kv_heads;
  start = 0;
  for (std::size_t r = 0; r < batch; ++r) {
    for (std::uint32_t qh = 0; qh < q_heads; ++qh) {
      const std::uint32_t h = qh / group;
      const std::size_t qo = (r * q_heads + qh) * k_head_dim;
      std::vector<double> s(contexts[r]);
      double m = -INFINITY;
      for (std::uint32_t t = 0; t < contexts[r]; ++t) {
        double dot = 0;
        for (int d = 0; d < k_head_dim; ++d) {
          dot += bf16_to_double(q[qo + d]) * bf16_to_double(k[(start + t) * row + h * k_head_dim + d]);
        }
        s[t] = dot / std::sqrt(static_cast<double>(k_head_dim));
        m = std::max(m, s[t]);
      }
      double l = 0;
      for (double& x : s) l += (x = std::exp(x - m));
      for (int d = 0; d < k_head_dim; ++d) {
        double o = 0;
        for (std::uint32_t t = 0; t < contexts[r]; ++t)
          o += s[t] * bf16_to_double(v[(start + t) * row + h * k_head_dim + d]);
        o /= l;
        const double gc = bf16_to_double(oc[qo + d]);
        const double gp = bf16_to_double(op[qo + d]);
        if (oc[qo + d] != op[qo + d]) ++res.differing;
        const double diff = std::fabs(gp - gc);
        res.max_abs_diff_paged = std::isnan(diff) ? INFINITY : std::max(res.max_abs_diff_paged, diff);
        err2 += (gc - o) * (gc - o);
        ref2 += o * o;
      }
    }
    start += contexts[r];
  }
  res.max_rel_err_reference = ref2 > 0 ? std::sqrt(err2 / ref2) : (err2 > 0 ? INFINITY : 0.0);
  if (std::isnan(err2)) res.max_rel_err_reference = INFINITY;
  return res;
}

}  // namespace vtensor::tools
