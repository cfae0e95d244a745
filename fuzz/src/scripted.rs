//! The scripted rules file: the bytes as `scripted-rules.yaml`, loaded by
//! `goondan_model::build` for a `scripted` Model and asked for answers, as
//! an agent with a scripted model does.

use goondan_model::{build, ModelConfig, ModelRequest, NoStream, ProcessEnv};
use goondan_types::{ContentPart, ModelMessage, ToolResultOutput};

/// Splits `data` at its first NUL into a rules file and an input, builds
/// a scripted model over the rules and asks it twice: with the input as
/// the last user message, and as the last tool result (JSON when it
/// parses as JSON).
pub fn scripted_rules(data: &[u8]) {
    let (rules, input) = match data.iter().position(|&byte| byte == 0) {
        Some(split) => (&data[..split], &data[split + 1..]),
        None => (data, &b"hello"[..]),
    };
    let scratch = tempfile::tempdir().expect("a temporary folder can be made");
    std::fs::write(
        scratch.path().join(goondan_model::DEFAULT_RULES_FILE),
        rules,
    )
    .expect("a temporary file can be written");
    let mut config = ModelConfig::new("fuzz", "scripted", "fuzz-model", scratch.path());
    config.agent = Some("fuzzer".into());
    let Ok(model) = build(&config, &ProcessEnv) else {
        return;
    };
    let text = String::from_utf8_lossy(input).into_owned();
    let output = match serde_json::from_slice(input) {
        Ok(json) => ToolResultOutput::Json(json),
        Err(_) => ToolResultOutput::Text(text.clone()),
    };
    let tool_result = ModelMessage::tool(vec![ContentPart::tool_result(
        "call_1_1",
        "fuzz_tool",
        output,
    )]);
    for last in [ModelMessage::user(text), tool_result] {
        let request = ModelRequest {
            model: "fuzz-model".into(),
            messages: vec![last],
            tools: Vec::new(),
            params: Default::default(),
        };
        let _ = crate::block_on(model.generate(request, &NoStream));
    }
}
