//! `gdn eval` on 50 replayed cases (issue 39): the wall time of the whole
//! command, and what each case costs beyond its Turn (its own System
//! Root, the swarm's start and its two agent processes, its stop, reading
//! back its logs, the checks), the Turn's duration being what its
//! `turn.completed` event recorded. Prints numbers; asserts nothing about
//! them.
//!
//! The bundle is `examples/eval` (a coordinator that delegates to a
//! researcher, so every case starts two agent processes) with 50 cases.
//! They are recorded once from the `scripted` provider with `--record`,
//! then replayed with `--replay` (no network, no key) at `--jobs 2`, as a
//! CI job on two cores would run them.
//!
//! Run: `cargo bench -p gdn --bench eval` (release build). The aim is
//! under 20 ms per case beyond its Turns.

use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

const CASES: usize = 50;
const RUNS: usize = 3;

fn main() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/eval");
    let dir = tempfile::tempdir().expect("a temporary folder");
    let bundle = dir.path().join("bundle");
    std::fs::create_dir_all(bundle.join("evals")).unwrap();
    for file in ["goondan.yaml", "scripted-rules.yaml", "judge-rules.yaml"] {
        std::fs::copy(example.join(file), bundle.join(file)).unwrap();
    }
    let mut evals = String::from(
        "apiVersion: goondan.ai/v1\nkind: Eval\nmetadata:\n  name: bench\nspec:\n  agent: coordinator\n  cases:\n",
    );
    for n in 0..CASES {
        evals.push_str(&format!(
            "    - name: case-{n}\n      input: \"What is topic {n}?\"\n      assert:\n        - contains: \"Goondan\"\n        - agentAsked: researcher\n        - noErrors: true\n"
        ));
    }
    std::fs::write(bundle.join("evals/bench.yaml"), evals).unwrap();
    let cassettes = dir.path().join("cassettes");
    let state = dir.path().join("state");
    let gdn = |args: &[&str]| {
        let started = Instant::now();
        let output = Command::new(env!("CARGO_BIN_EXE_gdn"))
            .arg("--config")
            .arg(&bundle)
            .arg("--state-root")
            .arg(&state)
            .args(args)
            .output()
            .expect("gdn runs");
        let elapsed = started.elapsed();
        assert!(
            output.status.success(),
            "gdn {args:?}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        (
            elapsed,
            serde_json::from_slice::<Value>(&output.stdout).expect("a JSON report"),
        )
    };
    gdn(&[
        "eval",
        "--json",
        "--jobs",
        "2",
        "--record",
        cassettes.to_str().unwrap(),
    ]);
    for run in 1..=RUNS {
        let (wall, report) = gdn(&[
            "eval",
            "--json",
            "--jobs",
            "2",
            "--replay",
            cassettes.to_str().unwrap(),
        ]);
        let cases = report["cases"].as_array().unwrap();
        assert_eq!(cases.len(), CASES);
        let sum = |field: &str| {
            cases
                .iter()
                .map(|c| c[field].as_u64().unwrap())
                .sum::<u64>()
        };
        let per_case = |total: u64| total as f64 / CASES as f64;
        let (case_wall, answered, turns) = (sum("wallMs"), sum("latencyMs"), sum("turnMs"));
        let mut beyond: Vec<u64> = cases
            .iter()
            .map(|c| c["wallMs"].as_u64().unwrap() - c["turnMs"].as_u64().unwrap())
            .collect();
        beyond.sort();
        println!(
            "gdn eval --replay, {CASES} cases, --jobs 2 (run {run}): wall {:.2?} ({:.1} ms per case); per case: the Turn {:.1} ms (as its log recorded it), input to answer {:.1} ms (the Turn and the start of the two agent processes), the whole case {:.1} ms; beyond the Turn: mean {:.1} ms, median {} ms, p95 {} ms",
            wall,
            wall.as_secs_f64() * 1000.0 / CASES as f64,
            per_case(turns),
            per_case(answered),
            per_case(case_wall),
            per_case(case_wall - turns),
            beyond[CASES / 2],
            beyond[(CASES * 95) / 100 - 1],
        );
    }
}
