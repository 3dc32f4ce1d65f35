#pragma once
/// What a KV policy is built from: the settings every policy shares (the model's KV shape, the
/// memory budget, the VMM backend, the replica's limits), and each policy's own settings with the
/// table of options that sets them. A table is plain data: a command line (tools/) turns it into
/// its own option syntax and help, and hands the texts typed back for the table to parse; nothing
/// here knows a command line.
///
/// Note [One home for a policy's options]
/// A policy's settings struct, its option table (name, help, default, parse, checks across
/// options) and the questions answered without building it (how its KV is laid out, when its
/// prefixes become shareable) sit beside the policy, in its own files, as its policy_definition;
/// sim/policy_registry.cpp lists the definitions once. `replay`, compare's arms and experiment
/// files, `--help` and the fuzz harnesses read the tables through the registry, and the policy
/// answers what a run reports of it (kv_policy's pipelined(), add_run_config(), extra_figures()):
/// no command names a policy, casts to one or builds one to ask a question. An option that
/// several policies read (--lookahead, --prefix-caching) is one row builder below, given to each
/// of their tables, so that its help and default agree (the registry's tests check that every
/// name has one help and one default).

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/enum_names.hpp"
#include "backends/registry.hpp"
#include "core/eviction_order.hpp"
#include "core/model_presets.hpp"
#include "sim/kv_policy.hpp"

namespace vtensor::sim {

/// The settings every policy reads, whichever it is (each policy's own are its settings struct).
struct kv_policy_options {
  model_spec kv;                              ///< KV shape on one GPU (kv heads divided by tp)
  std::uint64_t memory_bytes = 0;             ///< KV memory budget; UINT64_MAX for unlimited
  std::uint64_t max_context_tokens = 131072;  ///< longest request
  /// Prompt tokens a step computes at most: the replica's token budget with chunked prefill;
  /// 0: the whole prompt (vtensor's pipeline maps a first chunk's pages first).
  std::uint64_t prefill_chunk_tokens = 0;
  std::string backend = "sim";   ///< VMM backend name
  std::string calibration_file;  ///< sim backend latencies; empty: built-in H200
  bool zero_latency = false;     ///< sim backend charges nothing
  int device_index = 0;          ///< cuda backend: which GPU
  /// Around every backend a policy builds (backend_config::wrap): tests inject faults with it.
  std::function<std::unique_ptr<vmm_backend>(std::unique_ptr<vmm_backend>)> wrap_backend;
  /// The replay's time, which the ttl and offline eviction orders read (nullptr: not replayed;
  /// those orders then refuse to be built).
  const eviction_clock* clock = nullptr;
  /// The trace's foresight for the offline eviction order, built when first asked (empty: none).
  std::function<const next_use_oracle*()> oracle;
};

/// The backend settings every policy builds its VMM backend with: capacity = the budget,
/// calibration, latency, device, the wrap.
[[nodiscard]] backend_config device_config(const kv_policy_options& options);

/// The head of a policy's describe(), in this order: its VMM backend, its memory budget
/// ("unlimited" or bytes) and the latency calibration of the simulated device ("zero",
/// "built-in h200" or the file). The policy appends its own entries.
[[nodiscard]] nlohmann::ordered_json describe_device(const std::string& backend, const backend_config& device);

/// Bad usage of a policy's options: a value its table rejects, an option the policy does not
/// read, an unknown policy. The message names the option ("--block-tokens must be at least 1").
class option_error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

/// One row of a policy's option table: the option as a command line offers it, and how its
/// value goes into the policy's settings `S`.
template <typename S>
struct option_row {
  std::string name;                                      ///< as typed, without "--": "block-tokens"
  std::string help;                                      ///< its line of --help
  std::string default_text;                              ///< the value when the option is not given, as --help shows it
  std::function<void(S&, std::string_view text)> parse;  ///< writes the value; throws option_error
};

/// When a policy lets other requests share a prompt's KV, and in what unit of tokens
/// (docs/policies.md, "When a prefix becomes shareable").
struct sharing_model {
  enum class moment : std::uint8_t {
    admission,  ///< at admission (paged, radix: registered before the KV is computed)
    release,    ///< when the request finishes (vtensor's lazy recording)
    computed,   ///< after the step that computes it (vtensor's eager publication)
    never,      ///< no prefix cache (static, vattention, --prefix-caching false)
  };
  moment at = moment::never;      ///< when
  std::uint32_t unit_tokens = 1;  ///< a hit is a multiple of this many tokens
};

/// What a policy registers with settings `S` (Note [One home for a policy's options]). `S`
/// names its policy: `static constexpr std::string_view policy_name`.
template <typename S>
struct policy_definition {
  std::vector<option_row<S>> options;   ///< its option table, in --help order
  std::string about;                    ///< a paragraph for replay's --help ("": none)
  std::function<void(const S&)> check;  ///< checks across options once every row parsed (may be empty)
  std::function<std::unique_ptr<kv_policy>(const kv_policy_options&, const S&)> make;  ///< builds it
  std::function<kv_access(const kv_policy_options&, const S&)> access;       ///< what the built policy's access() gives
  std::function<sharing_model(const kv_policy_options&, const S&)> sharing;  ///< its prefix sharing
};

/// policy_definition::make for a policy `P` constructed from (options, settings).
template <typename P, typename S>
[[nodiscard]] auto construct_with() {
  return [](const kv_policy_options& o, const S& s) -> std::unique_ptr<kv_policy> { return std::make_unique<P>(o, s); };
}

/// The sharing of a prefix cache that registers a prompt's KV at admission in units of `unit`
/// tokens (paged, radix), or of none when `caching` is off.
[[nodiscard]] inline sharing_model shared_at_admission(bool caching, std::uint32_t unit) {
  return {caching ? sharing_model::moment::admission : sharing_model::moment::never, unit};
}

/// `text` as a whole number of 0 or more for `option`; throws option_error naming the option
/// ("-1" is not one, nor "16 ", "0x10" or a number past UINT64_MAX).
[[nodiscard]] std::uint64_t parse_count(std::string_view option, std::string_view text);
/// `text` as a truth value for `option`: true, false, yes, no, on, off, 1, 0 in any case (what
/// Boost.Program_options takes); throws option_error naming the option.
[[nodiscard]] bool parse_truth(std::string_view option, std::string_view text);
/// An option_error for a count of `option` past what its setting holds.
[[nodiscard]] option_error too_large(std::string_view option, std::string_view text);
/// An option_error for a value of `option` outside `names`: "--arena: unknown value 'x' (...)".
[[nodiscard]] option_error unknown_value(std::string_view option, std::string_view text, const std::string& names);

/// A row for a count `S::*member`, at least `at_least`.
template <typename S, typename T>
[[nodiscard]] option_row<S> count_option(std::string name, std::string help, T S::*member, T default_value,
                                         T at_least = 0) {
  return {name, std::move(help), std::to_string(default_value), [name, member, at_least](S& s, std::string_view text) {
            const std::uint64_t v = parse_count("--" + name, text);
            if (v > std::numeric_limits<T>::max()) throw too_large("--" + name, text);
            if (v < at_least) throw option_error("--" + name + " must be at least " + std::to_string(at_least));
            s.*member = static_cast<T>(v);
          }};
}

/// A row for a truth value `S::*member` (shown as Boost shows a bool: 1 or 0).
template <typename S>
[[nodiscard]] option_row<S> truth_option(std::string name, std::string help, bool S::*member, bool default_value) {
  return {name, std::move(help), default_value ? "1" : "0",
          [name, member](S& s, std::string_view text) { s.*member = parse_truth("--" + name, text); }};
}

/// A row for a value of enumeration `S::*member`, named by `names`.
template <typename S, typename E, std::size_t N>
[[nodiscard]] option_row<S> choice_option(std::string name, std::string help, E S::*member, E default_value,
                                          const enum_names<E, N>& names) {
  return {name, std::move(help), std::string(names.name(default_value)),
          [name, member, &names](S& s, std::string_view text) {
            const auto v = names.parse(text);
            if (!v) throw unknown_value("--" + name, text, names.list());
            s.*member = *v;
          }};
}

/// --lookahead, read by vtensor and vattention: pages mapped ahead of need (1 on the command line).
template <typename S>
[[nodiscard]] option_row<S> lookahead_option(std::uint32_t S::*member) {
  return count_option<S, std::uint32_t>(
      "lookahead", "pages mapped ahead of need, vtensor and vattention (vtensor before the pipeline: 0)", member, 1);
}

/// --async-lookahead, read by vtensor and vattention: lookahead mapped by the worker.
template <typename S>
[[nodiscard]] option_row<S> async_lookahead_option(bool S::*member) {
  return truth_option<S>("async-lookahead",
                         "map lookahead pages on the background worker (true/false; only with --lookahead > 0)", member,
                         true);
}

/// `text` as a fraction strictly between 0 and 1 for `option`; throws option_error naming it.
[[nodiscard]] double parse_fraction(std::string_view option, std::string_view text);
/// `text` as a finite number of seconds, 0 or more, for `option`; throws option_error naming it.
[[nodiscard]] double parse_seconds(std::string_view option, std::string_view text);
/// `text` as an eviction order's name for --eviction; throws option_error listing the names.
[[nodiscard]] std::string parse_eviction_name(std::string_view text);
/// Checks `e` across its options (the ttl order needs --eviction-ttl); throws option_error.
void check_eviction(const eviction_config& e);
/// `e` completed for a policy built with `options`: the replay's clock and oracle, and the
/// cost-aware order's attention weight from the model preset (Note [Recompute cost of a prefix]).
[[nodiscard]] eviction_config eviction_for(const kv_policy_options& options, eviction_config e);

/// Adds the settings `e`'s order reads to a policy's describe() (after its "eviction" name):
/// eviction_ttl_s, eviction_pin_tokens, eviction_slru_protected, eviction_s3fifo_small or
/// eviction_attention_weight; nothing for the orders without settings (lru, fifo, lfu, arc, offline).
void describe_eviction_settings(nlohmann::ordered_json& j, const eviction_config& e);

/// The eviction rows, read by every policy with a prefix cache (vtensor, paged, radix): the order
/// (--eviction, core/eviction_order.hpp) and the settings its orders read.
template <typename S>
[[nodiscard]] std::vector<option_row<S>> eviction_options(eviction_config S::*member) {
  auto set = [member](auto field, auto parse) {
    return [member, field, parse](S& s, std::string_view text) { (s.*member).*field = parse(text); };
  };
  return {
      {"eviction",
       "prefix-cache eviction order: " +
           [] {
             std::string names;
             for (const auto& n : eviction_order_names()) names += (names.empty() ? "" : ", ") + n;
             return names;
           }(),
       "lru", set(&eviction_config::name, parse_eviction_name)},
      {"eviction-ttl", "ttl eviction: seconds a cached prefix lives after its last use (above 0)", "0",
       set(&eviction_config::ttl_s, [](std::string_view t) { return parse_seconds("--eviction-ttl", t); })},
      {"eviction-pin-tokens", "priority eviction: prefixes starting in a prompt's first N tokens are evicted last", "0",
       set(&eviction_config::pin_tokens, [](std::string_view t) { return parse_count("--eviction-pin-tokens", t); })},
      {"eviction-slru-protected", "slru eviction: the protected segment's share of the cached tokens", "0.8",
       set(&eviction_config::slru_protected,
           [](std::string_view t) { return parse_fraction("--eviction-slru-protected", t); })},
      {"eviction-s3fifo-small", "s3-fifo eviction: the small queue's share of the cached tokens", "0.1",
       set(&eviction_config::s3fifo_small,
           [](std::string_view t) { return parse_fraction("--eviction-s3fifo-small", t); })},
  };
}

/// --prefix-caching, read by paged and radix: keep and share prefixes.
template <typename S>
[[nodiscard]] option_row<S> prefix_caching_option(bool S::*member) {
  return truth_option<S>("prefix-caching", "paged, radix: cache and share prefixes (true/false)", member, true);
}

}  // namespace vtensor::sim
