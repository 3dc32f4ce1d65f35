#pragma once
/// Backends chosen at run time by name: `sim` always, `cuda` when the build has the toolkit.
/// Asking for a name this build lacks lists the names it has.

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "backends/latency_model.hpp"
#include "backends/vmm_backend.hpp"

namespace vtensor {

/// What make_backend needs to build any backend; each backend reads the fields it understands.
struct backend_config {
  /// Physical memory to offer (sim: the limit); defaults to the 71,313 chunks an H200 could create.
  std::uint64_t capacity_bytes = std::uint64_t{71'313} * k_chunk_bytes;
  std::string calibration_file;  ///< sim: latency costs to load; empty = built-in H200 figures
  bool zero_latency = false;     ///< sim: charge nothing (overrides calibration_file)
  int device_index = 0;          ///< cuda: which GPU
  /// An adaptor make_backend puts around the backend it built (fault injection, probes: the
  /// soak tests reach every policy's backend this way); empty: none.
  std::function<std::unique_ptr<vmm_backend>(std::unique_ptr<vmm_backend>)> wrap;
};

/// The latency model that prices VMM calls for `config`: nothing with zero_latency, else the
/// calibration file, else the built-in H200 figures. The sim backend charges it; replays over any
/// backend price their calls with it (one selection rule for both). Throws calibration_error.
[[nodiscard]] latency_model latency_model_for(const backend_config& config);

/// A backend name this build does not have.
class unknown_backend_error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

/// Names of the backends this build has, in registry order ("sim" first).
[[nodiscard]] std::vector<std::string> backend_names();

/// Whether backend `name` is simulated: its calls take no wall time and nothing it does depends
/// on wall time (`sim`); false for a real device and for a name this build lacks.
[[nodiscard]] bool backend_is_simulated(std::string_view name);

/// Builds the backend `name` for `config`. Throws unknown_backend_error (message lists the names
/// this build has), calibration_error for a bad calibration file, or what the backend throws.
[[nodiscard]] std::unique_ptr<vmm_backend> make_backend(std::string_view name, const backend_config& config);

}  // namespace vtensor
