//! Public-API tests of goondan-model: each HTTP provider against a mock
//! server on 127.0.0.1 speaking its wire format, the scripted provider,
//! record and replay, and configuration errors.

mod anthropic;
mod cassette;
mod config;
mod google;
mod openai;
mod openai_responses;
mod scripted;
mod support;
mod transport;
