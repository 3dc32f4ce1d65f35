#!/usr/bin/env bash
# The whole test suite, as CI runs it (`.ci/run` runs exactly this; README, "The two commands"):
#   1. installs what is missing from Debian's archive (tools/install-deps.sh --fuzz: the fuzzers
#      need clang-14 and its sanitizer runtimes, the Slurm case slurmctld, slurmd and munge);
#   2. the release build (build/) and its suite: every doctest TEST_CASE is a CTest entry; the
#      Slurm case starts a one-node cluster (tools/slurm-local.sh, as root), runs a plan's job
#      arrays on it, merges them against single runs and stops the daemons by their pids;
#   3. AddressSanitizer + UBSan (preset `asan`, build-asan/, expensive invariant checks on): the
#      whole suite but five of the six `replay identity` cases (240-290 s each under the
#      sanitizer; the kv-fused, lookahead 2 one runs here: the default token-major's replays
#      take about 2.8x as long, the same code at a smaller page), the whole-Mooncake replay
#      (over 10 minutes) and three end-to-end determinism checks that replay whole traces again
#      and again through code the other cases cover (compare's `--jobs` identity, 170 s; the
#      Azure trace's zero hit rate, 78 s; replay's byte-identical outputs, 69 s; capacity's
#      search on the excerpt, about 30 replays, over 15 minutes; its replica search and three
#      compare-plan cases, each a dozen or more replays with invariant checks, 200-270 s, and the
#      local Slurm one: the plan refusals run here; the report's figures of a real comparison and
#      the load report's replays at several scales, 36 s each, whose C++ the other compare and
#      replay cases cover): the release stage runs them, and the other
#      replay tests, goldens included, run here, the fault soaks at half their operations
#      (VTENSOR_SOAK_OPS=2500: 40-56 s each under the sanitizer at 5000; the release stage runs
#      all 5000; each case still asserts pressure at 2500); any
#      sanitizer report failing its test (halt_on_error, leaks checked at exit). Both sanitizer
#      builds keep only line tables (-g1, CMakePresets.json): a third less compile time, and
#      the reports still name file and line;
#   4. ThreadSanitizer (preset `tsan`, build-tsan/): the tests of the code with two threads: the
#      mapping worker, admissions mapped beside a step (the doctest suite `threads`), and
#      concurrent manager callers;
#   5. every libFuzzer harness for FUZZ_SECONDS (default 20) each (tools/fuzz.sh); its clang build
#      also checks the thread-safety annotations (core/thread_annotations.hpp): a violation fails it,
#      and keeps line tables only (-g1), as the sanitizer builds do.
# Stages after the first failure do not run; the exit code is the failing stage's. Set
# VTENSOR_TEST_STAGES to a subset of "release asan tsan fuzz" to run fewer (default: all).
set -euo pipefail
cd "$(dirname "$0")/.."
stages=${VTENSOR_TEST_STAGES:-release asan tsan fuzz}
fuzz_seconds=${FUZZ_SECONDS:-20}
has() { [[ " $stages " == *" $1 "* ]]; }
stamp() { echo "== test-all: $1 ($(date -u +%H:%M:%S))"; }

./tools/install-deps.sh --fuzz

if has release; then
  stamp "release build and suite"
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
  cmake --build build
  ctest --test-dir build --output-on-failure -j2
fi

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1

if has asan; then
  stamp "AddressSanitizer + UBSan suite"
  cmake --preset asan -DVTENSOR_BUILD_BENCH=OFF >/dev/null
  cmake --build build-asan --target vtensor_tests
  VTENSOR_SOAK_OPS=2500 ctest --test-dir build-asan --output-on-failure -j2 --timeout 1800 \
    -E 'replay identity: (kv-split|token-major|kv-fused, no)|whole Mooncake|whatever --jobs is|without prefix identity, has a hit rate|same input and seed give byte-identical|capacity: on the excerpt|capacity: --fewest-replicas|capacity plan|compare plan: (points run|merge names|GNU parallel|a local Slurm)|compare: --report renders every figure|replay: the load report flags'
fi

if has tsan; then
  stamp "ThreadSanitizer: the mapping worker, admissions beside a step, concurrent callers"
  cmake --preset tsan >/dev/null
  cmake --build build-tsan --target vtensor_tests
  ctest --test-dir build-tsan --output-on-failure -j2 --timeout 1800 \
    -R 'async|worker|concurrent|lookahead|vtensor policy|random steps'
  ./build-tsan/bin/vtensor_tests --test-suite=threads  # doctest's suite filter (CTest's labels miss some)
fi

if has fuzz; then
  stamp "fuzzers, ${fuzz_seconds} s each"
  ./tools/fuzz.sh "$fuzz_seconds"
fi
stamp "all stages passed: $stages"
