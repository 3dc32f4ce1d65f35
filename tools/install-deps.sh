#!/usr/bin/env bash
# Installs what vtensor needs from Debian's archive, and nothing else.
# Idempotent: quiet and offline when every package is already present.
# Why each package is here: README.md, section "Dependencies".
set -euo pipefail

packages=(
  g++ cmake ninja-build            # toolchain
  libboost-dev                     # Boost.Intrusive (vSet, rTree eviction sets)
  libboost-program-options-dev     # the vtensor command's options
  nlohmann-json3-dev               # calibration files, traces, --json summaries
  libsimdjson-dev                  # the fast path of vtensor trace request lines
  libfmt-dev                       # formatting of reports and messages
  libssl-dev                       # SHA-256 (OpenSSL's libcrypto): a compare plan's traces and build
  doctest-dev                      # unit, scenario and conformance tests
  libbenchmark-dev                 # vtensor_bench
  python3-matplotlib               # `vtensor report` / `compare --report`: the figures (tools/compare_report.py)
  parallel                         # GNU parallel: runs a compare plan's points (--emit parallel) and its test
)

# `--fuzz`: also what the test command (tools/test-all.sh) needs beyond the build: what
# tools/fuzz.sh needs (clang with libFuzzer and the sanitizer runtimes), the browser the report
# is opened in (tests/tools/report_in_browser.py; without it those cases are skipped), and a
# single-node Slurm with munge that runs a plan's job array for real (tools/slurm-local.sh).
if [ "${1:-}" = "--fuzz" ]; then
  packages+=(clang-14 libclang-rt-14-dev chromium slurmctld slurmd slurm-client munge)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}" >&2
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
