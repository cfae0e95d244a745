//! The plugin protocol decoder: one line from a plugin host through
//! `goondan_plugin::protocol::decode`, and what it decodes back through
//! the encoders the host answers with.

use goondan_plugin::protocol::{self, RpcMessage};

/// Decodes `data` as one plugin protocol line; a decoded message must
/// encode and decode to itself.
pub fn plugin_rpc(data: &[u8]) {
    let Ok(line) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(message) = protocol::decode(line) else {
        return;
    };
    let encoded = match &message {
        RpcMessage::Request { id, method, params } => {
            protocol::encode_request(id.as_ref(), method, params)
        }
        RpcMessage::Response { id, outcome } => protocol::encode_response(id, outcome),
    };
    let again = protocol::decode(&encoded).expect("an encoded message decodes again");
    assert_eq!(
        again, message,
        "a plugin message does not survive a round trip"
    );
}
