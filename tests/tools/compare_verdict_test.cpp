// The verdicts of a comparison (tools/compare_verdict.hpp): ties within the tolerance, wins before
// losses and each the largest first, the direction of each metric, and numbers at three
// significant digits in units that keep four digits or fewer.

#include "tools/compare_verdict.hpp"

#include "tools/cli.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <string>

using nlohmann::json;
using namespace vtensor::tools;

namespace {

/// A summary.json point with the metrics the verdicts read.
json point(const std::string& arm, const std::string& cell, double hit, double tok_s, double ttft50, double ttft99,
           double tpot50, double tpot99, double preemptions, double peak = 8.0 * (1 << 30)) {
  return {{"arm", arm},
          {"cell", cell},
          {"hit_rate", hit},
          {"summary",
           {{"throughput_tokens_per_s", tok_s},
            {"ttft_ms", {{"p50", ttft50}, {"p99", ttft99}}},
            {"tpot_ms", {{"p50", tpot50}, {"p99", tpot99}}},
            {"preemptions", preemptions},
            {"peak_physical_bytes", peak}}}};
}

}  // namespace

TEST_SUITE("compare") {
  TEST_CASE("compare verdicts: the issue's case - 0.2% and 0.4% are ties, a 17% better TTFT is a win, said first") {
    const json summary = {{"baseline", "vt"},
                          {"points",
                           {point("vt", "c", 0.30, 3.0, 100.0, 400.0, 20.0, 50.0, 0),
                            point("paged", "c", 0.33, 3.0, 83.0, 401.0, 20.04, 50.2, 0, 4.0 * (1 << 30))}}};
    const auto verdicts = judge(summary, k_default_tie);
    REQUIRE(verdicts.size() == 1);
    const verdict& v = verdicts[0];
    CHECK(v.arm == "paged");
    CHECK(v.cell == "c");
    REQUIRE(v.wins.size() == 2);
    CHECK(v.wins[0].key == "ttft_p50_ms");  // 0.83x weighs more than 1.10x
    CHECK(v.wins[1].key == "prefix_hit_rate");
    CHECK(v.losses.empty());
    CHECK(verdict_text(v) ==
          "wins: TTFT p50 17.0% lower (0.830x), hit rate 10.0% higher (1.10x); tie: throughput, TTFT p99, TPOT p50, "
          "TPOT p99, preemptions");
  }

  TEST_CASE("compare verdicts: losses after wins, the largest first - a baseline of 0 weighs most") {
    const json summary = {{"baseline", "a"},
                          {"points",
                           {point("a", "c", 0.5, 1000.0, 10.0, 20.0, 5.0, 8.0, 0),
                            point("b", "c", 0.5, 2500.0, 10.0, 30.0, 6.0, 8.0, 12)}}};
    const verdict v = judge(summary, 0.01).at(0);
    CHECK(verdict_text(v) ==
          "wins: throughput 2.50x higher; loses: preemptions 12 against 0, TTFT p99 50.0% higher (1.50x), TPOT p50 "
          "20.0% higher (1.20x); tie: hit rate, TTFT p50, TPOT p99");
    const json j = verdicts_json({v}, 0.01);
    CHECK(j.at("tie") == 0.01);
    CHECK(j.at("higher_is_better") == json({"prefix_hit_rate", "throughput_tokens_per_s"}));
    CHECK(j.at("not_judged") == json({"peak_physical_bytes"}));
    CHECK(j.at("items").at(0).at("text") == verdict_text(v));
    CHECK(j.at("items").at(0).at("losses").at(0).at("ratio").is_null());
  }

  TEST_CASE("compare verdicts: the tolerance decides - 4% is a tie at --tie 0.05, a loss at 0.01 and at 0") {
    const json summary = {
        {"baseline", "a"},
        {"points",
         {point("a", "c", 0.5, 100.0, 10.0, 20.0, 5.0, 8.0, 0), point("b", "c", 0.5, 100.0, 10.4, 20.0, 5.0, 8.0, 0)}}};
    CHECK(verdict_text(judge(summary, 0.01).at(0)).rfind("loses: TTFT p50 4.00% higher (1.04x)", 0) == 0);
    CHECK(verdict_text(judge(summary, 0.05).at(0)).rfind("tie on every metric", 0) == 0);
    CHECK(judge(summary, 0.0).at(0).losses.size() == 1);
  }

  TEST_CASE("compare verdicts: a cell without the baseline gives none - a missing metric is named") {
    json b = point("b", "c2", 0.5, 100.0, 10.0, 20.0, 5.0, 8.0, 0);
    json summary = {{"baseline", "a"},
                    {"points",
                     {point("a", "c", 0.5, 100.0, 10.0, 20.0, 5.0, 8.0, 0), b,
                      point("b", "c", 0.5, 100.0, 10.0, 20.0, 5.0, 8.0, 0)}}};
    summary["points"][2]["summary"].erase("preemptions");
    const auto verdicts = judge(summary, 0.01);
    REQUIRE(verdicts.size() == 1);
    CHECK(verdict_text(verdicts[0]).find("not compared: preemptions") != std::string::npos);
    CHECK_THROWS_AS((void)judge(json::object(), 0.01), std::invalid_argument);
  }

  TEST_CASE("compare verdicts: --tie takes a fraction or a percentage below 1, anything else names the option") {
    CHECK(parse_tie("0.01") == doctest::Approx(0.01));
    CHECK(parse_tie("2.5%") == doctest::Approx(0.025));
    CHECK(parse_tie("0") == 0.0);
    for (const char* bad : {"", "x", "1", "-0.1", "0.1x", "nan", "150%", "%"}) {
      CAPTURE(bad);
      try {
        (void)parse_tie(bad);
        FAIL("accepted");
      } catch (const usage_error& e) {
        CHECK(std::string(e.what()).rfind("--tie ", 0) == 0);
      }
    }
  }

  TEST_CASE("compare verdicts: three significant digits for ratios, units that keep four digits or fewer") {
    CHECK(ratio_text(1.002) == "1.00x");
    CHECK(ratio_text(0.999793) == "1.00x");
    CHECK(ratio_text(0.83) == "0.830x");
    CHECK(ratio_text(12.34) == "12.3x");
    CHECK(ratio_text(0.99951) == "1.00x");
    CHECK(ratio_text(123.4) == "123x");
    CHECK(quantity_text(3.0, quantity_unit::tokens_per_s) == "3.00 tok/s");
    CHECK(quantity_text(657.7, quantity_unit::tokens_per_s) == "658 tok/s");
    CHECK(quantity_text(12345.0, quantity_unit::tokens_per_s) == "12.3k tok/s");
    CHECK(quantity_text(0.25, quantity_unit::ms) == "250 us");
    CHECK(quantity_text(8.307, quantity_unit::ms) == "8.31 ms");
    CHECK(quantity_text(412.0, quantity_unit::ms) == "412 ms");
    CHECK(quantity_text(276138.9, quantity_unit::ms) == "276 s");
    CHECK(quantity_text(1234567.0, quantity_unit::ms) == "1235 s");
    CHECK(quantity_text(8.0 * (1 << 30), quantity_unit::bytes) == "8.00 GiB");
    CHECK(quantity_text(0.033694, quantity_unit::fraction) == "0.0337");
    CHECK(quantity_text(12, quantity_unit::count) == "12");
  }
}
