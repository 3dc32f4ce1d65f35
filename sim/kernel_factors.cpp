#include "sim/kernel_factors.hpp"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace vtensor::sim {

attention_factors kernel_factor_set::of(std::string_view policy) const {
  const auto it = factors.find(std::string(policy));
  return it == factors.end() ? attention_factors{} : it->second;
}

nlohmann::ordered_json kernel_factor_set::to_json() const {
  nlohmann::ordered_json j;
  j["name"] = name;
  nlohmann::ordered_json f = nlohmann::ordered_json::object();
  for (const auto& [policy, a] : factors) f[policy] = {{"prefill", a.prefill}, {"decode", a.decode}};
  j["factors"] = f;
  nlohmann::ordered_json s = nlohmann::ordered_json::object();
  for (const auto& [policy, text] : sources) s[policy] = text;
  j["sources"] = s;
  return j;
}

const std::vector<kernel_factor_set>& builtin_kernel_factor_sets() {
  // Note [Kernel factors]: every figure with its source.
  static const std::vector<kernel_factor_set> sets{
      {"modern",
       {{"paged", {1.11, 1.11}}, {"radix", {1.11, 1.11}}},
       {{"paged",
         "FlashInfer README: its paged (vector-sparse) attention reaches about 90% of the bandwidth of its dense "
         "kernels (1/0.9 = 1.11); prefill paying the same is an assumption"},
        {"radix", "as paged: SGLang reads its token pool through FlashInfer's paged kernels (page size 1)"}}},
      {"2024",
       {{"paged", {3.15, 1.23}}, {"radix", {2.12, 1.11}}},
       {{"paged",
         "prefill 3.15: vTensor paper (arXiv 2407.15309), average kernel speedup over vLLM's paged attention kernel "
         "(max 3.27 not used); decode 1.23: vLLM paper (arXiv 2309.06180, section 7.1), its paged kernel 20-26% "
         "slower than FasterTransformer's"},
        {"radix",
         "prefill 2.12: vTensor paper, average kernel speedup over SGLang's Triton prefix-prefill kernel (max 3.92 "
         "not used); decode 1.11: SGLang decoded with FlashInfer in 2024 (FlashInfer's 90% of dense bandwidth)"}}},
  };
  return sets;
}

namespace {

double factor_field(const nlohmann::json& entry, const char* key, const std::string& where) {
  if (!entry.contains(key)) return 1.0;
  const nlohmann::json& v = entry[key];
  if (!v.is_number()) throw std::invalid_argument(fmt::format("{}.{}: not a number", where, key));
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < 1.0) {
    throw std::invalid_argument(
        fmt::format("{}.{}: {} is below 1 (a factor slows attention down, never speeds "
                    "it up against the contiguous kernels the roofline prices)",
                    where, key, x));
  }
  return x;
}

}  // namespace

kernel_factor_set kernel_factors_from_json(const nlohmann::json& j, const std::string& origin) {
  if (!j.is_object()) throw std::invalid_argument(fmt::format("{}: not a JSON object", origin));
  kernel_factor_set s;
  s.name = origin;
  if (j.contains("name")) {
    if (!j["name"].is_string()) throw std::invalid_argument(fmt::format("{}: name: not a string", origin));
    s.name = j["name"].get<std::string>();
  }
  if (!j.contains("factors") || !j["factors"].is_object()) {
    throw std::invalid_argument(fmt::format("{}: missing object 'factors' (policy -> {{prefill, decode}})", origin));
  }
  for (const auto& [policy, entry] : j["factors"].items()) {
    const std::string where = fmt::format("{}: factors.{}", origin, policy);
    if (!entry.is_object()) throw std::invalid_argument(fmt::format("{}: not an object", where));
    for (const auto& [key, value] : entry.items()) {
      if (key != "prefill" && key != "decode") {
        throw std::invalid_argument(fmt::format("{}: unknown field '{}' (prefill, decode)", where, key));
      }
    }
    s.factors[policy] = {factor_field(entry, "prefill", where), factor_field(entry, "decode", where)};
  }
  if (j.contains("sources")) {
    if (!j["sources"].is_object()) throw std::invalid_argument(fmt::format("{}: sources: not an object", origin));
    for (const auto& [policy, text] : j["sources"].items()) {
      s.sources[policy] = text.is_string() ? text.get<std::string>() : text.dump();
    }
  }
  return s;
}

kernel_factor_set load_kernel_factors(const std::string& name_or_path) {
  for (const auto& s : builtin_kernel_factor_sets()) {
    if (s.name == name_or_path) return s;
  }
  std::string names;
  for (const auto& s : builtin_kernel_factor_sets()) names += (names.empty() ? "" : ", ") + s.name;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(name_or_path, ec)) {
    throw std::invalid_argument(
        fmt::format("--kernel-factors: '{}' is neither a built-in set ({}) nor a readable file", name_or_path, names));
  }
  std::ifstream in(name_or_path);
  if (!in) throw std::invalid_argument(fmt::format("--kernel-factors: cannot open '{}'", name_or_path));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {  // parse errors and number overflow
    throw std::invalid_argument(fmt::format("--kernel-factors: {}: bad JSON: {}", name_or_path, e.what()));
  }
  return kernel_factors_from_json(j, name_or_path);
}

}  // namespace vtensor::sim
