#!/usr/bin/env bash
# Replays every fuzz corpus through its target once: regression, not
# search. Stable toolchain only (no nightly, no libFuzzer): the replay is
# `fuzz/tests/replay.rs`, an ordinary test, so it shares the build of the
# workspace tests that `.ci/run` runs next. Takes seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test -p goondan-fuzz --locked --test replay
