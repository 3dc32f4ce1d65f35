#pragma once
// Paths of the data the repository ships (traces/data/), for tests that check reference figures.
// A missing file fails the test: the figures are part of what the suite guards.

#include <doctest/doctest.h>

#include <filesystem>
#include <string>

namespace vtensor::testing {

/// `traces/data/NAME` of the source tree; fails the calling test when it is missing.
inline std::string bundled_trace(const std::string& name) {
  const std::string path = VTENSOR_SOURCE_DIR "/traces/data/" + name;
  REQUIRE_MESSAGE(std::filesystem::is_regular_file(path), "bundled trace " << path << " is missing");
  return path;
}

}  // namespace vtensor::testing
