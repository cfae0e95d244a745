//! The control socket request parser: one request line as the
//! orchestrator's control socket reads it
//! (`goondan_orchestrator::control::ControlRequest::from_line`), and the
//! same bytes as a response line, as `gdn` reads the orchestrator's
//! answer.

use goondan_orchestrator::control::{ControlRequest, ControlResponse};

/// Parses `data` as a control request line and as a response line; a
/// parsed request must serialize and parse to itself.
pub fn control_request(data: &[u8]) {
    if let Ok(request) = ControlRequest::from_line(data) {
        let encoded = serde_json::to_vec(&request).expect("a request serializes");
        let again = ControlRequest::from_line(&encoded).expect("a serialized request parses");
        assert_eq!(
            again, request,
            "a control request does not survive a round trip"
        );
    }
    let _ = serde_json::from_slice::<ControlResponse>(data);
}
