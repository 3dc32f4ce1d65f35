#pragma once

// The `vtensor` command: a table of git-like subcommands and the helpers they share.
//
// Adding a subcommand: write tools/cmd_NAME.cpp defining `int cmd_NAME(std::span<const
// std::string> args, const cli_streams& io)`, declare it below, and add one row to the table in
// tools/cli.cpp. Inside, parse with parse_command_line() and wrap the work in guarded_run(), which
// maps exceptions to exit codes and prefixes messages with "vtensor NAME: ".

#include <boost/program_options.hpp>

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

namespace vtensor::tools {

inline constexpr int exit_success = 0;  ///< done
inline constexpr int exit_failure = 1;  ///< anything else went wrong (I/O, internal error)
inline constexpr int exit_usage = 2;    ///< bad usage or bad input: unknown option, bad trace

/// Where a subcommand prints: stdout and stderr in the program, string streams in tests.
struct cli_streams {
  std::ostream& out;  ///< results
  std::ostream& err;  ///< errors, progress
};

/// A subcommand's entry point; `args` are the words after its name. Returns the exit code.
using subcommand_fn = int (*)(std::span<const std::string> args, const cli_streams& io);

/// One row of the subcommand table.
struct subcommand {
  std::string_view name;     ///< as typed: "inspect"
  std::string_view summary;  ///< one line for `vtensor --help`
  subcommand_fn run;         ///< entry point
};

/// Bad usage detected by a subcommand itself (conflicting options, bad value): exit code 2.
class usage_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// All subcommands, in help order.
[[nodiscard]] std::span<const subcommand> subcommands() noexcept;

/// The subcommand called `name`, or nullptr.
[[nodiscard]] const subcommand* find_subcommand(std::string_view name) noexcept;

/// `vtensor ARGS...` (without the program name): dispatches to a subcommand, or prints the
/// list for `--help` / no arguments. Returns the exit code.
[[nodiscard]] int run_cli(std::span<const std::string> args, const cli_streams& io);

/// Runs `body` and returns its exit code; exceptions become a message "vtensor NAME: WHAT" on
/// io.err and exit_usage (trace_error, usage_error, Boost.Program_options errors,
/// std::invalid_argument) or exit_failure (any other std::exception).
[[nodiscard]] int guarded_run(std::string_view name, const cli_streams& io, const std::function<int()>& body);

/// Parses `args` against `options` (plus a `--help` it adds) and `positional`. Returns nullopt
/// when --help was asked for, after printing "usage: vtensor NAME USAGE", `description` and the
/// options on io.out. Throws Boost.Program_options errors for bad usage (call inside guarded_run).
[[nodiscard]] std::optional<boost::program_options::variables_map> parse_command_line(
    std::string_view name, std::string_view usage, std::string_view description,
    boost::program_options::options_description options,
    const boost::program_options::positional_options_description& positional, std::span<const std::string> args,
    const cli_streams& io);

/// What a size option accepts.
enum class size_rule {
  positive,  ///< more than zero bytes
  budget,    ///< any size, or "unlimited" (UINT64_MAX)
};

/// The byte size typed for `option`: "80GiB", "500MiB", "1.5GB", "1e9", "4096" (the grammar of
/// sim::parse_byte_size, which --memory of replay has always used). Throws usage_error naming the
/// option when the text is not a size or breaks `rule`.
[[nodiscard]] std::uint64_t parse_size_option(std::string_view option, std::string_view text,
                                              size_rule rule = size_rule::positive);

/// A byte count for people: "1.50 GiB", "512.0 MiB", "4096 B".
[[nodiscard]] std::string bytes_text(std::uint64_t bytes);

/// A byte count in GiB with two decimals: "1.50 GiB" (replay's summary, every size alike).
[[nodiscard]] std::string gib_text(double bytes);

/// `vtensor inspect`: statistics of a trace (tools/cmd_inspect.cpp).
[[nodiscard]] int cmd_inspect(std::span<const std::string> args, const cli_streams& io);

/// `vtensor gen-trace`: writes a synthetic trace (tools/cmd_gen_trace.cpp).
[[nodiscard]] int cmd_gen_trace(std::span<const std::string> args, const cli_streams& io);

/// `vtensor replay`: replays a trace through the serving simulator (tools/cmd_replay.cpp).
[[nodiscard]] int cmd_replay(std::span<const std::string> args, const cli_streams& io);

/// `vtensor capacity`: the load each arm serves at an SLO (tools/cmd_capacity.cpp).
[[nodiscard]] int cmd_capacity(std::span<const std::string> args, const cli_streams& io);
/// `vtensor compare`: arms x axes in parallel, with bounds and miss causes (tools/cmd_compare.cpp).
[[nodiscard]] int cmd_compare(std::span<const std::string> args, const cli_streams& io);

/// `vtensor validate-gpu`: checks the manager on a GPU with CUDA kernels (tools/cmd_validate_gpu.cpp).
[[nodiscard]] int cmd_validate_gpu(std::span<const std::string> args, const cli_streams& io);

/// `vtensor calibrate`: measures VMM call costs on a GPU (tools/cmd_calibrate.cpp).
[[nodiscard]] int cmd_calibrate(std::span<const std::string> args, const cli_streams& io);

}  // namespace vtensor::tools
