#!/usr/bin/env bash
# Formats every C++ and CUDA source with the repository's .clang-format (clang-format 14, Debian's
# package clang-format). `tools/format.sh --check` changes nothing and exits 1 when a file would.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.cu')
if [ "${1:-}" = "--check" ]; then
  clang-format --dry-run --Werror "${files[@]}"
else
  clang-format -i "${files[@]}"
fi
