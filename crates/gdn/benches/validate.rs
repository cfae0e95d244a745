//! End-to-end timing of `gdn validate examples/two-agents`: process start,
//! bundle load and output, as a user or CI sees it. Prints numbers; asserts
//! nothing about them.
//!
//! Run: `cargo bench -p gdn --bench validate` (release build). The target
//! is well under 6 ms per run.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const WARMUP: usize = 10;
const RUNS: usize = 200;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let example = root.join("examples/two-agents");
    let run = || {
        let started = Instant::now();
        let status = Command::new(env!("CARGO_BIN_EXE_gdn"))
            .arg("validate")
            .arg(&example)
            .stdout(std::process::Stdio::null())
            .status()
            .expect("gdn runs");
        assert!(status.success(), "the example must validate");
        started.elapsed()
    };
    for _ in 0..WARMUP {
        run();
    }
    let mut samples: Vec<Duration> = (0..RUNS).map(|_| run()).collect();
    samples.sort();
    let mean = samples.iter().sum::<Duration>() / RUNS as u32;
    let at = |fraction: f64| samples[((RUNS as f64 - 1.0) * fraction).round() as usize];
    println!(
        "gdn validate examples/two-agents: {RUNS} runs, min {:.2?}, median {:.2?}, mean {:.2?}, p95 {:.2?}, max {:.2?}",
        samples[0],
        at(0.5),
        mean,
        at(0.95),
        samples[RUNS - 1]
    );
}
