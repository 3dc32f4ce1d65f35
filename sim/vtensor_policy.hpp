#pragma once
/// The vTensor KV policy: the core manager (one vTensor per request, prefix sharing through the
/// rTree, lazy deallocation) over a VMM backend chosen by name, wrapped in an accounting adaptor
/// that splits the calls between the step thread and the mapping worker and prices them with the
/// latency model. The policy also runs the model of the mapping worker (Note [Mapping worker
/// model]) that puts the simulated waits on the step's critical path.
///
/// Note [Mapping worker model]
/// With asynchronous lookahead the manager hands lookahead mappings to a background worker. The
/// simulated clock models that worker; it must not read wall time, so that a replay over `cuda`
/// decides exactly as one over `sim`. The model:
/// - step-thread time: the step's simulated start (advance_to) plus the modelled price of every
///   call the step thread made since, plus the waits below;
/// - a job: after each create or extend, the pages the request gained beyond those the step
///   thread mapped itself (view().mapped_tokens against the step thread's map calls) went to the
///   worker, priced map + set-access per chunk. The worker clock starts the job at max(worker
///   clock, step-thread time) and ends it its price later; the request remembers that end;
/// - a wait: when an extend needs a page the worker has not mapped (the core's test: needed
///   pages > ready pages), or a release finds the request's job still running, the step thread
///   waits until the request's last job ends (the core waits on the request's last ticket too);
/// - the chunks of lookahead pages are allocated by the step thread (only their mapping is
///   deferred), so their creation stays on the clock unless chunks are created ahead;
/// - not modelled: the driver serialising the worker against the step thread's own calls, and
///   chunk creation ahead (create_ahead > 0), which is taken as idle-time work: the step thread's
///   creates are then left off the clock, since whether a chunk came from the worker's stock is
///   a matter of wall time.
/// Without asynchronous lookahead no job exists and the clock is the step thread's calls alone.

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "backends/registry.hpp"
#include "core/manager.hpp"
#include "sim/accounting_backend.hpp"
#include "sim/kv_policy.hpp"

namespace vtensor::sim {

/// Options of the vTensor policy.
struct vtensor_policy_options {
  std::string backend = "sim";  ///< backend registry name
  backend_config device;        ///< capacity (the KV memory budget), calibration, latency
  manager_config manager;       ///< geometry (model x layout), scheduler (context, lookahead, async, cow|recompute), eviction
};

/// Where the VMM time went: modelled (drives the clock) and charged (measured on `cuda`).
struct vtensor_vmm_report {
  vmm_side step;                     ///< calls of the step thread
  vmm_side worker;                   ///< calls of the mapping worker
  std::uint64_t critical_model_ns = 0;   ///< modelled step-thread time (calls + waits) on the clock
  std::uint64_t jobs = 0;                ///< modelled worker jobs (lookahead mappings)
  std::uint64_t job_model_ns = 0;        ///< their modelled price
  std::uint64_t modelled_waits = 0;      ///< modelled waits of the step thread for the worker
  std::uint64_t modelled_wait_ns = 0;    ///< their modelled length
  std::uint64_t mapping_waits = 0;       ///< measured (core): extends that waited for the worker
  std::uint64_t mapping_wait_ns = 0;     ///< measured (core): wall time of those waits
  std::uint64_t async_vmm_ns = 0;        ///< charged by the worker (core's count)
  std::uint64_t chunks_created = 0;      ///< chunks created in all (core's count, adopted ones)
  std::uint64_t chunks_created_ahead = 0;  ///< of which by the worker
};

/// The policy. Owns its backend and manager.
class vtensor_policy final : public kv_policy {
 public:
  /// Throws unknown_backend_error, calibration_error, or std::invalid_argument (unknown eviction
  /// policy).
  explicit vtensor_policy(vtensor_policy_options options);
  ~vtensor_policy() override;

  /// The manager, for inspection.
  [[nodiscard]] const manager& kv_manager() const { return *manager_; }
  /// The accounting adaptor over the backend.
  [[nodiscard]] const accounting_backend& backend() const { return *backend_; }
  /// Where the VMM time went (call after the replay for settled worker figures).
  [[nodiscard]] vtensor_vmm_report report() const;

 private:
  struct request_model {
    std::uint32_t mapped_pages = 0;  // pages mapped or queued
    std::uint32_t ready_pages = 0;   // pages known to be in place
    std::uint64_t done_ns = 0;       // modelled end of its last worker job
  };

  kv_admit_result do_admit(const kv_request& r) override;
  bool do_grow(request_id id, std::uint64_t tokens) override;
  void do_release(request_id id, release_reason why) override;
  [[nodiscard]] kv_stats do_stats() const override;
  [[nodiscard]] std::uint64_t do_vmm_time_ns() const override;
  [[nodiscard]] std::uint64_t do_critical_vmm_ns() const override { return critical_ns_; }
  void do_advance_to(std::uint64_t now_us) override;
  [[nodiscard]] bool do_maps_ahead() const override;
  [[nodiscard]] std::string do_name() const override { return "vtensor"; }
  [[nodiscard]] nlohmann::ordered_json do_describe() const override;
  void do_check_invariants() const override;

  [[nodiscard]] std::uint64_t step_model_ns() const;  // step thread's priced calls (creates excluded with create-ahead)
  [[nodiscard]] std::uint64_t now_ns() const { return origin_ns_ + (critical_ns_ - critical_at_origin_); }
  void book_step_calls();                              // adds the step thread's new calls to the clock
  void wait_for(const request_model& m, std::uint64_t at_ns);  // a modelled wait, from at_ns, for m's last job
  void submit(request_model& m, std::uint32_t pages);  // a modelled worker job of `pages` pages
  [[nodiscard]] std::uint32_t mapped_pages(request_id id) const;

  vtensor_policy_options options_;
  std::unique_ptr<vmm_backend> backend_owner_;     // outlives manager_ (declared first)
  accounting_backend* backend_;                    // backend_owner_, as its type
  std::unique_ptr<manager> manager_;
  std::unordered_map<std::uint64_t, request_model> requests_;
  std::uint64_t booked_model_ns_ = 0;    // step_model_ns() already on the clock
  std::uint64_t critical_ns_ = 0;        // step-thread calls + waits, modelled
  std::uint64_t origin_ns_ = 0;          // simulated time of the last advance_to
  std::uint64_t critical_at_origin_ = 0;  // critical_ns_ then
  std::uint64_t worker_free_ns_ = 0;     // the worker clock
  std::uint64_t jobs_ = 0, job_model_ns_ = 0, waits_ = 0, wait_ns_ = 0;
};

}  // namespace vtensor::sim
