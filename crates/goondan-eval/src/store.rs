//! Stored runs: every `gdn eval` keeps its report and its cases' System
//! Roots under `<System Root>/evals/<runId>/` (`run.json`, and one folder
//! per case run, `<n>/`, holding that case's workspaces, logs and traces),
//! so `gdn eval compare` and the Studio can read them later. A run id is
//! the UTC start time (`20261128T031600Z`), with `-2`, `-3`, ... when
//! several runs start in the same second.

use crate::report::RunReport;
use crate::EvalError;
use goondan_store::StateRoot;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// The file of a run's report.
pub const REPORT_FILE: &str = "run.json";

/// The stored runs of one System Root.
#[derive(Debug, Clone)]
pub struct RunStore {
    root: PathBuf,
}

/// A stored run, for a list.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunListing {
    /// Its id.
    pub run_id: String,
    /// When it started.
    pub started_at: String,
    /// Case runs.
    pub cases: usize,
    /// Case runs that did not pass.
    pub failed: usize,
    /// Answered from cassettes.
    pub replay: bool,
}

impl RunStore {
    /// The runs under `state_root` (`<root>/evals`).
    pub fn new(state_root: &StateRoot) -> RunStore {
        RunStore {
            root: state_root.path().join("evals"),
        }
    }

    /// The folder holding every run.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Makes the folder of a new run; its id and path.
    pub fn create(&self, started_at: &str) -> Result<(String, PathBuf), EvalError> {
        goondan_store::owner_only::create_dir_all(&self.root)
            .map_err(EvalError::io(format!("creating {}", self.root.display())))?;
        // `2026-11-28T03:16:00.123Z` → `20261128T031600Z`.
        let digits: String = started_at
            .chars()
            .take_while(|c| *c != '.')
            .filter(char::is_ascii_alphanumeric)
            .collect();
        let stamp = format!("{}Z", digits.trim_end_matches('Z'));
        for n in 1..1000 {
            let id = if n == 1 {
                stamp.clone()
            } else {
                format!("{stamp}-{n}")
            };
            let dir = self.root.join(&id);
            match std::fs::create_dir(&dir) {
                Ok(()) => return Ok((id, dir)),
                Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(error) => {
                    return Err(EvalError::Io {
                        what: format!("creating {}", dir.display()),
                        source: error,
                    })
                }
            }
        }
        Err(EvalError::Io {
            what: format!("creating a run folder under {}", self.root.display()),
            source: std::io::Error::other("too many runs started in one second"),
        })
    }

    /// Writes `report` as its run's `run.json` (atomically).
    pub fn save(&self, report: &RunReport) -> Result<PathBuf, EvalError> {
        let path = self.root.join(&report.run_id).join(REPORT_FILE);
        let mut bytes = serde_json::to_vec_pretty(report).map_err(|error| EvalError::BadRun {
            path: path.display().to_string(),
            message: error.to_string(),
        })?;
        bytes.push(b'\n');
        let options = goondan_types::atomic_file::WriteOptions {
            access: goondan_types::atomic_file::FileAccess::Mode(0o600),
            durable: false,
        };
        goondan_types::atomic_file::write_atomically(&path, &bytes, options)
            .map_err(EvalError::io(format!("writing {}", path.display())))?;
        Ok(path)
    }

    /// The stored run `id`; `latest` is the newest.
    pub fn load(&self, id: &str) -> Result<RunReport, EvalError> {
        let id = if id == "latest" {
            self.ids()?.pop().ok_or_else(|| self.not_found(id))?
        } else {
            id.to_string()
        };
        // A run id is a folder name, never a path.
        if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            return Err(self.not_found(&id));
        }
        let path = self.root.join(&id).join(REPORT_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return Err(self.not_found(&id))
            }
            Err(error) => {
                return Err(EvalError::Io {
                    what: format!("reading {}", path.display()),
                    source: error,
                })
            }
        };
        serde_json::from_str(&text).map_err(|error| EvalError::BadRun {
            path: path.display().to_string(),
            message: error.to_string(),
        })
    }

    /// Every stored run, oldest first; a damaged one is skipped.
    pub fn list(&self) -> Result<Vec<RunListing>, EvalError> {
        let mut runs = Vec::new();
        for id in self.ids()? {
            if let Ok(report) = self.load(&id) {
                runs.push(RunListing {
                    run_id: report.run_id.clone(),
                    started_at: report.started_at.clone(),
                    cases: report.cases.len(),
                    failed: report.n_failed(),
                    replay: report.replay,
                });
            }
        }
        Ok(runs)
    }

    /// The ids of the runs with a report, sorted (oldest first: ids are
    /// times).
    fn ids(&self) -> Result<Vec<String>, EvalError> {
        let entries = match std::fs::read_dir(&self.root) {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(error) => {
                return Err(EvalError::Io {
                    what: format!("listing {}", self.root.display()),
                    source: error,
                })
            }
        };
        let mut ids: Vec<String> = entries
            .filter_map(Result::ok)
            .filter(|entry| entry.path().join(REPORT_FILE).is_file())
            .filter_map(|entry| entry.file_name().to_str().map(str::to_string))
            .collect();
        ids.sort_by_key(|id| run_order(id));
        Ok(ids)
    }

    fn not_found(&self, id: &str) -> EvalError {
        EvalError::RunNotFound {
            id: id.to_string(),
            root: self.root.display().to_string(),
        }
    }
}

/// Sorts `…Z` before `…Z-2` before `…Z-10`.
fn run_order(id: &str) -> (String, u32) {
    match id.rsplit_once('-') {
        Some((stamp, n)) if n.chars().all(|c| c.is_ascii_digit()) => {
            (stamp.to_string(), n.parse().unwrap_or(0))
        }
        _ => (id.to_string(), 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_in_one_second_get_their_own_ids_and_latest_is_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        let store = RunStore::new(&StateRoot::new(dir.path()));
        let mut ids = Vec::new();
        for _ in 0..3 {
            let (id, _) = store.create("2026-11-28T03:16:00.123Z").unwrap();
            let report = RunReport::new(id.clone(), "t".into(), 1, "b".into(), true, Vec::new());
            store.save(&report).unwrap();
            ids.push(id);
        }
        assert_eq!(
            ids,
            [
                "20261128T031600Z",
                "20261128T031600Z-2",
                "20261128T031600Z-3"
            ]
        );
        assert_eq!(store.load("latest").unwrap().run_id, "20261128T031600Z-3");
        assert_eq!(store.list().unwrap().len(), 3);
        for bad in ["../x", "a/b", "", "nope"] {
            assert_eq!(
                store.load(bad).unwrap_err().code(),
                "E_EVAL_RUN_NOT_FOUND",
                "{bad}"
            );
        }
    }
}
