#pragma once
/// Fault-injection adaptor: makes chosen calls fail as a driver would, to test the core's error
/// paths. A failed create returns std::nullopt (out of memory); any other failed call throws
/// vmm_error("injected fault"). A failed call is NOT forwarded, so the inner backend's state and
/// counters do not change and no time is charged; the adaptor still counts the call.
///
/// Note [Which calls fail]
/// Calls are numbered per kind from 1, counting every call this adaptor received (failed ones
/// included, and the set-access of a map_with_access). The adaptor numbers them itself, as its
/// hooks run: the counters of the base class are the public record, kept after each call. A call fails when any rule of
/// its kind says so:
///  - fail_nth(kind, n): the n-th call only, once;
///  - fail_every(kind, n): calls n, 2n, 3n, ...;
///  - fail_with_probability(kind, p): each call with probability p, drawn from one
///    std::mt19937_64 seeded at construction; a draw is made only for kinds with p > 0, so the
///    same seed and the same call sequence fail the same calls.

#include <array>
#include <cstdint>
#include <memory>
#include <random>
#include <string>

#include "backends/backend_adaptor.hpp"

namespace vtensor {

/// Fault-injection adaptor; named "fault_injection(<inner>)". See Note [Which calls fail].
class fault_injection_backend final : public backend_adaptor {
 public:
  /// Wraps `inner` (not null, else std::invalid_argument); `seed` drives probabilistic faults.
  explicit fault_injection_backend(std::unique_ptr<vmm_backend> inner, std::uint64_t seed = 0);

  /// Fails the `n`-th call of `call` (1-based), once. n == 0 removes the rule.
  void fail_nth(vmm_call call, std::uint64_t n);
  /// Fails every `n`-th call of `call`. n == 0 removes the rule.
  void fail_every(vmm_call call, std::uint64_t n);
  /// Fails each call of `call` with probability `p` in [0, 1] (else std::invalid_argument).
  void fail_with_probability(vmm_call call, double p);
  /// Removes every rule (the counts of injected faults stay).
  void clear_faults();

  /// Faults injected so far, all kinds.
  [[nodiscard]] std::uint64_t faults_injected() const;
  /// Faults injected so far for one kind.
  [[nodiscard]] std::uint64_t faults_injected(vmm_call call) const { return injected_[static_cast<std::size_t>(call)]; }
  /// The seed given at construction.
  [[nodiscard]] std::uint64_t seed() const { return seed_; }

 private:
  [[nodiscard]] std::string do_name() const override { return "fault_injection(" + inner().name() + ")"; }
  struct fault_rule {
    std::uint64_t nth = 0;     ///< fail the call with this number; 0: none
    bool repeat = false;       ///< fail every multiple of nth, not just nth
    double probability = 0.0;  ///< chance of failing each call
  };

  [[nodiscard]] device_addr do_reserve(std::uint64_t bytes) override;
  void do_free_range(device_addr base) override;
  [[nodiscard]] std::optional<chunk_handle> do_create_chunk() override;
  void do_release_chunk(chunk_handle h) override;
  void do_map(device_addr va, chunk_handle h) override;
  void do_set_access(device_addr va, std::uint64_t bytes) override;
  void do_unmap(device_addr va, std::uint64_t bytes) override;

  /// Numbers this call of `call` and decides whether it fails; counts the fault if so.
  [[nodiscard]] bool should_fail(vmm_call call);
  /// Throws vmm_error("injected fault") if this call fails.
  void maybe_throw(vmm_call call, device_addr va);

  std::uint64_t seed_;
  std::mt19937_64 rng_;
  std::array<fault_rule, k_vmm_call_kinds> rules_{};
  std::array<std::uint64_t, k_vmm_call_kinds> received_{};  ///< calls numbered so far, per kind
  std::array<std::uint64_t, k_vmm_call_kinds> injected_{};
};

}  // namespace vtensor
