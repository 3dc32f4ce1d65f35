#pragma once
/// An adaptor that splits VMM calls between the replica's step thread and the mapping worker,
/// and prices each call twice: what the inner backend charged (modelled on `sim`, measured wall
/// time on `cuda`) and what the latency model says it costs (Note [Cost per mapping]). The
/// modelled price drives the simulated clock on every backend, so that a replay over `cuda` makes
/// the same decisions as one over `sim` (Note [VMM time on the critical path], replica.hpp).
///
/// Note [Whose call is it]
/// The side a call is booked to is told by the handle it is made through, never guessed from the
/// thread that makes it. The adaptor is the step view: every call made on it is the step's. Its
/// worker_view() is a second backend over the same inner one whose calls are the worker's; the
/// manager is built over views() (core/vmm_gate.hpp, backend_views) and hands the worker view to
/// the mapping worker, which issues every job through it, on its thread or inline on the step
/// thread (Note [Inline worker] in core/async_mapper.hpp). A threaded and an inline job are so
/// booked alike with no thread-local flag, and a policy built on one thread and run on another
/// books as it would on one. A manager built over the adaptor alone (one view for both) books
/// its worker's jobs to the step. Each view counts and charges its own calls (the base class's
/// counters), so the calls of the device are the sum of the two views' counters; the gate adds
/// them (vmm_gate::vmm_stats). Step figures are plain fields, read by the step thread; worker
/// figures are atomics, readable from any thread (settled once the worker drained). Calls are
/// serialised as for any backend (the manager's backend lock, held by either view's caller), so
/// a worker figure has one writer at a time and is added to with a relaxed load and store, not a
/// locked add (which cost about 5% of a long replay's time in the mapping path).

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "backends/backend_adaptor.hpp"
#include "backends/latency_model.hpp"
#include "core/vmm_gate.hpp"

namespace vtensor::sim {

/// Calls and time of one side (step thread or worker).
struct vmm_side {
  std::array<std::uint64_t, k_vmm_call_kinds> calls{};       ///< calls per kind
  std::array<std::uint64_t, k_vmm_call_kinds> charged_ns{};  ///< charged by the inner backend, per kind
  std::array<std::uint64_t, k_vmm_call_kinds> model_ns{};    ///< latency-model price, per kind
  [[nodiscard]] std::uint64_t total_charged_ns() const;
  [[nodiscard]] std::uint64_t total_model_ns() const;
};

/// The side a view books its calls to (Note [Whose call is it]).
enum class vmm_caller : std::uint8_t { step, worker };

/// The adaptor, and the step view; named "accounting(<inner>)".
class accounting_backend final : public backend_adaptor {
 public:
  /// Wraps `inner` (not null); `model` prices the calls.
  accounting_backend(std::unique_ptr<vmm_backend> inner, latency_model model);
  ~accounting_backend() override;
  accounting_backend(const accounting_backend&) = delete;
  accounting_backend& operator=(const accounting_backend&) = delete;

  /// The worker's view of the same device: its calls are booked to the worker side and counted
  /// in its own counters (Note [Whose call is it]). Lives as long as the adaptor.
  [[nodiscard]] vmm_backend& worker_view();
  /// This adaptor for the step thread and worker_view() for the worker, for a manager.
  [[nodiscard]] backend_views views() { return backend_views{*this, worker_view()}; }

  /// The step view's calls (read from the step thread).
  [[nodiscard]] const vmm_side& step_side() const { return step_; }
  /// The worker view's calls so far (a consistent total once the worker has drained).
  [[nodiscard]] vmm_side worker_side() const;
  /// The latency model that prices calls.
  [[nodiscard]] const latency_model& model() const { return model_; }
  /// The model's price of one call of `call` covering `chunks` chunk-sized mappings.
  [[nodiscard]] std::uint64_t price_ns(vmm_call call, std::uint64_t chunks = 1) const;

 private:
  class worker_backend;
  friend class worker_backend;

  [[nodiscard]] std::string do_name() const override { return "accounting(" + inner().name() + ")"; }
  [[nodiscard]] device_addr do_reserve(std::uint64_t bytes) override;
  void do_free_range(device_addr base) override;
  [[nodiscard]] std::optional<chunk_handle> do_create_chunk() override;
  void do_release_chunk(chunk_handle h) override;
  void do_map(device_addr va, chunk_handle h) override;
  void do_set_access(device_addr va, std::uint64_t bytes) override;
  void do_unmap(device_addr va, std::uint64_t bytes) override;
  void do_map_with_access(device_addr va, chunk_handle h) override;
  void do_map_run_with_access(device_addr va, std::span<const chunk_handle> handles, std::size_t& mapped) override;
  void do_map_runs_with_access(std::span<const mapping_entry> maps, std::size_t& done) override;

  // The calls of either view, on the inner backend: booked to `side` and charged to its view.
  [[nodiscard]] device_addr reserve_as(vmm_caller side, std::uint64_t bytes);
  void free_range_as(vmm_caller side, device_addr base);
  [[nodiscard]] std::optional<chunk_handle> create_chunk_as(vmm_caller side);
  void release_chunk_as(vmm_caller side, chunk_handle h);
  void map_as(vmm_caller side, device_addr va, chunk_handle h);
  void set_access_as(vmm_caller side, device_addr va, std::uint64_t bytes);
  void unmap_as(vmm_caller side, device_addr va, std::uint64_t bytes);
  /// One map_with_access of the inner backend, booked as the calls it counted.
  void map_with_access_as(vmm_caller side, device_addr va, chunk_handle h);
  /// One map_run_with_access of the inner backend, booked at once as the calls it counted.
  void map_run_with_access_as(vmm_caller side, device_addr va, std::span<const chunk_handle> handles,
                              std::size_t& mapped);
  /// One map_runs_with_access of the inner backend, booked at once as the calls it counted.
  void map_runs_with_access_as(vmm_caller side, std::span<const mapping_entry> maps, std::size_t& done);

  /// Runs `fn`, then books to `side` and charges to its view the mapping calls the inner backend
  /// counted meanwhile (also when `fn` throws).
  template <typename F>
  void booked_mapping_calls(vmm_caller side, F&& fn);
  /// Forwards `fn` (a call of kind `call` over `chunks` mappings), books it to `side` and charges
  /// it to that side's view (also when it throws).
  template <typename F>
  decltype(auto) booked(vmm_caller side, vmm_call call, std::uint64_t chunks, F&& fn);
  /// Books `calls` calls of `call` (charged `charged` ns by the inner backend) to `side`.
  void book(vmm_caller side, vmm_call call, std::uint64_t calls, std::uint64_t charged, std::uint64_t price);
  /// Adds `ns` to the time charged for `call` by `side`'s view (this adaptor or the worker view).
  void charge_side(vmm_caller side, vmm_call call, std::uint64_t ns);

  latency_model model_;
  vmm_side step_;
  std::array<std::atomic<std::uint64_t>, k_vmm_call_kinds> worker_calls_{};
  std::array<std::atomic<std::uint64_t>, k_vmm_call_kinds> worker_charged_ns_{};
  std::array<std::atomic<std::uint64_t>, k_vmm_call_kinds> worker_model_ns_{};
  std::unique_ptr<worker_backend> worker_view_;  // Note [Whose call is it]
};

}  // namespace vtensor::sim
