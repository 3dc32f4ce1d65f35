#pragma once

#include "traces/distribution.hpp"
#include "traces/trace_reader.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <deque>
#include <queue>
#include <span>
#include <vector>

namespace vtensor::traces {

/// How new sessions arrive.
enum class arrival_process {
  poisson,  ///< exponential gaps (CV 1)
  gamma,    ///< gamma gaps with coefficient of variation `arrival_cv` (> 1: burstier)
};

/// The knobs of the synthetic workload; traces/FORMAT.md explains each, with defaults.
struct generator_params {
  std::uint64_t seed = 1;                              ///< std::mt19937_64 seed
  std::uint64_t requests = 1000;                       ///< stop after this many requests (0: see sessions)
  std::uint64_t sessions = 0;                          ///< or: start this many sessions, emit all their turns
  std::uint32_t block_tokens = 512;                    ///< tokens per prefix block
  arrival_process arrival = arrival_process::poisson;  ///< session arrival process
  double session_rate_per_s = 1.0;                     ///< new sessions per second
  double arrival_cv = 1.0;                             ///< gaps' coefficient of variation (gamma only)
  int_distribution turns = int_distribution::parse("geometric:3");                ///< turns per session
  int_distribution turn_gap_ms = int_distribution::parse("exp:30000");            ///< arrival to next turn's
  int_distribution user_tokens = int_distribution::parse("lognormal:400:1");      ///< new text a turn
  int_distribution output_tokens = int_distribution::parse("lognormal:250:0.8");  ///< answer length
  std::uint32_t system_prompts = 8;                                        ///< pool of shared system prompts (0: none)
  int_distribution system_tokens = int_distribution::parse("const:2048");  ///< each prompt's length
  double system_zipf = 1.0;                                                ///< popularity: P(prompt i) ~ 1 / (i+1)^s
  double fanout_probability = 0.0;  ///< chance a turn is sent as several siblings at once
  int_distribution fanout = int_distribution::parse("uniform:2:4");            ///< siblings, >= 2
  int_distribution fanout_suffix_tokens = int_distribution::parse("const:0");  ///< own tail each
  std::uint32_t max_context_tokens = 32768;                                    ///< prompt + output never exceeds this

  /// Throws std::invalid_argument naming the bad parameter.
  void validate() const;
  /// All parameters, for the trace header (reproducibility).
  [[nodiscard]] nlohmann::json to_json() const;
};

/// A seeded synthetic trace, produced lazily in arrival order: memory holds only the sessions
/// still to speak, so millions of requests stream in constant space. Same parameters and seed,
/// same requests, on any platform (see random_engine).
///
/// Note [Generated prefix identity]: keys come from one counter, so a key names one block
/// content. A session starts from its system prompt (shared pool, Zipf popularity; its full
/// blocks have fixed keys). Turn k's prompt = the context (system prompt + all earlier prompts
/// and answers) + new user text; its key list repeats the context's FULL blocks and takes fresh
/// keys for the rest, a partial last block included (its content changes once extended). After
/// the turn the context grows by the prompt and the answer. Fan-out siblings repeat the turn's
/// prompt (same keys when they add no suffix; with a suffix they share its full blocks only);
/// the conversation continues from the first sibling. A turn that would exceed
/// max_context_tokens ends the session; a first turn is clamped instead.
class trace_generator final : public trace_reader {
 public:
  /// Throws std::invalid_argument for bad parameters.
  explicit trace_generator(generator_params params);

  [[nodiscard]] const generator_params& params() const noexcept { return params_; }

 private:
  struct session_state {
    std::uint64_t id = 0;
    std::uint32_t turn = 0;   // next turn to emit
    std::uint32_t turns = 0;  // turns it will have, unless max_context_tokens ends it first
    std::uint64_t context_tokens = 0;
    std::vector<std::uint64_t> context_keys;  // keys of the context's full blocks
  };
  struct wake_up {
    std::uint64_t arrival_us;  // of the session's next turn
    std::uint64_t sequence;    // tie-break: scheduling order
    std::size_t slot;          // in slots_
    bool operator>(const wake_up& other) const noexcept {
      return arrival_us != other.arrival_us ? arrival_us > other.arrival_us : sequence > other.sequence;
    }
  };

  bool do_next(trace_request& request) override;
  void start_session();
  void emit_turn(std::size_t slot, std::uint64_t arrival_us);
  [[nodiscard]] std::uint32_t pick_system_prompt();
  [[nodiscard]] std::uint64_t sample_session_gap_us();
  void fill_keys(std::vector<std::uint64_t>& keys, std::uint64_t tokens, std::span<const std::uint64_t> inherited);

  generator_params params_;
  random_engine engine_;
  std::uint64_t next_key_ = 0;
  std::vector<std::uint64_t> system_tokens_;
  std::vector<std::vector<std::uint64_t>> system_keys_;
  std::vector<double> system_cdf_;
  double next_session_us_ = 0;
  std::uint64_t sessions_started_ = 0;
  std::uint64_t sequence_ = 0;
  std::uint64_t emitted_ = 0;
  std::vector<session_state> slots_;
  std::vector<std::size_t> free_slots_;
  std::priority_queue<wake_up, std::vector<wake_up>, std::greater<>> waiting_;
  std::deque<trace_request> ready_;
};

}  // namespace vtensor::traces
