#pragma once
/// An adaptor that splits VMM calls between the replica's step thread and the mapping worker,
/// and prices each call twice: what the inner backend charged (modelled on `sim`, measured wall
/// time on `cuda`) and what the latency model says it costs (Note [Cost per mapping]). The
/// modelled price drives the simulated clock on every backend, so that a replay over `cuda` makes
/// the same decisions as one over `sim` (Note [VMM time on the critical path], replica.hpp).
///
/// The step thread is the thread that built the adaptor, except while it runs a worker job
/// inline (core/async_mapper.hpp, Note [Inline worker]); every other thread counts as the
/// worker. Step-thread figures are plain fields, read by the step
/// thread; worker figures are atomics, readable from any thread (settled once the worker drained).
/// Calls are serialised as for any backend (the manager's backend mutex), so a worker figure has
/// one writer at a time and is added to with a relaxed load and store, not a locked add (which
/// cost about 5% of a long replay's time in the mapping path).

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "backends/backend_adaptor.hpp"
#include "backends/latency_model.hpp"

namespace vtensor::sim {

/// Calls and time of one side (step thread or worker).
struct vmm_side {
  std::array<std::uint64_t, k_vmm_call_kinds> calls{};       ///< calls per kind
  std::array<std::uint64_t, k_vmm_call_kinds> charged_ns{};  ///< charged by the inner backend, per kind
  std::array<std::uint64_t, k_vmm_call_kinds> model_ns{};    ///< latency-model price, per kind
  [[nodiscard]] std::uint64_t total_charged_ns() const;
  [[nodiscard]] std::uint64_t total_model_ns() const;
};

/// The adaptor; named "accounting(<inner>)".
class accounting_backend final : public backend_adaptor {
 public:
  /// Wraps `inner` (not null); `model` prices the calls.
  accounting_backend(std::unique_ptr<vmm_backend> inner, latency_model model);

  /// The step thread's calls (read from the step thread).
  [[nodiscard]] const vmm_side& step_side() const { return step_; }
  /// The worker's calls so far (a consistent total once the worker has drained).
  [[nodiscard]] vmm_side worker_side() const;
  /// The latency model that prices calls.
  [[nodiscard]] const latency_model& model() const { return model_; }
  /// The model's price of one call of `call` covering `chunks` chunk-sized mappings.
  [[nodiscard]] std::uint64_t price_ns(vmm_call call, std::uint64_t chunks = 1) const;

 private:
  [[nodiscard]] std::string do_name() const override { return "accounting(" + inner().name() + ")"; }
  [[nodiscard]] device_addr do_reserve(std::uint64_t bytes) override;
  void do_free_range(device_addr base) override;
  [[nodiscard]] std::optional<chunk_handle> do_create_chunk() override;
  void do_release_chunk(chunk_handle h) override;
  void do_map(device_addr va, chunk_handle h) override;
  void do_set_access(device_addr va, std::uint64_t bytes) override;
  void do_unmap(device_addr va, std::uint64_t bytes) override;
  /// One map_with_access of the inner backend, booked as the calls it counted.
  void do_map_with_access(device_addr va, chunk_handle h) override;
  /// One map_run_with_access of the inner backend, booked at once as the calls it counted.
  void do_map_run_with_access(device_addr va, std::span<const chunk_handle> handles, std::size_t& mapped) override;
  /// One map_runs_with_access of the inner backend, booked at once as the calls it counted.
  void do_map_runs_with_access(std::span<const mapping_entry> maps, std::size_t& done) override;
  /// Runs `fn`, then books and charges the mapping calls the inner backend counted meanwhile
  /// (also when `fn` throws).
  template <typename F>
  void booked_mapping_calls(F&& fn);
  /// Books `calls` calls of `call` (charged `charged` ns by the inner backend) to this thread's side.
  void book(vmm_call call, std::uint64_t calls, std::uint64_t charged, std::uint64_t price);

  /// Forwards `fn` (a call of kind `call` over `chunks` mappings) and books it to its side.
  template <typename F>
  decltype(auto) booked(vmm_call call, std::uint64_t chunks, F&& fn);

  latency_model model_;
  std::thread::id step_thread_;
  vmm_side step_;
  std::array<std::atomic<std::uint64_t>, k_vmm_call_kinds> worker_calls_{};
  std::array<std::atomic<std::uint64_t>, k_vmm_call_kinds> worker_charged_ns_{};
  std::array<std::atomic<std::uint64_t>, k_vmm_call_kinds> worker_model_ns_{};
};

}  // namespace vtensor::sim
