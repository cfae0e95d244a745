//! The approvals the chat's own Turn waits on, shown in the chat and
//! answered with y or n (issue 36 #1): the terminal is one more place a
//! person decides, beside `gdn approve` and the Studio.

use goondan_store::WorkspacePaths;
use goondan_types::{ApprovalDecision, ApprovalRequest, Verdict};
use std::collections::HashSet;

/// What the chat has shown so far.
pub(crate) struct ChatApprovals {
    workspace: WorkspacePaths,
    shown: HashSet<String>,
}

impl ChatApprovals {
    pub(crate) fn new(workspace: WorkspacePaths) -> ChatApprovals {
        ChatApprovals {
            workspace,
            shown: HashSet::new(),
        }
    }

    /// An undecided request of the Turn consuming `event_id` not shown
    /// yet (that Turn may run on any agent the input reached).
    pub(crate) fn next(&mut self, event_id: &str) -> Option<ApprovalRequest> {
        let request = super::approvals::undecided(&self.workspace)
            .ok()?
            .into_iter()
            .find(|request| request.event_id == event_id && !self.shown.contains(&request.id))?;
        self.shown.insert(request.id.clone());
        Some(request)
    }
}

/// Prints `request` and the question, on stderr (stdout carries answers).
pub(crate) fn show(request: &ApprovalRequest) {
    let what = request.tool.as_deref().unwrap_or("a decision");
    eprintln!();
    eprintln!(
        "? {} wants to run {what} {}",
        request.agent, request.arguments
    );
    if let Some(question) = &request.question {
        eprintln!("  {question}");
    }
    eprint!("  approve {}? [y/N] ", request.id);
}

/// The decision a typed `answer` makes: `y` or `yes` approves, anything
/// else denies.
pub(crate) fn decision(request: &ApprovalRequest, answer: &str) -> ApprovalDecision {
    let approve = matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes");
    ApprovalDecision {
        id: request.id.clone(),
        verdict: if approve {
            Verdict::Approve
        } else {
            Verdict::Deny
        },
        arguments: None,
        reason: (!approve).then(|| "denied at the terminal".to_string()),
        by: "terminal".into(),
        decided_at: goondan_types::now_iso(),
    }
}
