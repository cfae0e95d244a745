//! Strips TypeScript types to JavaScript, for plugin hosts on runtimes that
//! cannot (Node before 22.6 has no type stripping of its own).
//!
//! Users' plugins may be TypeScript modules written for the original
//! Goondan. The plugin host's Node shim, finding no built-in stripping,
//! runs `gdn strip-types <FILE>`, which calls [`strip_types`] and prints the
//! JavaScript. Nothing is downloaded at run time: the transform is compiled
//! into `gdn`.
//!
//! What this crate does: parse one `.ts`, `.mts` or `.cts` file, remove
//! every type-level construct (annotations, interfaces, type aliases,
//! `import type`, `as`/`satisfies`/`!`, `declare`, accessibility
//! modifiers), lower the few TypeScript constructs that have run-time
//! meaning (enums, parameter properties, namespaces) to plain JavaScript,
//! and print the result. Import specifiers stay as written:
//! `./utils.js` stays `./utils.js`, and the loader maps it to the `.ts` file.
//!
//! [`check_syntax`] only parses (TypeScript or JavaScript), so a bundle's
//! loader can report a script entry's syntax error with its line.
//!
//! What it does not do: type checking, JSX (`.tsx` is refused), lowering of
//! modern JavaScript to older targets, decorators, source maps, module
//! resolution. It knows no plugin, no process and no file system: the
//! caller reads the file and passes its text and path.
//!
//! ```
//! use std::path::Path;
//!
//! let js = goondan_typescript::strip_types(
//!     "const n: number = 1 as number;\nexport default n;\n",
//!     Path::new("plugin.ts"),
//! )
//! .unwrap();
//! assert_eq!(js, "const n = 1;\nexport default n;\n");
//! ```
#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]

mod error;
mod strip;

pub use error::{SourceProblem, StripError};
pub use strip::{check_syntax, strip_types};
