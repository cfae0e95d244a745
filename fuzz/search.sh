#!/usr/bin/env bash
# Searches one target with libFuzzer until it has used a given amount of
# CPU time (default 600 s), then adds what it found to the committed
# corpus, minimized.
#
#   fuzz/search.sh <target> [cpu-seconds]
#
# CPU time, not wall time, because the machines we fuzz on are shared: a
# niced fuzzer may get a fifth of a core. FUZZ_MAX_WALL_SECONDS, when set,
# also stops it after that much wall time, whichever comes first.
#
# Needs a nightly toolchain and cargo-fuzz (fuzz/README.md). The search
# works on a scratch copy of the corpus; afterwards only new inputs of at
# most 256 bytes that add edges to the committed corpus (libFuzzer's
# -set_cover_merge, hit counts ignored) are copied into it, so the corpus
# stays small enough to commit. Crashes land in fuzz/libfuzzer/artifacts/<target>/.
set -euo pipefail
target="${1:?usage: fuzz/search.sh <target> [cpu-seconds]}"
cpu_seconds="${2:-600}"
cd "$(dirname "$0")"
target_dir="$(realpath -m "${FUZZ_TARGET_DIR:-libfuzzer/target}")"
# No sanitizer (the code under test forbids `unsafe`), debug assertions
# on so overflow panics.
cargo +nightly fuzz build --fuzz-dir libfuzzer -s none -a --target-dir "$target_dir" "$target"
binary="$target_dir/$(rustc -vV | sed -n 's/^host: //p')/release/$target"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/found" "$scratch/small" "$scratch/kept" libfuzzer/artifacts/"$target"
cp corpus/"$target"/* "$scratch/found/"
cp corpus/"$target"/* "$scratch/kept/"
# One worker; 2 GiB and 10 s per input are the bounds an input must stay
# within.
"$binary" "$scratch/found" -artifact_prefix=libfuzzer/artifacts/"$target"/ \
  -rss_limit_mb=2048 -timeout=10 -max_len=65536 -print_final_stats=1 \
  -max_total_time="${FUZZ_MAX_WALL_SECONDS:-0}" &
fuzzer=$!
ticks_per_second="$(getconf CLK_TCK)"
used=0
while kill -0 "$fuzzer" 2>/dev/null; do
  # Fields 14 and 15 of /proc/<pid>/stat: user and system time in ticks.
  used="$(awk '{print $14 + $15}' /proc/"$fuzzer"/stat 2>/dev/null || echo "$used")"
  if [ "$used" -ge $((cpu_seconds * ticks_per_second)) ]; then
    kill -INT "$fuzzer"
    break
  fi
  sleep 2
done
status=0
wait "$fuzzer" || status=$?
echo "search: $target used about $((used / ticks_per_second)) CPU seconds"
# Stopped by a budget: libFuzzer exits with its -interrupted_exit_code,
# 72. Anything else non-zero is a finding.
if [ "$status" -eq 72 ]; then
  status=0
fi
find "$scratch/found" -type f -size -257c -exec cp {} "$scratch/small/" \;
"$binary" "$scratch/kept" "$scratch/small" -set_cover_merge=1 -use_counters=0 -rss_limit_mb=2048 -timeout=10
cp "$scratch/kept"/* corpus/"$target"/
exit "$status"
