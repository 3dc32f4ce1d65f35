#include "tools/cli.hpp"
#include "tools/report_render.hpp"

#include "backends/latency_model.hpp"
#include "backends/units.hpp"
#include "sim/replay.hpp"
#include "traces/trace_error.hpp"

#include <fmt/format.h>

#include <cctype>

#include <array>
#include <limits>
#include <ostream>
#include <typeinfo>

namespace vtensor::tools {
namespace po = boost::program_options;
namespace {

constexpr std::array subcommand_table{
    subcommand{"inspect", "print statistics of a trace: lengths, arrival rate, prefix hit bound", &cmd_inspect},
    subcommand{"gen-trace", "write a seeded synthetic trace in vtensor's JSONL format", &cmd_gen_trace},
    subcommand{"replay", "replay a trace through the serving simulator over a KV policy", &cmd_replay},
    subcommand{"capacity", "the largest load each arm serves within a latency objective (--slo), by replays",
               &cmd_capacity},
    subcommand{"compare", "replay arms (policies with options) over memory, time scale, traces: A/B with bounds",
               &cmd_compare},
    subcommand{"validate-gpu", "check the manager on a GPU with CUDA kernels (cuda backend)", &cmd_validate_gpu},
    subcommand{"calibrate", "measure VMM call costs on a GPU and write the sim's calibration file", &cmd_calibrate},
    subcommand{"report", "render a finished comparison's report: report.html and figures (matplotlib)", &cmd_report},
};

void print_overview(std::ostream& out) {
  out << "usage: vtensor COMMAND [ARGS...]\n"
         "       vtensor COMMAND --help\n\n"
         "KV-cache management with GPU virtual memory: trace tools, replay and validation.\n\n"
         "commands:\n";
  for (const subcommand& command : subcommand_table) {
    out << fmt::format("  {:<14}{}\n", command.name, command.summary);
  }
}

}  // namespace

std::span<const subcommand> subcommands() noexcept { return subcommand_table; }

const subcommand* find_subcommand(std::string_view name) noexcept {
  for (const subcommand& command : subcommand_table) {
    if (command.name == name) return &command;
  }
  return nullptr;
}

int run_cli(std::span<const std::string> args, const cli_streams& io) {
  if (args.empty()) {
    print_overview(io.err);
    return exit_usage;
  }
  const std::string& first = args.front();
  if (first == "--help" || first == "-h" || first == "help") {
    if (args.size() > 1 && first == "help") {
      if (const subcommand* command = find_subcommand(args[1])) {
        const std::array<std::string, 1> help{"--help"};
        return command->run(help, io);
      }
    }
    print_overview(io.out);
    return exit_success;
  }
  if (first == "--version") {
    io.out << "vtensor " << VTENSOR_VERSION << '\n';
    return exit_success;
  }
  const subcommand* command = find_subcommand(first);
  if (command == nullptr) {
    io.err << fmt::format("vtensor: unknown command '{}' (see vtensor --help)\n", first);
    return exit_usage;
  }
  return command->run(args.subspan(1), io);
}

int guarded_run(std::string_view name, const cli_streams& io, const std::function<int()>& body) {
  const auto report = [&](const char* what, int code) {
    io.err << fmt::format("vtensor {}: {}\n", name, what);
    return code;
  };
  try {
    return body();
  } catch (const traces::trace_error& error) {
    return report(error.what(), exit_usage);
  } catch (const calibration_error& error) {  // a bad calibration file is bad input
    return report(error.what(), exit_usage);
  } catch (const usage_error& error) {
    return report(error.what(), exit_usage);
  } catch (const po::error& error) {
    return report(error.what(), exit_usage);
  } catch (const std::invalid_argument& error) {
    return report(error.what(), exit_usage);
  } catch (const std::exception& error) {
    return report(error.what(), exit_failure);
  }
}

namespace {

// Boost.Program_options reads "-1" into an unsigned option as its largest value (lexical_cast
// wraps it): `--max-requests -1` meant "all", `--tp -1` four billion. Every count refuses a sign.
void refuse_negative_counts(const po::parsed_options& parsed, const po::variables_map& values) {
  for (const po::option& o : parsed.options) {
    if (o.string_key.empty() || values.count(o.string_key) == 0) continue;
    const std::type_info& type = values[o.string_key].value().type();
    if (type != typeid(std::uint32_t) && type != typeid(std::uint64_t)) continue;
    for (const std::string& text : o.value) {
      const auto first = text.find_first_not_of(" \t");
      if (first != std::string::npos && text[first] == '-')
        throw usage_error(fmt::format("--{}: '{}' is negative; give a whole number of 0 or more", o.string_key, text));
    }
  }
}

}  // namespace

std::optional<po::variables_map> parse_command_line(std::string_view name, std::string_view usage,
                                                    std::string_view description, po::options_description options,
                                                    const po::positional_options_description& positional,
                                                    std::span<const std::string> args, const cli_streams& io) {
  options.add_options()("help,h", "print this help");
  po::variables_map values;
  const std::vector<std::string> words(args.begin(), args.end());
  // Boost.Program_options builds its error messages by replacing placeholders such as
  // %canonical_option% with the token at fault, and loops forever when the token holds a
  // placeholder itself (found by fuzz_replay_options). No option or value of ours needs one.
  for (const std::string& w : words) {
    for (auto open = w.find('%'); open != std::string::npos; open = w.find('%', open + 1)) {
      std::size_t end = open + 1;
      while (end < w.size() && (std::isalpha(static_cast<unsigned char>(w[end])) != 0 || w[end] == '_')) ++end;
      if (end > open + 1 && end < w.size() && w[end] == '%') {
        throw usage_error(fmt::format("argument '{}': a %name% placeholder is not allowed in arguments", w));
      }
    }
  }
  const po::parsed_options parsed = po::command_line_parser(words).options(options).positional(positional).run();
  po::store(parsed, values);
  refuse_negative_counts(parsed, values);
  if (values.count("help") != 0) {
    io.out << fmt::format("usage: vtensor {} {}\n\n{}\n\n", name, usage, description) << options;
    return std::nullopt;
  }
  po::notify(values);
  return values;
}

std::uint64_t parse_size_option(std::string_view option, std::string_view text, size_rule rule) {
  std::uint64_t bytes = 0;
  try {
    bytes = sim::parse_byte_size(text);
  } catch (const std::invalid_argument& error) {
    throw usage_error(fmt::format("{}: {}", option, error.what()));
  }
  const bool unlimited = bytes == std::numeric_limits<std::uint64_t>::max();
  if (rule == size_rule::positive && (bytes == 0 || unlimited)) {
    throw usage_error(fmt::format("{}: '{}' is not a positive size (e.g. 64GiB, 512MiB)", option, text));
  }
  if (rule == size_rule::budget && bytes == 0) {
    throw usage_error(
        fmt::format("{}: '{}' is no memory; give a positive size (e.g. 64GiB, 512MiB) or unlimited", option, text));
  }
  return bytes;
}

std::string bytes_text(std::uint64_t bytes) {
  const auto in = [&](std::uint64_t unit) { return static_cast<double>(bytes) / static_cast<double>(unit); };
  if (bytes >= k_gib) return fmt::format("{:.2f} GiB", in(k_gib));
  if (bytes >= k_mib) return fmt::format("{:.1f} MiB", in(k_mib));
  return fmt::format("{} B", bytes);
}

std::string gib_text(double bytes) { return fmt::format("{:.2f} GiB", bytes / static_cast<double>(k_gib)); }

}  // namespace vtensor::tools
