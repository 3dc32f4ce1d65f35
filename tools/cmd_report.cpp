#include "tools/cli.hpp"
#include "tools/compare_verdict.hpp"
#include "tools/report_render.hpp"

#include <ostream>

namespace vtensor::tools {
namespace po = boost::program_options;

int cmd_report(std::span<const std::string> args, const cli_streams& io) {
  constexpr std::string_view name = "report";
  std::optional<std::filesystem::path> dir;
  report_options options;
  const int parsed = guarded_run(name, io, [&] {
    po::options_description o("options");
    o.add_options()("dir", po::value<std::string>(),
                    "the folder `vtensor compare --out DIR` wrote (the first argument)")(
        "cell", po::value<std::string>(),
        "draw the one-cell figures (memory over time, breakdown, latency CDFs, histograms) at this cell, an id "
        "of summary.json's cells (default: the first)")(
        "tie", po::value<std::string>(),
        "FRACTION: differences from the baseline within it are ties in the verdicts, e.g. 0.01 or 1% "
        "(default: the one the comparison was judged at, else 0.01)");
    po::positional_options_description positional;
    positional.add("dir", 1);
    const auto values = parse_command_line(
        name, "DIR [--cell ID] [--tie FRACTION]",
        "Renders the report of a finished comparison: DIR/report.html and, for every figure,\n"
        "DIR/figures/NAME.png, NAME.svg and NAME.json (the data it was drawn from), with\n"
        "tools/compare_report.py and a Python that has matplotlib (/usr/bin/python3, then python3\n"
        "on PATH). Reads only DIR; writes the report whole or not at all. Exit code 2 when DIR holds\n"
        "no vtensor-compare summary.json (or the script finds its content bad), 1 when no Python with\n"
        "matplotlib is found or the script fails.",
        o, positional, args, io);
    if (!values) return exit_success;
    if (values->count("dir") == 0) throw usage_error("missing DIR, the folder `vtensor compare --out DIR` wrote");
    dir = (*values)["dir"].as<std::string>();
    if (values->count("cell") != 0) options.cell = (*values)["cell"].as<std::string>();
    if (values->count("tie") != 0) options.tie = parse_tie((*values)["tie"].as<std::string>());
    return exit_success;
  });
  if (parsed != exit_success || !dir) return parsed;
  const int code = render_report(*dir, io, options);
  if (code == exit_success) io.out << "report: " << (*dir / "report.html").string() << '\n';
  return code;
}

}  // namespace vtensor::tools
