#pragma once
/// KV policies chosen at run time by name, each with its own settings parsed through its option
/// table (Note [One home for a policy's options] in sim/policy_options.hpp), as backends/registry
/// does for backends. The only way a command builds a policy or asks about one.

#include <any>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sim/kv_policy.hpp"
#include "sim/policy_options.hpp"

namespace vtensor::sim {

/// A policy and its own settings: chosen by name from option texts (choose_policy()), or built
/// from a settings struct. What make_kv_policy() builds and the registry answers questions about.
/// Cheap to copy.
class policy_choice {
 public:
  /// No policy (make_kv_policy() throws for it).
  policy_choice() = default;
  /// The policy that reads settings `S` (S::policy_name), with `settings`.
  template <typename S>
  explicit policy_choice(S settings) : name_(S::policy_name), settings_(std::move(settings)) {}

  /// The policy's registry name.
  [[nodiscard]] const std::string& name() const { return name_; }
  /// Its settings; throws std::bad_any_cast when they are not an `S`.
  template <typename S>
  [[nodiscard]] const S& settings() const {
    return std::any_cast<const S&>(settings_);
  }

 private:
  std::string name_;
  std::any settings_;
};

/// One option of the policies' tables as a command line offers it: an option that several
/// policies read is one, their tables agreeing on its help and default.
struct policy_option {
  std::string name;                   ///< as typed, without "--"
  std::string help;                   ///< its line of --help
  std::string default_text;           ///< the value when not given
  std::vector<std::string> policies;  ///< the policies that read it, in registry order
};

/// Option texts as typed: option name (without "--") -> value.
using option_texts = std::map<std::string, std::string, std::less<>>;

/// Names of the policies, "vtensor" first.
[[nodiscard]] std::vector<std::string> kv_policy_names();
/// Every policy's options, each once: the policies in registry order, each's table in its order.
[[nodiscard]] const std::vector<policy_option>& kv_policy_option_table();
/// The names of the options policy `name` reads, in its table's order (none for an unknown name).
[[nodiscard]] std::vector<std::string> kv_policy_option_names(std::string_view name);
/// Policy `name`'s paragraph for replay's --help ("" when it has none).
[[nodiscard]] std::string kv_policy_about(std::string_view name);

/// Policy `name` with the options in `given`, the others at their table's default. Throws
/// option_error for an unknown policy (listing the known ones), an option it does not read
/// (naming the policies that do), or a value its table rejects.
[[nodiscard]] policy_choice choose_policy(std::string_view name, const option_texts& given);

/// Builds `choice` over the shared `options`. Throws option_error for an empty choice, or what
/// the policy's constructor throws (std::invalid_argument for a bad option, unknown_backend_error,
/// calibration_error, vmm_error).
[[nodiscard]] std::unique_ptr<kv_policy> make_kv_policy(const policy_choice& choice, const kv_policy_options& options);
/// Builds policy `name` with its settings struct's defaults (programs and tests; the command
/// line's defaults are its table's, choose_policy(name, {})). Throws as the overload above, and
/// std::invalid_argument for an unknown name (the message lists the known ones).
[[nodiscard]] std::unique_ptr<kv_policy> make_kv_policy(std::string_view name, const kv_policy_options& options);
/// How `choice`'s attention kernels read its KV: what make_kv_policy(choice, options)->access()
/// would answer, without building it.
[[nodiscard]] kv_access policy_access(const policy_choice& choice, const kv_policy_options& options);
/// When `choice` lets requests share a prompt's KV (the compare analysis' miss causes).
[[nodiscard]] sharing_model policy_sharing(const policy_choice& choice, const kv_policy_options& options);

}  // namespace vtensor::sim
