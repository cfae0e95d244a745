//! In-process cost of loading the shipped examples (parse, validate,
//! resolve against `@goondan/base`), without process start-up.
//!
//! Run: `cargo bench -p goondan-config --bench load`.

use criterion::{criterion_group, criterion_main, Criterion};
use goondan_config::{load_bundle, LoadOptions};
use std::path::Path;

fn load_examples(c: &mut Criterion) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let options = LoadOptions::default();
    for example in ["single-agent", "two-agents"] {
        let path = root.join("examples").join(example);
        c.bench_function(&format!("load_bundle examples/{example}"), |b| {
            b.iter(|| {
                let outcome = load_bundle(&path, &options).expect("readable");
                assert!(outcome.bundle.is_some());
                outcome
            })
        });
    }
}

criterion_group!(benches, load_examples);
criterion_main!(benches);
