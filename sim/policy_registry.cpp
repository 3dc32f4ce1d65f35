#include "sim/policy_registry.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <stdexcept>

#include "sim/paged_policy.hpp"
#include "sim/radix_policy.hpp"
#include "sim/static_policy.hpp"
#include "sim/vattention_policy.hpp"
#include "sim/vtensor_policy.hpp"

namespace vtensor::sim {
namespace {

// A policy_definition with its settings type erased: what the registry holds of each policy.
struct registered_policy {
  std::string name;
  std::vector<policy_option> options;  // its table's rows (policies: this one alone)
  std::string about;
  std::function<policy_choice(const option_texts&)> choose;  // every row parsed, then the checks
  std::function<policy_choice()> defaults;                   // the settings struct's defaults
  std::function<std::unique_ptr<kv_policy>(const policy_choice&, const kv_policy_options&)> make;
  std::function<kv_access(const policy_choice&, const kv_policy_options&)> access;
  std::function<sharing_model(const policy_choice&, const kv_policy_options&)> sharing;
};

template <typename S>
registered_policy erase(policy_definition<S> definition) {
  const auto d = std::make_shared<const policy_definition<S>>(std::move(definition));
  registered_policy r;
  r.name = S::policy_name;
  for (const option_row<S>& row : d->options) r.options.push_back({row.name, row.help, row.default_text, {r.name}});
  r.about = d->about;
  r.choose = [d](const option_texts& given) {
    S s;
    for (const option_row<S>& row : d->options) {
      const auto it = given.find(row.name);
      row.parse(s, it == given.end() ? std::string_view(row.default_text) : std::string_view(it->second));
    }
    if (d->check) d->check(s);
    return policy_choice(std::move(s));
  };
  r.defaults = [] { return policy_choice(S{}); };
  r.make = [d](const policy_choice& c, const kv_policy_options& o) { return d->make(o, c.settings<S>()); };
  r.access = [d](const policy_choice& c, const kv_policy_options& o) { return d->access(o, c.settings<S>()); };
  r.sharing = [d](const policy_choice& c, const kv_policy_options& o) { return d->sharing(o, c.settings<S>()); };
  return r;
}

// Every policy, once: the only list of them.
const std::vector<registered_policy>& registry() {
  static const std::vector<registered_policy> policies = {erase(vtensor_definition()), erase(paged_definition()),
                                                          erase(radix_definition()), erase(static_definition()),
                                                          erase(vattention_definition())};
  return policies;
}

const registered_policy* find(std::string_view name) {
  for (const registered_policy& p : registry()) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

const registered_policy& known(std::string_view name) {
  const registered_policy* p = find(name);
  if (p == nullptr)
    throw option_error(fmt::format("unknown policy '{}' (known: {})", name, fmt::join(kv_policy_names(), ", ")));
  return *p;
}

const registered_policy& chosen(const policy_choice& choice) {
  if (choice.name().empty()) throw option_error("no policy chosen");
  return known(choice.name());
}

}  // namespace

std::vector<std::string> kv_policy_names() {
  std::vector<std::string> names;
  for (const registered_policy& p : registry()) names.push_back(p.name);
  return names;
}

const std::vector<policy_option>& kv_policy_option_table() {
  static const std::vector<policy_option> table = [] {
    std::vector<policy_option> all;
    for (const registered_policy& p : registry()) {
      for (const policy_option& o : p.options) {
        const auto same =
            std::find_if(all.begin(), all.end(), [&](const policy_option& a) { return a.name == o.name; });
        if (same == all.end()) {
          all.push_back(o);
        } else {
          same->policies.push_back(p.name);
        }
      }
    }
    return all;
  }();
  return table;
}

std::vector<std::string> kv_policy_option_names(std::string_view name) {
  std::vector<std::string> names;
  if (const registered_policy* p = find(name)) {
    for (const policy_option& o : p->options) names.push_back(o.name);
  }
  return names;
}

std::string kv_policy_about(std::string_view name) {
  const registered_policy* p = find(name);
  return p == nullptr ? std::string() : p->about;
}

policy_choice choose_policy(std::string_view name, const option_texts& given) {
  const registered_policy& p = known(name);
  const auto reads = [](const registered_policy& q, const std::string& option) {
    return std::any_of(q.options.begin(), q.options.end(), [&](const policy_option& o) { return o.name == option; });
  };
  for (const auto& [option, text] : given) {
    if (reads(p, option)) continue;
    std::vector<std::string> readers;
    for (const registered_policy& q : registry()) {
      if (reads(q, option)) readers.push_back(q.name);
    }
    if (readers.empty()) throw option_error(fmt::format("--{}: no policy reads this option", option));
    throw option_error(fmt::format("--{} applies to policy {}, not {}", option, fmt::join(readers, " and "), p.name));
  }
  return p.choose(given);
}

std::unique_ptr<kv_policy> make_kv_policy(const policy_choice& choice, const kv_policy_options& options) {
  return chosen(choice).make(choice, options);
}

std::unique_ptr<kv_policy> make_kv_policy(std::string_view name, const kv_policy_options& options) {
  const registered_policy& p = known(name);
  return p.make(p.defaults(), options);
}

kv_access policy_access(const policy_choice& choice, const kv_policy_options& options) {
  return chosen(choice).access(choice, options);
}

sharing_model policy_sharing(const policy_choice& choice, const kv_policy_options& options) {
  return chosen(choice).sharing(choice, options);
}

}  // namespace vtensor::sim
