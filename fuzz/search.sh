#!/usr/bin/env bash
# Searches one target with libFuzzer for a while (default 10 minutes),
# then folds what it found into the committed corpus, minimized.
#
#   fuzz/search.sh <target> [seconds]
#
# Needs a nightly toolchain and cargo-fuzz (fuzz/README.md). New inputs
# land in a scratch folder first, so the committed corpus only ever gets
# the minimized union; crashes land in fuzz/libfuzzer/artifacts/<target>/.
set -euo pipefail
target="${1:?usage: fuzz/search.sh <target> [seconds]}"
seconds="${2:-600}"
cd "$(dirname "$0")"
target_dir="${FUZZ_TARGET_DIR:-libfuzzer/target}"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/found" "$scratch/merged"
cp corpus/"$target"/* "$scratch/found/"
# One worker, no sanitizer (the code under test forbids `unsafe`), debug
# assertions on so overflow panics; 2 GiB and 10 s per input are the
# bounds an input must stay within.
cargo +nightly fuzz run --fuzz-dir libfuzzer -s none -a --target-dir "$target_dir" \
  "$target" "$scratch/found" -- \
  -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -max_len=65536 -print_final_stats=1
cargo +nightly fuzz run --fuzz-dir libfuzzer -s none -a --target-dir "$target_dir" \
  "$target" "$scratch/merged" "$scratch/found" -- -merge=1
rm -f corpus/"$target"/*
cp "$scratch/merged"/* corpus/"$target"/
