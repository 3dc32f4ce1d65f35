#pragma once
/// The real device: the VMM contract over the CUDA driver API. The driver (libcuda.so.1) is
/// loaded at run time, so a binary built with the toolkit starts on a machine without a GPU and
/// `make_backend("cuda")` says plainly that there is no device there (cuda_unavailable).
///
/// Every driver call used sits in one table (cuda_backend.cpp). CUDA_ERROR_OUT_OF_MEMORY from
/// cuMemCreate, or the configured capacity reached, is the out-of-memory result; any other driver
/// error throws vmm_error naming the call, the address and the driver's error name. The backend
/// tracks its ranges, chunks and mappings in an address_space, the one `sim` uses, and checks the
/// contract there before calling the driver, so a broken rule fails the same way as on `sim`
/// instead of reaching the driver.
/// Time charged per call is measured wall time.

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "backends/vmm_backend.hpp"

namespace vtensor {

/// No driver, no device, or no VMM support on this machine.
class cuda_unavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Free and total device memory as the driver reports them (cuMemGetInfo).
struct cuda_mem_info {
  std::uint64_t free_bytes = 0;   ///< free device memory
  std::uint64_t total_bytes = 0;  ///< device memory
};

/// The CUDA VMM backend over device `device_index`.
class cuda_backend final : public vmm_backend {
 public:
  /// Opens the driver and the device's primary context. `capacity_bytes` caps the chunks it
  /// creates (rounded down to chunks); 0 means the device's free memory at start. Throws
  /// cuda_unavailable when there is no driver, no such device, or no VMM support.
  cuda_backend(int device_index, std::uint64_t capacity_bytes);
  ~cuda_backend() override;

  /// The device's name, e.g. "NVIDIA H200".
  [[nodiscard]] const std::string& device_name() const;
  /// cuMemGetInfo now.
  [[nodiscard]] cuda_mem_info mem_info() const;
  /// Driver version (e.g. 13000).
  [[nodiscard]] int driver_version() const;

 private:
  struct state;

  [[nodiscard]] std::string do_name() const override { return "cuda"; }
  [[nodiscard]] std::uint64_t do_granularity_bytes() const override;
  [[nodiscard]] std::uint64_t do_capacity_bytes() const override;
  [[nodiscard]] device_addr do_reserve(std::uint64_t bytes) override;
  void do_free_range(device_addr base) override;
  [[nodiscard]] std::optional<chunk_handle> do_create_chunk() override;
  void do_release_chunk(chunk_handle h) override;
  void do_map(device_addr va, chunk_handle h) override;
  void do_set_access(device_addr va, std::uint64_t bytes) override;
  void do_unmap(device_addr va, std::uint64_t bytes) override;
  void do_map_with_access(device_addr va, chunk_handle h) override;
  /// do_map, and with `with_access` do_map_with_access: checks and records once around the driver
  /// calls (Note [Tracking on the map path] in address_space.hpp).
  void map_chunk(device_addr va, chunk_handle h, bool with_access);
  [[nodiscard]] vmm_live do_live() const override;

  std::unique_ptr<state> s_;
};

}  // namespace vtensor
