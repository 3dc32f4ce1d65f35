// The policy registry: every policy's option table parses its own defaults, refuses what it
// should naming the option, and the answers the registry gives without building a policy agree
// with the built policy's (Note [One home for a policy's options] in sim/policy_options.hpp).

#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "sim/paged_policy.hpp"
#include "sim/policy_registry.hpp"
#include "sim/vtensor_policy.hpp"
#include "tests/sim/sim_test_support.hpp"

using namespace vtensor;
using namespace vtensor::sim;

namespace {

// What choose_policy(policy, given) throws, or "" when it does not.
std::string refusal(const std::string& policy, const option_texts& given) {
  try {
    (void)choose_policy(policy, given);
  } catch (const option_error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_SUITE("policy_registry") {
  TEST_CASE("policy registry: every table parses its defaults, and every option lists the policies that read it") {
    for (const std::string& name : kv_policy_names()) {
      CAPTURE(name);
      CHECK(choose_policy(name, {}).name() == name);
      for (const std::string& option : kv_policy_option_names(name)) {
        const auto& table = kv_policy_option_table();
        const auto it =
            std::find_if(table.begin(), table.end(), [&](const policy_option& o) { return o.name == option; });
        REQUIRE(it != table.end());
        CHECK(std::find(it->policies.begin(), it->policies.end(), name) != it->policies.end());
        CHECK(refusal(name, {{option, it->default_text}}).empty());  // the default, typed, is a value
      }
    }
    CHECK(kv_policy_option_names("nope").empty());
  }

  TEST_CASE("policy registry: an option of another policy, a bad value or an unknown policy is an option_error") {
    CHECK(
        contains(refusal("vtensor", {{"block-tokens", "16"}}), "--block-tokens applies to policy paged, not vtensor"));
    CHECK(contains(refusal("static", {{"lookahead", "2"}}), "--lookahead applies to policy vtensor and vattention"));
    CHECK(contains(refusal("paged", {{"pipeline", "true"}}), "--pipeline applies to policy vtensor, not paged"));
    CHECK(contains(refusal("paged", {{"block-tokens", "0"}}), "--block-tokens must be at least 1"));
    CHECK(contains(refusal("paged", {{"block-tokens", "-1"}}), "--block-tokens: '-1'"));
    CHECK(contains(refusal("paged", {{"block-tokens", "16x"}}), "--block-tokens: '16x'"));
    CHECK(contains(refusal("paged", {{"block-tokens", "4294967296"}}), "too large"));
    CHECK(contains(refusal("paged", {{"prefix-caching", "maybe"}}), "--prefix-caching: 'maybe'"));
    CHECK(contains(refusal("vtensor", {{"layout", "diagonal"}}), "--layout: unknown value 'diagonal'"));
    CHECK(contains(refusal("vtensor", {{"eviction", "random-ish"}}), "--eviction: unknown value"));
    CHECK(contains(refusal("vtensor", {{"lookahead", "2"}, {"lookahead-batch", "3"}}), "--lookahead-batch"));
    CHECK(contains(refusal("magic", {}), "unknown policy 'magic' (known: vtensor"));
    CHECK(refusal("vattention", {{"megacache", "YES"}, {"lookahead", "0"}}).empty());
    CHECK_THROWS_AS((void)make_kv_policy(policy_choice(), sim_testing::llama_policy(k_gib)), option_error);
  }

  TEST_CASE("policy registry: the command line's defaults are the tables', the library's the settings structs'") {
    const policy_choice choice = choose_policy("vtensor", {});
    const auto& v = choice.settings<vtensor_settings>();
    CHECK(v.lookahead_pages == 1);
    CHECK(v.pipeline);
    CHECK(vtensor_settings{}.lookahead_pages == 0);
    CHECK_FALSE(vtensor_settings{}.pipeline);
    const policy_choice paged = choose_policy("paged", {{"block-tokens", "32"}, {"prefix-caching", "off"}});
    CHECK(paged.settings<paged_settings>().block_tokens == 32);
    CHECK_FALSE(paged.settings<paged_settings>().prefix_caching);
  }

  TEST_CASE("policy registry: its answers agree with the built policy's, and the policy tells the replica") {
    const kv_policy_options o = sim_testing::llama_policy(k_gib);
    for (const std::string& name : kv_policy_names()) {
      for (const option_texts& given : {option_texts{}, option_texts{{"block-tokens", "32"}},
                                        option_texts{{"page-tokens", "16"}}, option_texts{{"pipeline", "false"}}}) {
        if (!refusal(name, given).empty()) continue;  // not this policy's option
        CAPTURE(name);
        const policy_choice choice = choose_policy(name, given);
        const auto policy = make_kv_policy(choice, o);
        CHECK(policy->name() == name);
        CHECK(policy_access(choice, o) == policy->access());
        CHECK(policy->pipelined() == (name == "vtensor" && given.count("pipeline") == 0));
        nlohmann::ordered_json config;
        policy->add_run_config(config);
        CHECK(config["pipeline"] == policy->pipelined());
        CHECK(config["vmm_critical_path"].is_string());
      }
    }
  }
}
