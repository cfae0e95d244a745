//! End-to-end Turns through the execution core with the builtin catalog:
//! one real Turn per tool and per extension, driven by the runtime's
//! scripted model, on a temporary workdir and (for http-fetch) a real
//! HTTP server on 127.0.0.1.

mod bot_apis;
mod extensions;
mod harness;
mod http_fetch;
mod manifests;
mod tools;
