//! Time to strip a 300-line plugin module, the size of a typical tool or
//! extension of the original, and how that time splits from process
//! start-up when the plugin host runs `gdn strip-types` once per file.
//! Prints numbers; asserts nothing about them.
//!
//! Run: `cargo bench -p goondan-typescript --bench strip`.

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use std::path::Path;

/// One 30-line block of typical plugin code; [`module`] repeats it with
/// fresh names.
const BLOCK: &str = r#"// Block N of the bench module.
import type { JsonObject as JsonObjectN, ToolContext as ToolContextN } from './types.js';
import { requireString as requireStringN, type JsonValue as JsonValueN } from './utils.js';

export interface OptionsN {
  readonly name: string;
  retries?: number;
  tags: Array<string>;
}

export type ResultN<T> = { ok: true; value: T } | { ok: false; error: string };

export enum ModeN { Fast = 'fast', Safe = 'safe' }

export class RunnerN<T extends JsonValueN> {
  private calls = 0;
  constructor(private readonly options: OptionsN, public mode: ModeN = ModeN.Safe) {}

  run(ctx: ToolContextN, input: JsonObjectN, fallback?: T): ResultN<T> {
    this.calls += 1;
    const name = requireStringN(input, 'name') as string;
    const value = (input[name] ?? fallback) as T | undefined;
    if (value === undefined) {
      return { ok: false, error: `${this.options.name}: ${name} missing in ${ctx.agentName}` };
    }
    return { ok: true, value: value! } satisfies ResultN<T>;
  }
}

export const defaultsN = { name: 'runnerN', retries: 3, tags: [] } satisfies OptionsN;
"#;

/// A 300-line module: the block ten times, `N` replaced by the index.
fn module() -> String {
    let source: String = (0..10)
        .map(|index| BLOCK.replace('N', &index.to_string()))
        .collect();
    assert_eq!(source.lines().count(), 300);
    source
}

fn bench_strip(c: &mut Criterion) {
    let source = module();
    let path = Path::new("module.ts");
    goondan_typescript::strip_types(&source, path).expect("the bench module strips");
    c.bench_function("strip_types 300-line module", |b| {
        b.iter(|| goondan_typescript::strip_types(black_box(&source), path).unwrap())
    });
}

criterion_group!(benches, bench_strip);
criterion_main!(benches);
