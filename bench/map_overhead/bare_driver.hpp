#pragma once
/// The few driver calls the map-overhead measurement issues itself, with nothing around them: its
/// own table resolved from libcuda.so.1 (the product's cuda backend carries no measurement code).
/// It works in the device's primary context, the one the cuda backend uses, on chunks and ranges
/// that backend created; the caller undoes every bare map with a bare unmap before the backend
/// releases the chunk or frees the range.

#include <cstdint>
#include <memory>

#include "backends/vmm_backend.hpp"

namespace vtensor::bench {

/// Bare cuMemMap / cuMemSetAccess / cuMemUnmap / cuCtxSynchronize on one device.
class bare_driver {
 public:
  /// Opens the driver and makes device `device`'s primary context current on this thread.
  /// Throws std::runtime_error when there is no driver or no such device.
  explicit bare_driver(int device);
  ~bare_driver();
  bare_driver(const bare_driver&) = delete;
  bare_driver& operator=(const bare_driver&) = delete;

  /// cuMemMap of chunk `h` (one chunk) at `va`. Throws vmm_error.
  void map(device_addr va, chunk_handle h);
  /// cuMemSetAccess, read-write for this device, over `bytes` at `va`. Throws vmm_error.
  void set_access(device_addr va, std::uint64_t bytes);
  /// cuMemUnmap of the one-chunk mapping at `va`. Throws vmm_error.
  void unmap(device_addr va);
  /// cuCtxSynchronize: waits for whatever the driver still owes the device.
  void synchronize();

 private:
  struct state;
  std::unique_ptr<state> s_;
};

}  // namespace vtensor::bench
