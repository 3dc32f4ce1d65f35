// vtensor_map_overhead: the manager's cost per mapped chunk against raw driver calls on a GPU
// (Note [Mapping overhead of the manager] in map_overhead.cpp). Prints the table; --json writes
// {"map_overhead": {...}}, the object the results under results/gpu/ hold.

#include <exception>
#include <fstream>
#include <iostream>
#include <string>

#include <fmt/format.h>
#include <boost/program_options.hpp>

#include "bench/map_overhead/map_overhead.hpp"
#include "core/kv_geometry.hpp"

namespace po = boost::program_options;

namespace {

constexpr int k_usage = 2;

vtensor::bench::map_overhead_config parse(const po::variables_map& v) {
  vtensor::bench::map_overhead_config c;
  c.device = v["device"].as<int>();
  const auto layout = vtensor::kv_layout_from_string(v["layout"].as<std::string>());
  if (!layout) throw po::error("--layout: unknown layout '" + v["layout"].as<std::string>() + "'");
  c.layout = *layout;
  c.chunks = v["chunks"].as<std::uint64_t>();
  if (c.chunks < 256 || c.chunks > 65536) throw po::error("--chunks must be between 256 and 65536");
  c.rounds = v["rounds"].as<int>();
  if (c.rounds < 1) throw po::error("--rounds must be at least 1");
  if (c.device < 0) throw po::error("--device must be 0 or more");
  c.patterns = v["patterns"].as<bool>();
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  po::options_description options("vtensor_map_overhead options");
  options.add_options()("help,h", "print this help")("device", po::value<int>()->default_value(0), "GPU index")(
      "layout", po::value<std::string>()->default_value("kv-split"),
      ("KV layout of Llama-3-8B: " + vtensor::k_kv_layout_names.list()).c_str())(
      "chunks", po::value<std::uint64_t>()->default_value(1024), "chunks of a timed block, 256 to 65536")(
      "rounds", po::value<int>()->default_value(16), "ABBA quartets per variant")(
      "patterns", po::bool_switch(), "also time bare map + set-access by address pattern (strides, runs, neighbours)")(
      "json", po::value<std::string>(), "write {\"map_overhead\": ...} to FILE");
  vtensor::bench::map_overhead_config config;
  po::variables_map v;
  try {
    po::store(po::parse_command_line(argc, argv, options), v);
    if (v.count("help") != 0) {
      std::cout << "usage: vtensor_map_overhead [options]\n\nMaps chunks through the manager and with raw "
                   "cuMemMap + cuMemSetAccess on a GPU, and compares.\n\n"
                << options;
      return 0;
    }
    po::notify(v);
    config = parse(v);
  } catch (const po::error& e) {
    std::cerr << "vtensor_map_overhead: " << e.what() << '\n';
    return k_usage;
  }
  try {
    const nlohmann::ordered_json j = vtensor::bench::measure_map_overhead(config, std::cout);
    if (v.count("json") != 0) {
      std::ofstream file(v["json"].as<std::string>());
      file << nlohmann::ordered_json{{"map_overhead", j}}.dump(2) << '\n';
      if (!file) throw std::runtime_error("cannot write " + v["json"].as<std::string>());
    }
  } catch (const std::exception& e) {
    std::cerr << "vtensor_map_overhead: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
