//! Fault points: named places inside a fold and its recovery where a test
//! can make the process die on the spot, to prove that the commit protocol
//! (see [`crate::FileJournal`]) resolves a crash at each of them.
//!
//! A point is armed by naming it in [`FAULT_ENV`], and only in builds with
//! the `fault-injection` feature, which the crate's own tests turn on.
//! Without the feature, reaching a point is an empty inline function: a
//! normal build neither reads the variable nor can be made to crash by it.
//! The crash is `std::process::abort`, so nothing unwinds, no destructor
//! runs and no buffered state is flushed, as with a real crash.

/// The environment variable that arms one fault point by its name.
pub const FAULT_ENV: &str = "GOONDAN_STORE_FAULT";

/// A named place inside a fold, in the order a fold reaches them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultPoint {
    /// Rewrite: the new base is complete in `base.jsonl.tmp`, and no commit
    /// marker has been written.
    RewriteTempWritten,
    /// Rewrite: the commit marker is in `events.jsonl`; the temporary base
    /// has not been renamed over `base.jsonl`.
    RewriteMarkerWritten,
    /// Rewrite: the new base is in place; `events.jsonl` still holds the
    /// Turn's events and the marker.
    RewriteRenamed,
    /// Append: the commit marker is in `events.jsonl`; `base.jsonl` has not
    /// grown.
    AppendMarkerWritten,
    /// Append: the delta is appended to `base.jsonl`; `events.jsonl` still
    /// holds the Turn's events and the marker.
    AppendBaseWritten,
    /// Recovery on open: an interrupted commit was finished or undone in
    /// `base.jsonl`; `events.jsonl` still ends with its marker.
    RecoveryMarkerResolved,
}

impl FaultPoint {
    /// Every point.
    pub const ALL: [FaultPoint; 6] = [
        FaultPoint::RewriteTempWritten,
        FaultPoint::RewriteMarkerWritten,
        FaultPoint::RewriteRenamed,
        FaultPoint::AppendMarkerWritten,
        FaultPoint::AppendBaseWritten,
        FaultPoint::RecoveryMarkerResolved,
    ];

    /// The name [`FAULT_ENV`] takes to arm this point.
    pub fn name(self) -> &'static str {
        match self {
            FaultPoint::RewriteTempWritten => "rewrite.temp-written",
            FaultPoint::RewriteMarkerWritten => "rewrite.marker-written",
            FaultPoint::RewriteRenamed => "rewrite.renamed",
            FaultPoint::AppendMarkerWritten => "append.marker-written",
            FaultPoint::AppendBaseWritten => "append.base-written",
            FaultPoint::RecoveryMarkerResolved => "recovery.marker-resolved",
        }
    }
}

/// Aborts the process when `point` is the armed one.
#[cfg(feature = "fault-injection")]
pub(crate) fn reach(point: FaultPoint) {
    if std::env::var(FAULT_ENV).is_ok_and(|armed| armed == point.name()) {
        std::process::abort();
    }
}

/// Does nothing: this build has no fault injection.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub(crate) fn reach(_point: FaultPoint) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn point_names_are_distinct() {
        let mut names: Vec<_> = FaultPoint::ALL.map(FaultPoint::name).to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), FaultPoint::ALL.len());
    }
}
