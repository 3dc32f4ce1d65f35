#include "tools/cli.hpp"

#include "backends/enum_names.hpp"
#include "traces/trace_generator.hpp"
#include "traces/vtensor_writer.hpp"

#include <fmt/format.h>

#include <ostream>

namespace vtensor::tools {
namespace po = boost::program_options;
namespace {

constexpr std::string_view name = "gen-trace";

traces::int_distribution distribution_option(const po::variables_map& values, const char* key) {
  try {
    return traces::int_distribution::parse(values[key].as<std::string>());
  } catch (const std::invalid_argument& error) {
    throw usage_error(fmt::format("--{}: {}", key, error.what()));
  }
}

// The names of the arrival processes (the traces layer has no table of them yet).
constexpr enum_names<traces::arrival_process, 2> k_arrival_names{{{
    {traces::arrival_process::poisson, "poisson"},
    {traces::arrival_process::gamma, "gamma"},
}}};

po::options_description gen_trace_options() {
  const traces::generator_params defaults;
  po::options_description output("output");
  output.add_options()("out,o", po::value<std::string>()->required(), "file to write (appears only when complete)")(
      "requests,n", po::value<std::uint64_t>()->default_value(defaults.requests), "stop after this many requests")(
      "sessions", po::value<std::uint64_t>(), "instead: start this many sessions and write all their turns")(
      "seed", po::value<std::uint64_t>()->default_value(defaults.seed),
      "std::mt19937_64 seed; the same seed and options give byte-identical output")(
      "block-tokens", po::value<std::uint32_t>()->default_value(defaults.block_tokens), "tokens per prefix block")(
      "max-context", po::value<std::uint32_t>()->default_value(defaults.max_context_tokens),
      "prompt + output never exceed this; a later turn that would ends its session, a first "
      "turn is clamped");
  po::options_description arrivals("arrivals");
  arrivals.add_options()("arrival", po::value<std::string>()->default_value("poisson"),
                         "session arrival process: poisson or gamma")(
      "rate", po::value<double>()->default_value(defaults.session_rate_per_s), "new sessions per second")(
      "cv", po::value<double>()->default_value(defaults.arrival_cv),
      "coefficient of variation of the gaps between sessions (gamma only; > 1 is burstier)")(
      "turns", po::value<std::string>()->default_value(defaults.turns.to_string()), "turns per session (distribution)")(
      "turn-gap-ms", po::value<std::string>()->default_value(defaults.turn_gap_ms.to_string()),
      "from a turn's arrival to the next turn's, ms: answer plus think time (distribution)");
  po::options_description lengths("lengths and sharing");
  lengths.add_options()("user-tokens", po::value<std::string>()->default_value(defaults.user_tokens.to_string()),
                        "new user text each turn (distribution, at least 1)")(
      "output-tokens", po::value<std::string>()->default_value(defaults.output_tokens.to_string()),
      "answer length (distribution, at least 1)")("system-prompts",
                                                  po::value<std::uint32_t>()->default_value(defaults.system_prompts),
                                                  "size of the pool of shared system prompts (0: none)")(
      "system-tokens", po::value<std::string>()->default_value(defaults.system_tokens.to_string()),
      "length of each system prompt, drawn once per prompt (distribution)")(
      "system-zipf", po::value<double>()->default_value(defaults.system_zipf),
      "popularity of system prompts: P(i) ~ 1/(i+1)^s (0: uniform)")(
      "fanout-prob", po::value<double>()->default_value(defaults.fanout_probability),
      "probability that a turn is sent as several sibling requests at once")(
      "fanout", po::value<std::string>()->default_value(defaults.fanout.to_string()),
      "siblings in a fan-out, at least 2 (distribution)")(
      "fanout-suffix-tokens", po::value<std::string>()->default_value(defaults.fanout_suffix_tokens.to_string()),
      "tokens each extra sibling adds after the shared prompt (distribution; 0: identical)");
  po::options_description options;
  options.add(output).add(arrivals).add(lengths);
  return options;
}

traces::generator_params parse_params(const po::variables_map& values) {
  traces::generator_params params;
  params.seed = values["seed"].as<std::uint64_t>();
  params.requests = values["requests"].as<std::uint64_t>();
  if (values.count("sessions") != 0) {
    if (!values["requests"].defaulted()) throw usage_error("give --requests or --sessions, not both");
    params.requests = 0;
    params.sessions = values["sessions"].as<std::uint64_t>();
  }
  params.block_tokens = values["block-tokens"].as<std::uint32_t>();
  params.max_context_tokens = values["max-context"].as<std::uint32_t>();
  const std::string arrival = values["arrival"].as<std::string>();
  const auto process = k_arrival_names.parse(arrival);
  if (!process) {
    throw usage_error(fmt::format("--arrival: unknown process '{}' ({})", arrival, k_arrival_names.list()));
  }
  params.arrival = *process;
  params.session_rate_per_s = values["rate"].as<double>();
  params.arrival_cv = values["cv"].as<double>();
  params.turns = distribution_option(values, "turns");
  params.turn_gap_ms = distribution_option(values, "turn-gap-ms");
  params.user_tokens = distribution_option(values, "user-tokens");
  params.output_tokens = distribution_option(values, "output-tokens");
  params.system_prompts = values["system-prompts"].as<std::uint32_t>();
  params.system_tokens = distribution_option(values, "system-tokens");
  params.system_zipf = values["system-zipf"].as<double>();
  params.fanout_probability = values["fanout-prob"].as<double>();
  params.fanout = distribution_option(values, "fanout");
  params.fanout_suffix_tokens = distribution_option(values, "fanout-suffix-tokens");

  return params;
}

}  // namespace

int cmd_gen_trace(std::span<const std::string> args, const cli_streams& io) {
  return guarded_run(name, io, [&] {
    const auto values =
        parse_command_line(name, "--out FILE [options]",
                           "Writes a seeded synthetic multi-turn trace in vtensor's JSONL format (traces/FORMAT.md),\n"
                           "streaming. Each session picks a system prompt from a shared pool (Zipf popularity); turn\n"
                           "k+1's prompt is turn k's prompt + answer + new user text, so its block keys repeat all\n"
                           "FULL blocks of that context and take fresh keys for the rest. Distributions are written\n"
                           "const:N | uniform:LO:HI | lognormal:MEDIAN:SIGMA | exp:MEAN | geometric:MEAN |\n"
                           "gamma:MEAN:CV.",
                           gen_trace_options(), {}, args, io);
    if (!values) return exit_success;

    const traces::generator_params params = parse_params(*values);
    traces::trace_generator generator(params);
    const std::string path = (*values)["out"].as<std::string>();
    traces::vtensor_writer writer(path, params.block_tokens, {{"generator", params.to_json()}});
    traces::trace_request request;
    std::uint64_t last_session = 0;
    while (generator.next(request)) {
      writer.write(request);
      last_session = std::max(last_session, request.session + 1);
    }
    writer.commit();
    io.out << fmt::format("wrote {} requests from {} sessions to {} (seed {})\n", writer.requests_written(),
                          last_session, path, params.seed);
    return exit_success;
  });
}

}  // namespace vtensor::tools
