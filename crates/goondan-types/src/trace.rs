//! OTel-compatible trace context (`shared-types.md` §5): a 32-hex `traceId`
//! created once per input chain and a 16-hex `spanId` per Turn, Step and
//! Tool Call.

use rand::Rng;
use serde::{Deserialize, Serialize};

/// A 128-bit trace id as 32 lowercase hex digits.
pub type TraceId = String;

/// A 64-bit span id as 16 lowercase hex digits.
pub type SpanId = String;

/// The causal position of one unit of work.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TraceContext {
    /// Kept from the first input to the end of the chain, never regenerated.
    pub trace_id: TraceId,
    /// This unit's span.
    pub span_id: SpanId,
    /// The span that caused this one; absent for a root span.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_span_id: Option<SpanId>,
}

impl TraceContext {
    /// A root context with a new trace.
    pub fn root() -> Self {
        TraceContext {
            trace_id: new_trace_id(),
            span_id: new_span_id(),
            parent_span_id: None,
        }
    }

    /// A child span of `self` in the same trace.
    pub fn child(&self) -> Self {
        TraceContext {
            trace_id: self.trace_id.clone(),
            span_id: new_span_id(),
            parent_span_id: Some(self.span_id.clone()),
        }
    }
}

/// `n_bytes` random bytes as lowercase hex.
pub fn random_hex(n_bytes: usize) -> String {
    let mut bytes = vec![0u8; n_bytes];
    rand::rng().fill_bytes(&mut bytes);
    let mut text = String::with_capacity(n_bytes * 2);
    for byte in bytes {
        text.push(char::from_digit(u32::from(byte >> 4), 16).unwrap_or('0'));
        text.push(char::from_digit(u32::from(byte & 0x0f), 16).unwrap_or('0'));
    }
    text
}

/// A new 32-hex trace id.
pub fn new_trace_id() -> TraceId {
    random_hex(16)
}

/// A new 16-hex span id.
pub fn new_span_id() -> SpanId {
    random_hex(8)
}

/// True when `text` is `len` lowercase hex digits.
pub fn is_hex_id(text: &str, len: usize) -> bool {
    text.len() == len
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_have_otel_lengths() {
        let root = TraceContext::root();
        assert!(is_hex_id(&root.trace_id, 32));
        assert!(is_hex_id(&root.span_id, 16));
        let child = root.child();
        assert_eq!(child.trace_id, root.trace_id);
        assert_eq!(child.parent_span_id.as_deref(), Some(root.span_id.as_str()));
        assert_ne!(child.span_id, root.span_id);
    }
}
