#pragma once
/// The compute calibration: the step cost's kernels timed on a GPU (`vtensor calibrate
/// --compute`), read by `replay --compute-calibration FILE` in place of the roofline's ceilings.
///
/// Note [Compute calibration file]
/// JSON, versioned like the driver calibration (backends/calibration/h200.json):
///
///     {"format": "vtensor-compute-calibration", "version": 1,
///      "device": "NVIDIA H200", "source": "vtensor calibrate --compute, ...",
///      "model": "llama-3-8b", "tp": 1, "copy_bandwidth": 4.3e12,
///      "linear": [{"tokens": 1, "seconds": 1.7e-3, "flops": 1.6e10, "bytes": 1.6e10}, ...],
///      "decode_attention": {"block_tokens": [1, 16], "layouts": ["kv-fused", "token-major"],
///          "points": [{"batch": 8, "context": 2048, "kv_bytes": 6.7e7, "contiguous_s": 2.1e-5,
///           "paged_s": {"1": 2.4e-5, "16": 2.2e-5},
///           "layout_s": {"kv-fused": 2.1e-5, "token-major": 2.6e-5}}, ...]},
///      "prefill_attention": "not measured: why"}
///
/// `linear`: the linear layers of one whole step (every layer's QKV, O, gate-up and down
/// projections and the LM head, on one GPU) at `tokens` tokens: median seconds, the FLOPs
/// (2 x weights x tokens) and the bytes (weights, activations in and out) they move; token counts
/// strictly increasing. `decode_attention`: one layer's decode attention over `batch` requests
/// of `context` tokens each, reading `kv_bytes` of K and V, with contiguous KV and behind a block
/// table of each size in `block_tokens` (Note [Decode attention kernels], tools/gpu_compute.hpp);
/// `contiguous_s` reads kv-split pools, and `layout_s` the same kernel over the other layouts of
/// `layouts` (Note [Layout addressing]), at the points where the layout's pool fit the GPU
/// (token-major holds every layer: a point may lack it). Version 1 files have no layouts.
/// Every number must be finite and positive, every key known; a bad file is refused naming the
/// key (exit 2 in the CLI).
///
/// Note [Measured step cost]
/// With a calibration, a step's cost keeps the roofline's form (Note [Roofline step cost]) but two
/// of its parts come from the measurements:
/// - linear = 2 * params * computed_tokens / tp / rate(computed_tokens), where rate(n) is the
///   measured FLOP rate (flops / seconds of the `linear` points) interpolated *log-linearly in the
///   token count*: between measured counts n0 < n < n1, rate = r0 + (r1 - r0) * ln(n / n0) /
///   ln(n1 / n0); below the first and above the last count, the rate of that end. The rate folds
///   in the small-batch inefficiency (at a few tokens it is the weights' streaming time
///   expressed as a rate) that the roofline's single peak leaves out.
/// - decode attention = its KV bytes / bandwidth(bytes per layer), the bandwidth the contiguous
///   kernel achieved, interpolated log-linearly in the KV bytes one layer reads (points with the
///   same bytes averaged).
/// The roofline's two sides of each part are scaled to the measured time, so a step is still
/// classed compute- or memory-bound as the roofline classes it. Prefill attention stays on the
/// roofline (the calibration does not measure it; `prefill_attention` says why). The decode
/// kernel factor of a policy that reads KV through a block table (paged: its block size; radix:
/// 1) becomes the median, over the measured points, of paged_s / contiguous_s for that block
/// size (the measured size nearest to it, in log scale, when it was not measured); its prefill
/// factor stays the selected set's. A contiguous policy in a layout other than kv-split (vtensor's
/// kv-fused and token-major) gets the median, over the points that measured it, of layout_s /
/// contiguous_s as its decode factor; a layout the file does not measure keeps the set's factor
/// (1). Rates measured for one model are applied to another by
/// size (FLOPs and bytes), an approximation the replay's config records (the file's model).

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/kernel_factors.hpp"
#include "sim/kv_policy.hpp"
#include "sim/presets.hpp"

namespace vtensor::sim {

/// One measured size of the linear layers (Note [Compute calibration file]).
struct linear_point {
  std::uint32_t tokens = 0;  ///< tokens computed by the step
  double seconds = 0;        ///< median time of all linear layers of the step
  double flops = 0;          ///< 2 x weights x tokens
  double bytes = 0;          ///< weights + activations read and written
};

/// One measured decode-attention configuration (one layer).
struct decode_point {
  std::uint32_t batch = 0;                  ///< requests
  std::uint32_t context = 0;                ///< tokens each
  double kv_bytes = 0;                      ///< K and V bytes read
  double contiguous_s = 0;                  ///< median time, contiguous KV
  std::map<std::uint32_t, double> paged_s;  ///< by block tokens: median time behind a block table
  std::map<std::string, double> layout_s;   ///< by layout name: median time, contiguous in that layout
};

/// A compute calibration (Note [Compute calibration file]).
struct compute_calibration {
  std::string device;                       ///< "NVIDIA H200"
  std::string source;                       ///< how it was measured
  std::string model;                        ///< model preset whose shapes were timed
  std::uint32_t tp = 1;                     ///< its tensor-parallel degree
  double copy_bandwidth = 0;                ///< device-to-device copy, bytes read + written per second
  std::vector<linear_point> linear;         ///< by tokens, increasing
  std::vector<std::uint32_t> block_tokens;  ///< block sizes measured
  std::vector<std::string> layouts;         ///< contiguous layouts measured besides kv-split
  std::vector<decode_point> decode;         ///< decode attention
  std::string prefill_attention;            ///< why prefill attention is not measured

  /// Measured FLOP rate of the linear layers at `tokens` (Note [Measured step cost]).
  [[nodiscard]] double linear_flop_rate(double tokens) const;
  /// Achieved bandwidth of contiguous decode attention reading `kv_bytes` per layer.
  [[nodiscard]] double decode_bandwidth(double kv_bytes) const;
  /// The measured block size nearest `block_tokens` (log scale; the smaller on a tie).
  [[nodiscard]] std::uint32_t nearest_block(std::uint32_t block_tokens) const;
  /// paged_s / contiguous_s of every point for the block size nearest `block_tokens`.
  [[nodiscard]] std::vector<double> paged_ratios(std::uint32_t block_tokens) const;
  /// Median of paged_ratios(): the decode kernel factor of a policy reading through such blocks.
  [[nodiscard]] double paged_decode_factor(std::uint32_t block_tokens) const;
  /// layout_s / contiguous_s of every point that measured `layout` (empty for kv-split and for
  /// a layout not measured).
  [[nodiscard]] std::vector<double> layout_ratios(kv_layout layout) const;
  /// Median of layout_ratios(); 1 for kv-split; nullopt for a layout the file does not measure.
  [[nodiscard]] std::optional<double> layout_decode_factor(kv_layout layout) const;
  /// The file's JSON.
  [[nodiscard]] nlohmann::ordered_json to_json() const;
};

/// `y` at `x` on the points (x increasing, distinct, x > 0), interpolated linearly in ln x and
/// held flat beyond both ends. Needs at least one point.
[[nodiscard]] double interpolate_log_linear(const std::vector<std::pair<double, double>>& points, double x);

/// A calibration from parsed JSON; `origin` names it in messages. Throws std::invalid_argument
/// "ORIGIN: key 'K': why" for the first bad key.
[[nodiscard]] compute_calibration compute_calibration_from_json(const nlohmann::json& j, const std::string& origin);
/// The calibration in the file at `path`. Throws std::invalid_argument (unreadable file, bad
/// JSON, or a bad key, named).
[[nodiscard]] compute_calibration load_compute_calibration(const std::string& path);

/// The kernel factors of a policy reading KV as `access` says, under a calibration: `set`'s,
/// with the decode factor replaced by the measured one when the policy reads through a block
/// table or contiguously in a measured layout other than kv-split (Note [Measured step cost]).
[[nodiscard]] attention_factors calibrated_factors(attention_factors set, kv_access access,
                                                   const compute_calibration& calibration);

/// The step cost with the measured rates (Note [Measured step cost]); `factors` as for roofline().
[[nodiscard]] step_cost measured_step_cost(const model_compute& model, const gpu_preset& gpu, const step_work& work,
                                           double overhead_s, attention_factors factors,
                                           const compute_calibration& calibration);

}  // namespace vtensor::sim
