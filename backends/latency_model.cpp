#include "backends/latency_model.hpp"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <system_error>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace vtensor {

namespace {

constexpr std::string_view k_format = "vtensor-calibration";
constexpr int k_version = 1;

std::string describe(const nlohmann::json& value) {
  std::string text = value.dump();
  constexpr std::size_t k_max_chars = 60;
  if (text.size() > k_max_chars) {
    text = text.substr(0, k_max_chars) + "...";
  }
  return fmt::format("{} {}", value.type_name(), text);
}

std::uint64_t read_ns(const nlohmann::json& value, const std::string& file, const std::string& key) {
  if (value.is_number_unsigned()) {
    return value.get<std::uint64_t>();
  }
  if (value.is_number_integer() && value.get<std::int64_t>() >= 0) {
    return static_cast<std::uint64_t>(value.get<std::int64_t>());
  }
  if (value.is_number_float()) {
    const double ns = value.get<double>();
    if (std::isfinite(ns) && ns >= 0 && ns < 1e18) {
      return static_cast<std::uint64_t>(std::llround(ns));
    }
  }
  throw calibration_error(file, key,
                          fmt::format("expected a non-negative number of nanoseconds, got {}", describe(value)));
}

}  // namespace

calibration_error::calibration_error(std::string file, std::string key, const std::string& why)
    : std::runtime_error(key.empty() ? fmt::format("{}: {}", file, why)
                                     : fmt::format("{}: key '{}': {}", file, key, why)),
      file_(std::move(file)),
      key_(std::move(key)) {}

latency_model latency_model::h200() {
  latency_model model;
  model.device_ = "NVIDIA H200";
  model.source_ =
      "backends/calibration/h200-probe.txt, 2026-12-02, driver 580.159.04, CUDA 13.0; "
      "reserve and free_range: median (p99: largest) of the 1 GiB, 64 GiB, 1 TiB and 16 TiB probes";
  model.set_cost(vmm_call::reserve, {4'360, 4'360, 36'290});
  model.set_cost(vmm_call::free_range, {14'030, 14'030, 61'910});
  model.set_cost(vmm_call::create, {15'740, 13'840, 29'090});
  model.set_cost(vmm_call::release, {16'980, 16'440, 31'450});
  model.set_cost(vmm_call::map, {2'340, 1'210, 5'990});
  model.set_cost(vmm_call::set_access, {44'070, 36'270, 629'320});
  model.set_cost(vmm_call::unmap, {29'520, 28'680, 45'780});
  return model;
}

latency_model latency_model::zero() { return latency_model{}; }

latency_model latency_model::load(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    throw calibration_error(file.string(), "", fmt::format("cannot open: {}", std::strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    throw calibration_error(file.string(), "", "read failed");
  }
  return parse(text.str(), file.string());
}

latency_model latency_model::parse(std::string_view json_text, std::string_view source_name) {
  const std::string file(source_name);
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {  // parse errors and number overflow
    throw calibration_error(file, "", fmt::format("not valid JSON: {}", e.what()));
  }
  if (!doc.is_object()) {
    throw calibration_error(file, "", fmt::format("expected a JSON object, got {}", describe(doc)));
  }
  const auto require = [&](const char* key) -> const nlohmann::json& {
    const auto it = doc.find(key);
    if (it == doc.end()) {
      throw calibration_error(file, key, "missing");
    }
    return *it;
  };
  const auto read_string = [&](const char* key) -> std::string {
    const auto it = doc.find(key);
    if (it == doc.end()) {
      return {};
    }
    if (!it->is_string()) {
      throw calibration_error(file, key, fmt::format("expected a string, got {}", describe(*it)));
    }
    return it->get<std::string>();
  };

  const nlohmann::json& format = require("format");
  if (!format.is_string() || format.get<std::string>() != k_format) {
    throw calibration_error(file, "format", fmt::format("expected \"{}\", got {}", k_format, describe(format)));
  }
  const nlohmann::json& version = require("version");
  if (!version.is_number_integer() || version.get<std::int64_t>() != k_version) {
    throw calibration_error(file, "version", fmt::format("expected {}, got {}", k_version, describe(version)));
  }

  latency_model model;
  model.device_ = read_string("device");
  model.source_ = read_string("source");

  const nlohmann::json& calls = require("calls");
  if (!calls.is_object()) {
    throw calibration_error(file, "calls", fmt::format("expected an object, got {}", describe(calls)));
  }
  for (const auto& [name, entry] : calls.items()) {
    const std::string key = "calls." + name;
    if (!vmm_call_from_string(name)) {
      throw calibration_error(file, key,
                              "unknown call; expected one of reserve, free_range, create, "
                              "release, map, set_access, unmap");
    }
    if (!entry.is_object()) {
      throw calibration_error(file, key, fmt::format("expected an object, got {}", describe(entry)));
    }
  }
  for (std::size_t i = 0; i < k_vmm_call_kinds; ++i) {
    const auto call = static_cast<vmm_call>(i);
    const std::string name(to_string(call));
    const auto entry = calls.find(name);
    if (entry == calls.end()) {
      throw calibration_error(file, "calls." + name, "missing");
    }
    call_cost cost;
    const auto mean = entry->find("mean_ns");
    if (mean == entry->end()) {
      throw calibration_error(file, "calls." + name + ".mean_ns", "missing");
    }
    cost.mean_ns = read_ns(*mean, file, "calls." + name + ".mean_ns");
    if (const auto p50 = entry->find("p50_ns"); p50 != entry->end()) {
      cost.p50_ns = read_ns(*p50, file, "calls." + name + ".p50_ns");
    }
    if (const auto p99 = entry->find("p99_ns"); p99 != entry->end()) {
      cost.p99_ns = read_ns(*p99, file, "calls." + name + ".p99_ns");
    }
    model.costs_[i] = cost;
  }
  return model;
}

std::string latency_model::to_json() const {
  nlohmann::ordered_json doc;
  doc["format"] = k_format;
  doc["version"] = k_version;
  doc["device"] = device_;
  doc["source"] = source_;
  nlohmann::ordered_json calls = nlohmann::ordered_json::object();
  for (std::size_t i = 0; i < k_vmm_call_kinds; ++i) {
    const call_cost& cost = costs_[i];
    calls[std::string(to_string(static_cast<vmm_call>(i)))] = {
        {"mean_ns", cost.mean_ns}, {"p50_ns", cost.p50_ns}, {"p99_ns", cost.p99_ns}};
  }
  doc["calls"] = std::move(calls);
  return doc.dump(2) + "\n";
}

void latency_model::save(const std::filesystem::path& file) const {
  std::filesystem::path temporary = file;
  temporary += ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) {
      throw calibration_error(file.string(), "", fmt::format("cannot write: {}", std::strerror(errno)));
    }
    out << to_json();
    out.close();
    if (!out) {
      std::error_code ignored;
      std::filesystem::remove(temporary, ignored);
      throw calibration_error(file.string(), "", "write failed");
    }
  }
  std::error_code ec;
  std::filesystem::rename(temporary, file, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    throw calibration_error(file.string(), "", fmt::format("cannot write: {}", ec.message()));
  }
}

}  // namespace vtensor
