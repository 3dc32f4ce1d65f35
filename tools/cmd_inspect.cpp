#include "tools/cli.hpp"

#include "traces/atomic_output_file.hpp"
#include "traces/trace_reader.hpp"
#include "traces/trace_stats.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <ostream>

namespace vtensor::tools {
namespace po = boost::program_options;
namespace {

constexpr std::string_view name = "inspect";

std::optional<traces::trace_format> format_option(const std::string& text) {
  if (text == "auto") return std::nullopt;
  if (const auto format = traces::parse_trace_format(text)) return format;
  throw usage_error(fmt::format("--format: unknown format '{}' (auto, {})", text, traces::k_trace_format_names.list()));
}

nlohmann::ordered_json percentiles_json(const traces::length_percentiles& lengths) {
  return {
      {"p50", lengths.p50}, {"p90", lengths.p90}, {"p99", lengths.p99}, {"max", lengths.max}, {"mean", lengths.mean}};
}

std::string with_commas(std::uint64_t value) {
  const std::string digits = std::to_string(value);
  std::string grouped;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) grouped += ',';
    grouped += digits[i];
  }
  return grouped;
}

void print_summary(std::ostream& out, const std::string& path, const traces::trace_reader& reader,
                   const traces::trace_stats& stats) {
  const auto lengths = [](const traces::length_percentiles& p) {
    return fmt::format("mean {:.1f}, p50 {}, p90 {}, p99 {}, max {}", p.mean, p.p50, p.p90, p.p99, p.max);
  };
  out << fmt::format("trace: {} ({})\n", path, traces::to_string(reader.format()));
  out << fmt::format("requests: {}\n", with_commas(stats.requests));
  out << fmt::format("sessions: {} (max turns {})\n", with_commas(stats.sessions),
                     stats.requests > 0 ? stats.max_turn + 1 : 0);
  out << fmt::format("prompt tokens: {} ({})\n", with_commas(stats.prompt_tokens), lengths(stats.input_lengths));
  out << fmt::format("output tokens: {} ({})\n", with_commas(stats.output_tokens), lengths(stats.output_lengths));
  out << fmt::format("duration: {:.3f} s\n", stats.duration_s);
  out << fmt::format("arrival rate: {:.3f} requests/s, {:.0f} prompt tokens/s\n", stats.requests_per_s,
                     stats.prompt_tokens_per_s);
  if (stats.requests_with_keys > 0) {
    out << fmt::format("prefix blocks: {} tokens each, {} distinct\n", stats.block_tokens,
                       with_commas(stats.cached_blocks));
  } else {
    out << "prefix blocks: none (no prefix identity in this trace)\n";
  }
  out << fmt::format("prefix hit rate (infinite cache, sequential): {:.4f}\n", stats.prefix_hit_rate);
}

nlohmann::ordered_json stats_json(const std::string& path, const traces::trace_reader& reader,
                                  const traces::trace_stats& stats) {
  return {{"trace", path},
          {"format", traces::to_string(reader.format())},
          {"requests", stats.requests},
          {"sessions", stats.sessions},
          {"max_turns", stats.requests > 0 ? stats.max_turn + 1 : 0},
          {"prompt_tokens", stats.prompt_tokens},
          {"output_tokens", stats.output_tokens},
          {"input_lengths", percentiles_json(stats.input_lengths)},
          {"output_lengths", percentiles_json(stats.output_lengths)},
          {"first_arrival_us", stats.first_arrival_us},
          {"last_arrival_us", stats.last_arrival_us},
          {"duration_s", stats.duration_s},
          {"requests_per_s", stats.requests_per_s},
          {"prompt_tokens_per_s", stats.prompt_tokens_per_s},
          {"block_tokens", stats.block_tokens},
          {"requests_with_block_keys", stats.requests_with_keys},
          {"distinct_prefix_blocks", stats.cached_blocks},
          {"prefix_hit_tokens", stats.prefix_hit_tokens},
          {"prefix_hit_rate", stats.prefix_hit_rate}};
}

}  // namespace

int cmd_inspect(std::span<const std::string> args, const cli_streams& io) {
  return guarded_run(name, io, [&] {
    po::options_description options("options");
    options.add_options()("trace", po::value<std::string>(), "trace file to read (the first argument)")(
        "format", po::value<std::string>()->default_value("auto"),
        "trace format: auto (from the content), mooncake, azure, vtensor")(
        "block-tokens", po::value<std::uint32_t>(),
        "tokens per prefix block for formats that do not state it (Mooncake: 512)")(
        "json", po::value<std::string>(),
        "also write the statistics as JSON to this file (- : standard output, the report then to standard error)");
    po::positional_options_description positional;
    positional.add("trace", 1);
    const auto values =
        parse_command_line(name, "TRACE [--format auto|mooncake|azure|vtensor] [--block-tokens N] [--json FILE]",
                           "Reads TRACE once, streaming, and prints request and token counts, length percentiles\n"
                           "(nearest rank), arrival rate, and the infinite-cache prefix hit rate under the\n"
                           "sequential model: requests in file order, each one's blocks cached once served, a hit\n"
                           "counts the matched leading blocks x block tokens, capped at input tokens - 1. No replay\n"
                           "can reuse more. Exit code 2 on bad input (message names file, line and field).",
                           options, positional, args, io);
    if (!values) return exit_success;

    if (values->count("trace") == 0) throw usage_error("missing TRACE, the trace file to read");
    const std::string path = (*values)["trace"].as<std::string>();
    traces::reader_options reader_options;
    if (values->count("block-tokens") != 0) {
      reader_options.block_tokens = (*values)["block-tokens"].as<std::uint32_t>();
      if (*reader_options.block_tokens == 0) throw usage_error("--block-tokens must be at least 1");
    }
    const auto reader = traces::open_trace(path, format_option((*values)["format"].as<std::string>()), reader_options);
    const traces::trace_stats stats = traces::compute_trace_stats(*reader);
    const bool json_on_stdout = values->count("json") != 0 && (*values)["json"].as<std::string>() == "-";
    print_summary(json_on_stdout ? io.err : io.out, path, *reader, stats);  // stdout holds the JSON alone
    if (values->count("json") != 0) {
      traces::atomic_output_file file((*values)["json"].as<std::string>(), &io.out);
      file.write(stats_json(path, *reader, stats).dump(2) + "\n");
      file.commit();
    }
    return exit_success;
  });
}

}  // namespace vtensor::tools
