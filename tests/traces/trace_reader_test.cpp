#include "traces/trace_reader.hpp"
#include "traces/azure_reader.hpp"
#include "traces/mooncake_reader.hpp"
#include "traces/trace_error.hpp"
#include "traces/vtensor_reader.hpp"

#include "tests/support/scratch_dir.hpp"

#include <doctest/doctest.h>

#include <fstream>
#include <string>
#include <vector>

namespace vt = vtensor::traces;

namespace {

std::string data(const std::string& name) { return VTENSOR_SOURCE_DIR "/tests/data/traces/" + name; }

std::vector<vt::trace_request> read_all(vt::trace_reader& reader) {
  std::vector<vt::trace_request> requests;
  while (auto request = reader.next()) requests.push_back(std::move(*request));
  return requests;
}

// Reads `name` to its end and returns the trace_error it must raise.
vt::trace_error read_error(const std::string& name, std::optional<vt::trace_format> format = {}) {
  try {
    auto reader = vt::open_trace(data(name), format);
    vt::trace_request request;
    while (reader->next(request)) {
    }
  } catch (const vt::trace_error& error) {
    return error;
  }
  FAIL("no trace_error for " << name);
  return vt::trace_error("", 0, "", "");
}

void check_error(const std::string& name, std::uint64_t line, const std::string& field, const std::string& why) {
  CAPTURE(name);
  const vt::trace_error error = read_error(name);
  const std::string message = error.what();
  CAPTURE(message);
  CHECK(error.line() == line);
  CHECK(error.field() == field);
  CHECK(message.find(name + ":" + std::to_string(line) + ":") != std::string::npos);
  if (!field.empty()) CHECK(message.find("field '" + field + "'") != std::string::npos);
  CHECK(message.find(why) != std::string::npos);
}

}  // namespace

TEST_CASE("mooncake reader yields requests in file order with 512-token blocks") {
  auto reader = vt::open_trace(data("mooncake_small.jsonl"), std::nullopt);
  CHECK(reader->format() == vt::trace_format::mooncake);
  CHECK(reader->block_tokens() == 512);
  const auto requests = read_all(*reader);
  REQUIRE(requests.size() == 4);
  CHECK(requests[0].arrival_us == 0);
  CHECK(requests[0].input_tokens == 1200);
  CHECK(requests[0].output_tokens == 10);
  CHECK(requests[0].block_keys == std::vector<std::uint64_t>{1, 2, 3});
  CHECK(requests[0].tokens_in_block(2) == 176);
  CHECK(requests[2].arrival_us == 1'500'000);
  CHECK(requests[2].line == 4);
  CHECK(requests[3].arrival_us == 2'000'500);
  CHECK(requests[3].session == 3);
  CHECK(requests[3].line == 5);
  CHECK(reader->requests_read() == 4);
}

TEST_CASE("azure reader converts wall-clock timestamps across midnight and leap day") {
  auto reader = vt::open_trace(data("azure_small.csv"), std::nullopt);
  CHECK(reader->format() == vt::trace_format::azure);
  CHECK(reader->block_tokens() == 0);
  const auto requests = read_all(*reader);
  REQUIRE(requests.size() == 4);
  CHECK(requests[0].arrival_us == 0);
  CHECK(requests[1].arrival_us == 0);
  CHECK(requests[2].arrival_us == 1'000'001);
  CHECK(requests[3].arrival_us == 5'184'000'000'001);
  CHECK(requests[0].input_tokens == 374);
  CHECK(requests[2].output_tokens == 109);
  CHECK(requests[3].output_tokens == 0);
  CHECK(requests[3].block_keys.empty());
  CHECK(requests[3].line == 5);
}

TEST_CASE("date-time parsing rejects impossible dates") {
  CHECK(vt::parse_date_time_ns("1970-01-01 00:00:00") == 0);
  CHECK(vt::parse_date_time_ns("1970-01-02 00:00:00.5") == 86'400'500'000'000);
  CHECK_FALSE(vt::parse_date_time_ns("2023-02-29 00:00:00"));
  CHECK(vt::parse_date_time_ns("2024-02-29 00:00:00"));
  CHECK_FALSE(vt::parse_date_time_ns("2023-11-16 24:00:00"));
  CHECK_FALSE(vt::parse_date_time_ns("2023-11-16 18:15:46."));
  CHECK_FALSE(vt::parse_date_time_ns("2023-11-16 18:15:46.1234567890"));
  CHECK_FALSE(vt::parse_date_time_ns("2023-11-16"));
}

TEST_CASE("vtensor reader reads the header, defaults session and turn") {
  vt::vtensor_reader reader(data("vtensor_small.jsonl"));
  CHECK(reader.block_tokens() == 4);
  CHECK(reader.header().find("hand-made") != std::string::npos);
  const auto requests = read_all(reader);
  REQUIRE(requests.size() == 3);
  CHECK(requests[1].session == 7);
  CHECK(requests[1].turn == 1);
  CHECK(requests[1].block_keys == std::vector<std::uint64_t>{10, 12, 13, 14});
  CHECK(requests[1].tokens_in_block(3) == 1);
  CHECK(requests[2].session == 2);
  CHECK(requests[2].turn == 0);
  CHECK(requests[2].block_keys.empty());
  CHECK(requests[2].line == 4);
}

TEST_CASE("vtensor header block size must agree with the one asked for") {
  vt::reader_options options;
  options.block_tokens = 512;
  CHECK_THROWS_AS(vt::vtensor_reader(data("vtensor_small.jsonl"), options), vt::trace_error);
  options.block_tokens = 4;
  CHECK_NOTHROW(vt::vtensor_reader(data("vtensor_small.jsonl"), options));
}

TEST_CASE("format detection and forcing") {
  CHECK(vt::detect_trace_format(data("mooncake_small.jsonl")) == vt::trace_format::mooncake);
  CHECK(vt::detect_trace_format(data("azure_small.csv")) == vt::trace_format::azure);
  CHECK(vt::detect_trace_format(data("vtensor_small.jsonl")) == vt::trace_format::vtensor);
  CHECK(vt::parse_trace_format("azure") == vt::trace_format::azure);
  CHECK_FALSE(vt::parse_trace_format("auto"));
  const vt::trace_error error = read_error("unknown_format.txt");
  CHECK(error.line() == 1);
  CHECK(std::string(error.what()).find("--format") != std::string::npos);
  // Forcing the wrong format fails on the content, naming the line.
  const vt::trace_error forced = read_error("mooncake_small.jsonl", vt::trace_format::vtensor);
  CHECK(forced.line() == 1);
  CHECK(std::string(forced.what()).find("unknown field") != std::string::npos);
}

TEST_CASE("a missing file is a trace_error naming it") {
  try {
    (void)vt::open_trace(data("no_such_file.jsonl"), vt::trace_format::mooncake);
    FAIL("no error");
  } catch (const vt::trace_error& error) {
    CHECK(std::string(error.what()).find("no_such_file.jsonl: cannot open") != std::string::npos);
  }
  CHECK_THROWS_AS((void)vt::detect_trace_format(data("no_such_file.jsonl")), vt::trace_error);
}

TEST_CASE("bad JSON names file and line") { check_error("bad_json.jsonl", 2, "", "bad JSON"); }

TEST_CASE("missing field names the field") { check_error("missing_field.jsonl", 3, "output_length", "missing"); }

TEST_CASE("wrong type names the field") { check_error("wrong_type.jsonl", 1, "input_length", "wrong type"); }

TEST_CASE("negative length is rejected") {
  check_error("negative_length.jsonl", 2, "output_length", "negative value -5");
}

TEST_CASE("hash_ids must number ceil(input_length / 512)") {
  check_error("too_many_blocks.jsonl", 2, "hash_ids", "3 block keys do not fit 600 prompt tokens");
  check_error("too_few_blocks.jsonl", 1, "hash_ids", "need exactly 3");
}

TEST_CASE("timestamps going backwards are rejected with both values") {
  check_error("backwards.jsonl", 3, "timestamp", "3000 us, after 5000 us on line 2");
  check_error("azure_backwards.csv", 3, "TIMESTAMP", "backwards");
}

TEST_CASE("azure: bad timestamp and negative count") {
  check_error("azure_bad_timestamp.csv", 3, "TIMESTAMP", "2023-13-16");
  check_error("azure_negative.csv", 2, "GeneratedTokens", "negative");
}

TEST_CASE("vtensor: unknown field and unsupported version") {
  check_error("vtensor_unknown_field.jsonl", 2, "input_token", "unknown field");
  check_error("vtensor_bad_version.jsonl", 1, "version", "not supported");
}

TEST_CASE("vtensor reader: lines off the fast path read as the document path reads them") {
  // Note [The request fast path]: simdjson takes the plain lines; whitespace, a repeated member
  // (the last one counts), an escaped member name, a minus sign or a bad number go through the
  // nlohmann-json path, which reads them or names the error. One reused request throughout, so a
  // line without block_keys must not keep the previous line's.
  const auto dir = vtensor::testing::scratch_dir("fast_path");
  const auto write = [&](const std::string& name, const std::string& text) {
    const auto path = (dir / name).string();
    std::ofstream(path) << "{\"format\":\"vtensor-trace\",\"version\":1,\"block_tokens\":4}\n" << text;
    return path;
  };
  const auto good = write("good.jsonl",
                          "{ \"arrival_us\" : 1 , \"input_tokens\":5,\"output_tokens\":2,\"block_keys\":[ 9, 3 ] }\n"
                          "{\"arrival_us\":2,\"arrival_us\":5,\"input_tokens\":3,\"output_tokens\":2}\n"
                          "{\"arriv\\u0061l_us\":6,\"input_tokens\":3,\"output_tokens\":2,\"block_keys\":[7],"
                          "\"session\":18446744073709551615,\"turn\":4294967295}\n"
                          "{\"arrival_us\":8,\"input_tokens\":3,\"output_tokens\":2}\n");
  vt::vtensor_reader reader(good);
  vt::trace_request request;
  REQUIRE(reader.next(request));
  CHECK(request.arrival_us == 1);
  CHECK(request.input_tokens == 5);
  CHECK(request.block_keys == std::vector<std::uint64_t>{9, 3});
  CHECK(request.session == 0);
  REQUIRE(reader.next(request));
  CHECK(request.arrival_us == 5);
  CHECK(request.block_keys.empty());
  CHECK(request.session == 1);
  REQUIRE(reader.next(request));
  CHECK(request.arrival_us == 6);
  CHECK(request.block_keys == std::vector<std::uint64_t>{7});
  CHECK(request.session == 18446744073709551615ULL);
  CHECK(request.turn == 4294967295U);
  REQUIRE(reader.next(request));
  CHECK(request.arrival_us == 8);
  CHECK(request.block_keys.empty());
  CHECK(request.session == 3);
  CHECK_FALSE(reader.next(request));

  const std::string plain = "\"input_tokens\":3,\"output_tokens\":2";
  const struct {
    const char* name;
    std::string line;
    const char* field;
    const char* why;
  } bad[] = {
      {"minus_zero", "{\"arrival_us\":-0," + plain + "}", "arrival_us", "negative value 0"},
      {"exponent", "{\"arrival_us\":1e2," + plain + "}", "arrival_us", "expected an integer, got 100"},
      {"turn_too_large", "{\"arrival_us\":1,\"turn\":4294967296," + plain + "}", "turn", "too large"},
      {"trailing", "{\"arrival_us\":1," + plain + "} x", "", "bad JSON"},
      {"negative_key", "{\"arrival_us\":1," + plain + ",\"block_keys\":[1,-1]}", "block_keys", "element 1"},
      {"unknown", "{\"arrival_us\":1," + plain + ",\"tokens\":1}", "tokens", "unknown field"},
      {"missing", "{\"arrival_us\":1,\"input_tokens\":3}", "output_tokens", "missing"},
  };
  for (const auto& test : bad) {
    const std::string name = test.name;
    CAPTURE(name);
    vt::vtensor_reader bad_reader(write(std::string(test.name) + ".jsonl", test.line + "\n"));
    try {
      while (bad_reader.next(request)) {
      }
      FAIL("no trace_error");
    } catch (const vt::trace_error& error) {
      CAPTURE(error.what());
      CHECK(error.line() == 2);
      CHECK(error.field() == test.field);
      CHECK(std::string(error.what()).find(test.why) != std::string::npos);
    }
  }
}

TEST_CASE("vidur reader: seconds to microseconds, integral decimals, extra columns ignored") {
  auto reader = vt::open_trace(data("vidur_small.csv"), std::nullopt);
  CHECK(reader->format() == vt::trace_format::vidur);
  CHECK(reader->block_tokens() == 0);
  const auto requests = read_all(*reader);
  REQUIRE(requests.size() == 4);
  CHECK(requests[0].arrival_us == 0);
  CHECK(requests[0].input_tokens == 1200);
  CHECK(requests[0].output_tokens == 50);
  CHECK(requests[1].arrival_us == 0);
  CHECK(requests[1].input_tokens == 300);    // written 300.0 by pandas
  CHECK(requests[2].arrival_us == 750'001);  // 1.2500005 - 0.5 s, rounded to the nearest microsecond
  CHECK(requests[2].line == 5);              // the blank line counts
  CHECK(requests[3].arrival_us == 2'500'000);
  CHECK(requests[3].output_tokens == 0);
  CHECK(requests[3].session == 3);
  CHECK(requests[3].block_keys.empty());
  CHECK(vt::parse_trace_format("vidur") == vt::trace_format::vidur);
}

TEST_CASE("vidur reader: bad rows and headers name file, line and column") {
  check_error("vidur_backwards.csv", 3, "arrived_at", "backwards");
  check_error("vidur_fraction.csv", 3, "num_prefill_tokens", "whole number");
  check_error("vidur_negative.csv", 2, "num_decode_tokens", "negative");
  check_error("vidur_no_arrival.csv", 1, "arrived_at", "missing column");
}

TEST_CASE("fuzz findings: far dates and overflowing numbers are trace errors, not crashes") {
  // fuzz_trace_reader: a year past the range of 64-bit nanoseconds overflowed a multiplication.
  check_error("azure_far_year.csv", 3, "TIMESTAMP", "1000-01-01");
  CHECK_FALSE(vt::parse_date_time_ns("1000-01-01 00:00:00").has_value());
  CHECK_FALSE(vt::parse_date_time_ns("9999-12-31 23:59:59").has_value());
  CHECK(vt::parse_date_time_ns("2261-01-01 00:00:00").has_value());
  // A JSON number too large for a double was nlohmann's out_of_range, not a parse error.
  check_error("number_overflow.jsonl", 1, "", "number overflow");
}
