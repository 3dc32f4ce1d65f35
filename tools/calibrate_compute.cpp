// `vtensor calibrate --compute`: times the step cost's kernels on the GPU (tools/gpu_compute.hpp)
// and writes the compute calibration (Note [Compute calibration file], sim/compute_calibration.hpp).

#include "tools/calibrate_compute.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <stdexcept>
#include <utility>

#include "core/kv_geometry.hpp"
#include "core/model_presets.hpp"
#include "traces/atomic_output_file.hpp"

namespace vtensor::tools {
namespace {

// Note [Linear shapes]
// The linear layers of each preset, from the model's config.json (hidden_size,
// intermediate_size, attention heads, KV heads, vocab_size; head dim 128, no tied embeddings):
// QKV (one fused matrix, as vLLM and SGLang run it), O, gate and up (fused), down, and the LM
// head; tensor parallelism splits QKV, gate-up and the LM head by output, O and down by input
// (Megatron-style). Their weights, times layers, plus the LM head and the embedding table, are
// the preset's parameter count within 0.1% (tested).
struct linear_dims {
  std::string_view model;
  std::uint32_t d_model, intermediate, q_heads, kv_heads, vocab;
};
constexpr linear_dims k_dims[] = {
    {"llama-3-8b", 4096, 14336, 32, 8, 128256},
    {"yi-6b", 4096, 11008, 32, 4, 64000},
    {"yi-34b", 7168, 20480, 56, 8, 64000},
    {"llama-3-70b", 8192, 28672, 64, 8, 128256},
};
constexpr std::uint32_t k_head_dim = 128;

const linear_dims& dims_of(std::string_view model) {
  for (const auto& d : k_dims) {
    if (d.model == model) return d;
  }
  throw std::invalid_argument(fmt::format("no linear shapes for model '{}'", model));
}

}  // namespace

std::string utc_date() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d", &tm);
  return text;
}

std::vector<gemm_shape> layer_gemm_shapes(std::string_view model, std::uint32_t tp) {
  const linear_dims& d = dims_of(model);
  if (tp == 0 || d.kv_heads % tp != 0) throw std::invalid_argument("tp must divide the KV heads");
  const std::uint32_t qkv = (d.q_heads + 2 * d.kv_heads) * k_head_dim;
  return {{"qkv", qkv / tp, d.d_model},
          {"o", d.d_model, d.q_heads * k_head_dim / tp},
          {"gate_up", 2 * d.intermediate / tp, d.d_model},
          {"down", d.d_model, d.intermediate / tp}};
}

gemm_shape lm_head_shape(std::string_view model, std::uint32_t tp) {
  const linear_dims& d = dims_of(model);
  return {"lm_head", d.vocab / tp, d.d_model};
}

std::uint64_t embedding_params(std::string_view model) {
  const linear_dims& d = dims_of(model);
  return std::uint64_t{d.vocab} * d.d_model;
}

std::vector<std::uint32_t> token_grid(std::uint32_t budget) {
  std::vector<std::uint32_t> g;
  for (std::uint32_t n = 1; n < budget; n *= 2) {
    g.push_back(n);
    if (n >= 128 && n + n / 2 < budget) g.push_back(n + n / 2);  // 192, 384, ...: the knee is wide
    if (n > budget / 2) break;
  }
  g.push_back(budget);
  std::sort(g.begin(), g.end());
  g.erase(std::unique(g.begin(), g.end()), g.end());
  return g;
}

#if VTENSOR_HAVE_GPU_KERNELS

namespace {

// The model's shapes on one GPU.
struct model_shapes {
  std::vector<gemm_shape> layer;  // one layer's GEMMs
  gemm_shape head;                // the LM head
  std::uint32_t q_heads = 0, kv_heads = 0, layers = 0;
};

// (a) The linear layers: one layer's four GEMMs (timed together: their weights, hundreds of MB,
// stream from HBM as in a step), times the layers, plus the LM head.
void measure_linear(gpu_compute& gpu, const compute_options& opt, const model_shapes& m, sim::compute_calibration& cal,
                    const cli_streams& io) {
  const std::vector<gemm_shape>& layer = m.layer;
  const gemm_shape& head = m.head;
  const std::uint32_t layers = m.layers;
  const std::vector<std::uint32_t> grid = token_grid(opt.token_budget);
  const std::vector<double> layer_s = gpu.time_gemms(layer, grid, opt.reps);
  const std::vector<double> head_s = gpu.time_gemms({head}, grid, opt.reps);
  double layer_weights = 0;
  double layer_io = 0;  // activations in and out per token
  for (const auto& s : layer) {
    layer_weights += static_cast<double>(s.out) * s.in;
    layer_io += s.out + s.in;
  }
  const double head_weights = static_cast<double>(head.out) * head.in;
  io.out << "\nLinear layers of one step (all layers + LM head), cuBLAS bf16, median of " << opt.reps
         << "\n\n| tokens | ms | TFLOP/s | TB/s (weights + activations) |\n| ---: | ---: | ---: | ---: |\n";
  for (std::size_t i = 0; i < grid.size(); ++i) {
    const double n = grid[i];
    sim::linear_point p;
    p.tokens = grid[i];
    p.seconds = layers * layer_s[i] + head_s[i];
    p.flops = 2.0 * n * (layers * layer_weights + head_weights);
    p.bytes = 2.0 * (layers * (layer_weights + n * layer_io) + head_weights + n * (head.out + head.in));
    cal.linear.push_back(p);
    io.out << fmt::format("| {} | {:.3f} | {:.1f} | {:.2f} |\n", p.tokens, p.seconds * 1e3, p.flops / p.seconds / 1e12,
                          p.bytes / p.seconds / 1e12);
  }
}

// The layouts timed besides kv-split (the contiguous column), as the calibration names them.
constexpr std::pair<kv_addressing, kv_layout> k_other_layouts[] = {
    {kv_addressing::kv_fused, kv_layout::kv_fused}, {kv_addressing::token_major, kv_layout::token_major}};

// (b) Decode attention, one layer: contiguous KV in each layout and paged KV, same kernel
// (Note [Layout addressing]). A token-major pool holds every layer, so its larger points may not
// fit the GPU: a layout is timed where its pool takes at most half the device memory.
void measure_decode(gpu_compute& gpu, const compute_options& opt, const model_shapes& m, sim::compute_calibration& cal,
                    const cli_streams& io) {
  const std::uint32_t q_heads = m.q_heads;
  const std::uint32_t kv_heads = m.kv_heads;
  cal.block_tokens = opt.block_tokens;
  for (const auto& [a, layout] : k_other_layouts) cal.layouts.emplace_back(to_string(layout));
  const std::uint64_t pool_cap = gpu.memory_bytes() / 2;
  io.out << fmt::format(
      "\nDecode attention, one layer, median of {}: achieved K+V bandwidth (TB/s) of contiguous kv-split KV, "
      "and each other access's time and its ratio to it (paged pools kv-split; token-major pools hold all {} "
      "layers, timed up to {:.0f} GiB)\n\n| batch | context | KV MiB | kv-split us | TB/s | % of copy |",
      opt.reps, m.layers, static_cast<double>(pool_cap) / (1u << 30));
  for (const auto b : opt.block_tokens) io.out << fmt::format(" paged {} us | ratio |", b);
  for (const auto& l : cal.layouts) io.out << fmt::format(" {} us | ratio |", l);
  io.out << "\n| ---: | ---: | ---: | ---: | ---: | ---: |";
  for (std::size_t i = 0; i < opt.block_tokens.size() + cal.layouts.size(); ++i) io.out << " ---: | ---: |";
  io.out << "\n";
  for (const std::uint32_t batch : opt.batches) {
    for (const std::uint32_t context : opt.contexts) {
      if (std::uint64_t{batch} * context > opt.max_decode_tokens) continue;
      sim::decode_point p;
      p.batch = batch;
      p.context = context;
      p.kv_bytes = 2.0 * 2.0 * batch * static_cast<double>(context) * kv_heads * k_head_dim;
      p.contiguous_s = gpu.time_decode({batch, context, q_heads, kv_heads, 0}, opt.reps);
      io.out << fmt::format("| {} | {} | {:.0f} | {:.1f} | {:.2f} | {:.0f}% |", batch, context, p.kv_bytes / 1048576.0,
                            p.contiguous_s * 1e6, p.kv_bytes / p.contiguous_s / 1e12,
                            100 * p.kv_bytes / p.contiguous_s / cal.copy_bandwidth);
      for (const auto b : opt.block_tokens) {
        p.paged_s[b] = gpu.time_decode({batch, context, q_heads, kv_heads, b}, opt.reps);
        io.out << fmt::format(" {:.1f} | {:.3f} |", p.paged_s[b] * 1e6, p.paged_s[b] / p.contiguous_s);
      }
      for (const auto& [addressing, layout] : k_other_layouts) {
        const decode_shape s{batch, context, q_heads, kv_heads, 0, addressing, m.layers};
        if (const std::uint64_t bytes = decode_pool_bytes(s); bytes > pool_cap) {
          io.out << fmt::format(" (pool {:.0f} GiB) | |", static_cast<double>(bytes) / (1u << 30));
          continue;
        }
        const double t = gpu.time_decode(s, opt.reps);
        p.layout_s[std::string(to_string(layout))] = t;
        io.out << fmt::format(" {:.1f} | {:.3f} |", t * 1e6, t / p.contiguous_s);
      }
      io.out << "\n";
      cal.decode.push_back(std::move(p));
    }
  }
  for (const auto b : opt.block_tokens) {
    const auto r = cal.paged_ratios(b);
    io.out << fmt::format("paged decode factor, block {}: median {:.3f} (min {:.3f}, max {:.3f}) over {} points\n", b,
                          cal.paged_decode_factor(b), *std::min_element(r.begin(), r.end()),
                          *std::max_element(r.begin(), r.end()), r.size());
  }
  for (const auto& [addressing, layout] : k_other_layouts) {
    const auto r = cal.layout_ratios(layout);
    if (r.empty()) {
      io.out << fmt::format("{} decode factor: no point fit the GPU\n", to_string(layout));
      continue;
    }
    io.out << fmt::format("{} decode factor: median {:.3f} (min {:.3f}, max {:.3f}) over {} points\n",
                          to_string(layout), *cal.layout_decode_factor(layout), *std::min_element(r.begin(), r.end()),
                          *std::max_element(r.begin(), r.end()), r.size());
  }
}

}  // namespace

int calibrate_compute(const compute_options& opt, const cli_streams& io) {
  const model_preset_entry* preset = find_model_preset(opt.model);
  if (preset == nullptr) throw std::invalid_argument(fmt::format("unknown model '{}'", opt.model));
  model_shapes m;
  m.layer = layer_gemm_shapes(opt.model, opt.tp);
  m.head = lm_head_shape(opt.model, opt.tp);
  m.q_heads = dims_of(opt.model).q_heads / opt.tp;
  m.kv_heads = preset->kv.kv_heads / opt.tp;
  m.layers = preset->kv.layers;
  const std::uint32_t layers = m.layers;

  gpu_compute gpu(opt.device);
  io.out << fmt::format(
      "calibrate --compute: {} (device {}, cuBLAS {}), model {} tp {}: {} layers, {} query heads, "
      "{} KV heads per GPU\n",
      gpu.device_name(), opt.device, gpu.cublas_version(), opt.model, opt.tp, layers, m.q_heads, m.kv_heads);
  sim::compute_calibration cal;
  cal.device = gpu.device_name();
  cal.model = opt.model;
  cal.tp = opt.tp;
  cal.copy_bandwidth = gpu.copy_bandwidth(std::uint64_t{4} << 30, opt.reps);
  io.out << fmt::format("device-to-device copy of 4 GiB: {:.2f} TB/s (read + written)\n", cal.copy_bandwidth / 1e12);
  measure_linear(gpu, opt, m, cal, io);
  measure_decode(gpu, opt, m, cal, io);
  cal.prefill_attention =
      "not measured: an honest prefill kernel needs tensor-core (wgmma) tiles as FlashAttention-3 has; a CUDA-core "
      "kernel would be compute-bound far below those rates and dilute the paged/contiguous difference; prefill "
      "attention stays on the roofline and its factor on the selected set";
  cal.source = fmt::format(
      "vtensor calibrate --compute, {}, {}, cuBLAS {}, model {} tp {}; GEMMs: cublasGemmEx bf16 (fp32 accumulate), "
      "one layer's QKV, O, gate-up and down back to back, times {} layers, plus the LM head; decode attention: "
      "vtensor's split-K kernel (tools/gpu_compute.cu), contiguous in kv-split, kv-fused and token-major "
      "addressing vs kv-split behind a block table; median of {} runs after 3 warm-ups, L2 flushed before each",
      utc_date(), cal.device, gpu.cublas_version(), opt.model, opt.tp, layers, opt.reps);
  traces::atomic_output_file out(opt.out_file, &io.out);
  out.write(cal.to_json().dump(2) + "\n");
  out.commit();
  if (opt.out_file != "-") io.out << fmt::format("\nwrote {}\n", opt.out_file);
  return exit_success;
}

#endif

}  // namespace vtensor::tools
