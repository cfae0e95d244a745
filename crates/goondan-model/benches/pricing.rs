//! What an agent pays at start for the ledger's price: one lookup in the
//! vendored price list (parsed from the text compiled into the binary),
//! and the per-call cost computation.

use criterion::{criterion_group, criterion_main, Criterion};
use goondan_model::pricing::list_price;
use goondan_types::TokenUsage;
use std::hint::black_box;

fn pricing(c: &mut Criterion) {
    c.bench_function("list_price (parse the list, find one model)", |b| {
        b.iter(|| list_price(black_box("anthropic"), black_box("claude-sonnet-4-5")))
    });
    let price = list_price("openai", "gpt-4o-mini").unwrap();
    let usage = TokenUsage {
        prompt_tokens: 1200,
        completion_tokens: 300,
        total_tokens: 1500,
    };
    c.bench_function("cost_usd of one call", |b| {
        b.iter(|| price.cost_usd(black_box(&usage)))
    });
}

criterion_group!(benches, pricing);
criterion_main!(benches);
