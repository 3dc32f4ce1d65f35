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
/// decides exactly as one over `sim`. The model reads what each manager call did (its
/// op_effects, Note [Effects of a call] in core/scheduler.cpp) and re-derives nothing:
/// - step-thread time: the step's simulated start (advance_to) plus the modelled price of every
///   call the step thread made since, plus the waits below;
/// - a job: the pages a create or extend handed to the worker (`worker_pages`, ticket
///   `worker_job`), priced map + set-access per chunk. The worker clock starts the job at
///   max(worker clock, step-thread time after the call's own calls) and ends it its price later;
///   the request remembers that end with the ticket;
/// - a wait: when a call waited for a job (`waited_job`: an extend that needs a page the worker
///   was given, a release undoing the request's mappings), the step thread waits until that
///   job's modelled end. An extend waits after the pages it mapped itself (`step_pages` > 0),
///   else from its start;
/// - the chunks of lookahead pages are allocated by the step thread (only their mapping is
///   deferred), so their creation stays on the clock unless chunks are created ahead;
/// - not modelled: the driver serialising the worker against the step thread's own calls, and
///   chunk creation ahead (create_ahead > 0), which is taken as idle-time work: the step thread's
///   creates are then left off the clock, since whether a chunk came from the worker's stock is
///   a matter of wall time.
/// Without the worker no call hands out a job or waits, and the clock is the step thread's calls
/// alone. The core decides when an extend waits from its own record of which pages are ready;
/// settling the manager marks every page ready, so the policy settles only when the replay is
/// over (kv_policy::settle()), never in between: checking invariants does not settle.

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
  manager_config
      manager;  ///< geometry (model x layout), scheduler (context, lookahead, async, cow|recompute), eviction
};

/// Where the VMM time went (the vtensor policy's name for the shared report).
using vtensor_vmm_report = vmm_split_report;

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
  struct worker_job {
    std::uint64_t ticket = 0;  // the core's ticket
    sim_ns done{};             // its modelled end
  };

  kv_admit_result do_admit(const kv_request& r) override;
  bool do_grow(request_id id, std::uint64_t tokens) override;
  void do_release(request_id id, release_reason why) override;
  [[nodiscard]] kv_stats do_stats() const override;
  [[nodiscard]] sim_ns do_vmm_time() const override;
  [[nodiscard]] sim_ns do_critical_vmm_time() const override { return critical_; }
  void do_advance_to(sim_us now) override;
  void do_settle() override { manager_->settle(); }
  [[nodiscard]] std::optional<vmm_split_report> do_vmm_report() const override { return report(); }
  [[nodiscard]] std::string do_name() const override { return "vtensor"; }
  [[nodiscard]] nlohmann::ordered_json do_describe() const override;
  void do_check_invariants() const override { manager_->check_invariants(); }

  [[nodiscard]] memory_breakdown breakdown(const memory_stats& m) const;  // Note [vtensor memory breakdown]
  [[nodiscard]] sim_ns step_model_time() const;  // step thread's priced calls (creates excluded with create-ahead)
  [[nodiscard]] sim_ns now() const { return origin_ + (critical_ - critical_at_origin_); }
  void book_step_calls();                                           // adds the step thread's new calls to the clock
  void wait_for(request_id id, std::uint64_t ticket, sim_ns from);  // a modelled wait, from `from`, for job `ticket`
  void submit(request_id id, const op_effects& fx);                 // the job a call handed to the worker

  vtensor_policy_options options_;
  std::unique_ptr<vmm_backend> backend_owner_;  // outlives manager_ (declared first)
  accounting_backend* backend_;                 // backend_owner_, as its type
  std::unique_ptr<manager> manager_;
  std::unordered_map<std::uint64_t, worker_job> last_job_;  // request id -> its last job
  sim_ns booked_{};                                         // step_model_time() already on the clock
  sim_ns critical_{};                                       // step-thread calls + waits, modelled
  sim_ns origin_{};                                         // simulated time of the last advance_to
  sim_ns critical_at_origin_{};                             // critical_ then
  sim_ns worker_free_{};                                    // the worker clock
  sim_ns job_time_{};                                       // modelled price of the jobs
  sim_ns wait_time_{};                                      // modelled waits
  std::uint64_t jobs_ = 0, waits_ = 0;
};

}  // namespace vtensor::sim
