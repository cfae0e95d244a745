//! One `check(input, expected)` per TypeScript construct the original's
//! plugins use: what is removed, what is lowered to JavaScript, what is
//! kept exactly as written. The expected text is oxc 0.146's printing
//! (tabs, double quotes); a version bump that changes it shows here.

use goondan_typescript::{strip_types, StripError};
use std::path::Path;

fn check(name: &str, input: &str, expected: &str) {
    let javascript = strip_types(input, Path::new("fixture.ts"))
        .unwrap_or_else(|error| panic!("{name}: {error}"));
    assert_eq!(javascript, expected, "{name}");
}

#[test]
fn type_level_constructs_are_removed() {
    let cases = [
        (
            "import type",
            "import type { A } from './a.js';\nimport type B from './b.js';\nexport const x: A | B | null = null;\n",
            "export const x = null;\n",
        ),
        (
            "export type",
            "export type { A } from './a.js';\nexport type T = string;\ntype U = number;\nexport { type V, w } from './v.js';\n",
            "export { w } from \"./v.js\";\n",
        ),
        (
            "interfaces",
            "interface Point { x: number; y: number }\nexport interface Named extends Point { readonly name?: string }\nexport const p: Point = { x: 1, y: 2 };\n",
            "export const p = {\n\tx: 1,\n\ty: 2\n};\n",
        ),
        (
            "type aliases",
            "type Pair<T> = [T, T];\nexport const pair: Pair<number> = [1, 2];\n",
            "export const pair = [1, 2];\n",
        ),
        (
            "as casts and angle-bracket casts",
            "const raw: unknown = '1';\nexport const parsed = JSON.parse(raw as string) as { a: number };\nexport const n = <number>(<unknown>parsed.a);\n",
            "const raw = \"1\";\nexport const parsed = JSON.parse(raw);\nexport const n = parsed.a;\n",
        ),
        (
            "satisfies",
            "export const config = { retries: 3 } satisfies { retries: number };\n",
            "export const config = { retries: 3 };\n",
        ),
        (
            "generics",
            "export function identity<T extends object = {}>(value: T): T { return value; }\nexport const m = new Map<string, Array<number>>();\nexport const r = identity<{ a: 1 }>({ a: 1 });\n",
            "export function identity(value) {\n\treturn value;\n}\nexport const m = new Map();\nexport const r = identity({ a: 1 });\n",
        ),
        (
            "non-null assertions",
            "declare const maybe: { v?: string } | undefined;\nexport const v = maybe!.v!.length;\n",
            "export const v = maybe.v.length;\n",
        ),
        (
            "optional, default and rest parameters",
            "export function greet(name?: string, greeting: string = 'hi', ...rest: number[]): string { return greeting + (name ?? ''); }\n",
            "export function greet(name, greeting = \"hi\", ...rest) {\n\treturn greeting + (name ?? \"\");\n}\n",
        ),
        (
            "return types and type predicates",
            "export async function load(): Promise<void> {}\nexport const f = (a: number): a is 1 => a === 1;\nexport function* gen(): Generator<number, void, unknown> { yield 1; }\n",
            "export async function load() {}\nexport const f = (a) => a === 1;\nexport function* gen() {\n\tyield 1;\n}\n",
        ),
        (
            "declare",
            "declare const process: { env: Record<string, string | undefined> };\ndeclare function external(a: string): void;\ndeclare module 'x' { export const y: number; }\ndeclare global { interface Window { z: number } }\nexport const home = process.env.HOME;\n",
            "export const home = process.env.HOME;\n",
        ),
        (
            "type-only named imports",
            "import { type Ctx, helper, type Other as O } from './helper.js';\nexport function run(ctx: Ctx): O { return helper(ctx); }\n",
            "import { helper } from \"./helper.js\";\nexport function run(ctx) {\n\treturn helper(ctx);\n}\n",
        ),
        (
            "this parameters",
            "export function f(this: Window, a: number) { return a; }\n",
            "export function f(a) {\n\treturn a;\n}\n",
        ),
        (
            "definite assignment",
            "let a!: number; a = 1; export { a };\n",
            "let a;\na = 1;\nexport { a };\n",
        ),
    ];
    for (name, input, expected) in cases {
        check(name, input, expected);
    }
}

#[test]
fn imports_used_only_as_types_are_elided_as_tsc_does() {
    check(
        "value imports used as types",
        "import { Foo } from './foo.js';\nimport { bar, Baz } from './bar.js';\nlet x: Foo;\nexport const y: Baz = bar();\n",
        "import { bar } from \"./bar.js\";\nlet x;\nexport const y = bar();\n",
    );
    check(
        "side-effect imports stay",
        "import './setup.js';\nimport {} from './empty.js';\nexport {};\n",
        "import \"./setup.js\";\nimport \"./empty.js\";\nexport {};\n",
    );
}

#[test]
fn import_specifiers_stay_as_written() {
    check(
        "specifiers",
        "import { a } from './utils.js';\nimport b from '../lib/b.ts';\nimport * as c from 'node:path';\nexport { a, b, c };\nexport * from './more.mjs';\nexport const d = await import('./lazy.js');\n",
        "import { a } from \"./utils.js\";\nimport b from \"../lib/b.ts\";\nimport * as c from \"node:path\";\nexport { a, b, c };\nexport * from \"./more.mjs\";\nexport const d = await import(\"./lazy.js\");\n",
    );
}

#[test]
fn enums_become_objects() {
    check(
        "regular enums, numeric and string",
        "export enum Color { Red, Green = 5, Blue }\nexport enum Kind { A = 'a', B = 'b' }\n",
        "export let Color = /* @__PURE__ */ function(Color) {\n\tColor[Color[\"Red\"] = 0] = \"Red\";\n\tColor[Color[\"Green\"] = 5] = \"Green\";\n\tColor[Color[\"Blue\"] = 6] = \"Blue\";\n\treturn Color;\n}({});\nexport let Kind = /* @__PURE__ */ function(Kind) {\n\tKind[\"A\"] = \"a\";\n\tKind[\"B\"] = \"b\";\n\treturn Kind;\n}({});\n",
    );
    check(
        "const enums are kept as objects, not inlined",
        "export const enum Flag { None = 0, Read = 1 << 0, Write = 1 << 1 }\nexport const rw = Flag.Read | Flag.Write;\n",
        "export let Flag = /* @__PURE__ */ function(Flag) {\n\tFlag[Flag[\"None\"] = 0] = \"None\";\n\tFlag[Flag[\"Read\"] = 1] = \"Read\";\n\tFlag[Flag[\"Write\"] = 2] = \"Write\";\n\treturn Flag;\n}({});\nexport const rw = Flag.Read | Flag.Write;\n",
    );
}

#[test]
fn class_modifiers_go_and_parameter_properties_become_assignments() {
    check(
        "class members",
        "export abstract class Base {\n  private secret = 1;\n  protected abstract id(): string;\n  public readonly tag: string = 'base';\n  declare extra: number;\n  static readonly version?: string;\n  constructor(public name: string, private readonly age?: number, protected flag?: boolean) {}\n  get info(): string { return this.name; }\n}\n",
        "export class Base {\n\tname;\n\tage;\n\tflag;\n\tsecret = 1;\n\ttag = \"base\";\n\tstatic version;\n\tconstructor(name, age, flag) {\n\t\tthis.name = name;\n\t\tthis.age = age;\n\t\tthis.flag = flag;\n\t}\n\tget info() {\n\t\treturn this.name;\n\t}\n}\n",
    );
    check(
        "override, implements and index signatures",
        "interface I { x?: number }\nclass A { m(): void {} }\nexport class C extends A implements I { [key: string]: unknown; x?: number; override m(): void {} }\n",
        "class A {\n\tm() {}\n}\nexport class C extends A {\n\tx;\n\tm() {}\n}\n",
    );
}

#[test]
fn namespaces_become_objects() {
    check(
        "namespace",
        "export namespace NS { export const a = 1; }\n",
        "export let NS;\n(function(_NS) {\n\tconst a = _NS.a = 1;\n})(NS || (NS = {}));\n",
    );
}

#[test]
fn mts_is_a_module_and_cts_is_commonjs() {
    let mts = strip_types("export const a: number = 1;\n", Path::new("m.mts")).unwrap();
    assert_eq!(mts, "export const a = 1;\n");
    let cts = strip_types(
        "import fs = require('fs');\nconst x: number = 1;\nexport = { fs, x };\n",
        Path::new("c.cts"),
    )
    .unwrap();
    assert_eq!(
        cts,
        "const fs = require(\"fs\");\nconst x = 1;\nmodule.exports = {\n\tfs,\n\tx\n};\n"
    );
}

#[test]
fn declaration_files_strip_to_nothing() {
    let javascript = strip_types(
        "export interface A { a: string }\nexport declare function f(): void;\n",
        Path::new("types.d.ts"),
    )
    .unwrap();
    assert_eq!(javascript, "");
}

#[test]
fn tsx_is_refused_with_a_clear_error() {
    let error = strip_types("export const x = <div />;\n", Path::new("view.tsx")).unwrap_err();
    assert!(matches!(error, StripError::UnsupportedFile { ref kind, .. } if kind == "TSX"));
    assert_eq!(error.code(), "E_TYPESCRIPT_STRIP");
    assert_eq!(
        error.to_string(),
        "view.tsx: cannot strip types from a TSX file"
    );
    assert!(error.suggestion().unwrap().contains("JSX"));
}

#[test]
fn syntax_errors_name_the_file_line_and_column() {
    let cases = [
        ("const a: number = ;\n", "broken.ts:1:19: Unexpected token"),
        (
            "interface X {\n  a: string\n",
            "broken.ts:3:1: Expected `}` but found `EOF`",
        ),
        // Caught by the syntax checks of semantic analysis, not the parser.
        (
            "let x = 1;\nlet x = 2;\n",
            "broken.ts:1:5: Identifier `x` has already been declared",
        ),
        // Columns count characters, not bytes.
        (
            "const é = 'é'; const b: = 1;\n",
            "broken.ts:1:25: Unexpected token",
        ),
    ];
    for (source, expected) in cases {
        let error = strip_types(source, Path::new("broken.ts")).unwrap_err();
        assert!(matches!(error, StripError::Syntax { .. }), "{source}");
        assert_eq!(error.to_string(), expected, "{source}");
        assert_eq!(error.code(), "E_TYPESCRIPT_STRIP");
        assert!(error.suggestion().is_some());
    }
}

#[test]
fn commonjs_only_syntax_is_refused_in_an_es_module() {
    let cases = [
        (
            "const x = 1;\nexport = x;\n",
            "m.ts:2:1: `export =` is CommonJS; an ES module needs `export default`",
        ),
        (
            "import fs = require('fs');\nexport const r = fs;\n",
            "m.ts:1:1: `import x = require(..)` is CommonJS; an ES module needs `import x from`",
        ),
    ];
    for (source, expected) in cases {
        let error = strip_types(source, Path::new("m.ts")).unwrap_err();
        assert!(matches!(error, StripError::Transform { .. }), "{source}");
        assert_eq!(error.to_string(), expected);
    }
    // A type-only `import type x = require()` has no run-time part.
    assert_eq!(
        strip_types(
            "import type T = require('./t');\nexport const a: T | 1 = 1;\n",
            Path::new("m.ts")
        )
        .unwrap(),
        "export const a = 1;\n"
    );
}

#[test]
fn decorators_are_refused_where_they_are() {
    let source =
        "function dec(t: unknown) {}\nexport class D {\n  @dec m() {}\n}\n@dec class E {}\n";
    let error = strip_types(source, Path::new("d.ts")).unwrap_err();
    assert!(matches!(error, StripError::Transform { .. }));
    let places: Vec<(u32, u32)> = error
        .problems()
        .iter()
        .map(|problem| (problem.line, problem.column))
        .collect();
    assert_eq!(places, [(3, 3), (5, 1)]);
    assert!(error.to_string().starts_with(
        "d.ts:3:3: decorators are not supported: Node cannot run them and stripping does not lower them (and 1 more problem)"
    ));
}

#[test]
fn overloads_and_declaration_merging_strip_cleanly() {
    check(
        "overloads",
        "export function f(a: string): string;\nexport function f(a: number): number;\nexport function f(a: any): any { return a; }\nexport class K { m(a: string): void; m(a: any) {} }\n",
        "export function f(a) {\n\treturn a;\n}\nexport class K {\n\tm(a) {}\n}\n",
    );
    check(
        "an interface merged into a class, a namespace into a function",
        "export interface Box { size: number }\nexport class Box { constructor(public w: number) {} }\nexport function ns() { return ns.x; }\nexport namespace ns { export const x = 1; }\n",
        "export class Box {\n\tw;\n\tconstructor(w) {\n\t\tthis.w = w;\n\t}\n}\nexport function ns() {\n\treturn ns.x;\n}\n(function(_ns) {\n\tconst x = _ns.x = 1;\n})(ns || (ns = {}));\n",
    );
    check(
        "const assertions, asserts predicates, abstract constructor types",
        "export type Ctor = abstract new () => object;\nexport const keys = <const>['a', 'b'];\nexport const t = ['x'] as const;\nexport function assert(v: unknown): asserts v is string {}\n",
        "export const keys = [\"a\", \"b\"];\nexport const t = [\"x\"];\nexport function assert(v) {}\n",
    );
}
