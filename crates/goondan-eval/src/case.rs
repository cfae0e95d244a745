//! One run of one case: its own fresh System Root, its swarm started
//! through [`goondan_host::start`] (the orchestrator and real agent
//! processes, as `gdn run` starts them, so a case may delegate across
//! agents), its user messages sent one after the other to the case's
//! agent and instance, all within the case's time limit; then the swarm
//! stopped, what it recorded read back, the checks made and the judge
//! asked.
//!
//! The time limit is one deadline on the monotonic clock, from the first
//! message sent to the judge's verdict: every model call of the case (its
//! Turns' and the judge's) runs within it, so a Model that never answers
//! holds the case no longer than its limit, whatever the Model's own
//! request timeout. A case whose Turns outlive it has its running Turns
//! cancelled and its swarm stopped, so none of its processes outlives
//! it; a judge that outlives it is dropped with its request. Either way
//! the case is reported as timed out, saying which part ran out.

use crate::assertions::{check, Evidence, Failure};
use crate::judge;
use crate::observe::{observe, Observed};
use crate::plan::CaseJob;
use crate::report::{CaseResult, CaseStatus};
use crate::EvalError;
use goondan_config::Bundle;
use goondan_host::lock::{self, Claim};
use goondan_host::{HostMode, HostSettings, PackageInstaller, Project};
use goondan_ipc::protocol::{Answer, AnswerOutcome};
use goondan_orchestrator::ingress::CLI_EVENT;
use goondan_orchestrator::{Ingress, OrchestratorHandle};
use goondan_store::StateRoot;
use goondan_types::ConnectorEvent;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a timed-out case waits for its cancelled Turns to end before
/// its swarm is stopped anyway.
const CANCEL_SETTLE: Duration = Duration::from_secs(5);
/// Who cancels a timed-out case's Turns, as their logs record it.
const CANCELLED_BY: &str = "eval";
/// The failure of a case that outlived its time limit.
const TIMEOUT: &str = "timeout";

/// What every case of a run shares.
#[derive(Clone)]
pub struct CaseEnv {
    /// The loaded bundle.
    pub bundle: Arc<Bundle>,
    /// What `--config` named (a folder or one file).
    pub config: PathBuf,
    /// `--env-file`, absolute.
    pub env_file: Option<PathBuf>,
    /// The executable agent processes run (`gdn`).
    pub program: PathBuf,
    /// Installs packages, as `gdn run` does.
    pub install_packages: PackageInstaller,
}

/// Runs `job` with `state_dir` (fresh, owned by this case) as its System
/// Root. Never fails: what went wrong is in the result.
pub async fn run_case(job: &CaseJob, env: &CaseEnv, state_dir: PathBuf) -> CaseResult {
    let started = Instant::now();
    let mut result = CaseResult {
        eval: job.eval.clone(),
        name: job.case.name.clone(),
        model: job.model.clone(),
        repeat: job.repeat,
        status: CaseStatus::Passed,
        passed: false,
        score: None,
        threshold: job.threshold,
        failures: Vec::new(),
        deductions: Vec::new(),
        answer: None,
        steps: 0,
        input_tokens: 0,
        output_tokens: 0,
        cost_usd: 0.0,
        latency_ms: 0,
        turn_ms: 0,
        wall_ms: 0,
        started_ms: 0,
        agent: job.agent.clone().unwrap_or_default(),
        instance_key: job.instance_key.clone(),
        state_root: Some(state_dir.display().to_string()),
        workspace_id: None,
        trace_id: None,
        timeout_ms: Some(millis(job.timeout)),
    };
    if let Err(error) = drive(job, env, &state_dir, &mut result).await {
        result.status = CaseStatus::Error;
        result
            .failures
            .push(Failure::new(error.code(), error.to_string()));
    }
    if result.status == CaseStatus::Passed && !result.failures.is_empty() {
        result.status = CaseStatus::Failed;
    }
    result.passed = result.status == CaseStatus::Passed;
    result.wall_ms = millis(started.elapsed());
    result
}

/// How the Turns of a case ended.
enum Turns {
    /// Every message was answered: `(message, answer)` in order.
    Answered(Vec<(String, String)>),
    /// A Turn failed, or the orchestrator refused a message.
    Failed(Failure),
    /// The time limit passed.
    TimedOut,
}

async fn drive(
    job: &CaseJob,
    env: &CaseEnv,
    state_dir: &Path,
    result: &mut CaseResult,
) -> Result<(), EvalError> {
    prepare_cassettes(job)?;
    let project = Project::select(
        (*env.bundle).clone(),
        job.swarm.as_deref(),
        StateRoot::new(state_dir),
    )
    .map_err(|diagnostic| EvalError::Host {
        code: diagnostic.code.clone(),
        message: diagnostic.message.clone(),
    })?;
    if result.agent.is_empty() {
        if let Some(swarm) = project.bundle.swarm(&project.swarm_name) {
            result.agent = swarm.entry_agent().name().to_string();
        }
    }
    let workspace = project.workspace();
    result.workspace_id = Some(workspace.workspace_id().to_string());
    let socket = lock::control_socket(&workspace).map_err(host_error)?;
    let claim = lock::claim(&workspace, &socket).await.map_err(host_error)?;
    if !matches!(claim, Claim::Won(_)) {
        return Err(EvalError::Host {
            code: "E_EVAL_STATE_SHARED".into(),
            message: format!("another swarm already runs in {}", state_dir.display()),
        });
    }
    let settings = HostSettings {
        config: env.config.clone(),
        env_file: env.env_file.clone(),
        record: job
            .record
            .as_ref()
            .map(|cassettes| cassettes.agents.clone()),
        use_model: job.model.clone(),
        replay: job
            .replay
            .as_ref()
            .map(|cassettes| cassettes.agents.clone()),
        watch: false,
        mode: HostMode::Single,
        program: env.program.clone(),
        install_packages: Arc::clone(&env.install_packages),
        // Nothing reloads during a case: there is nothing to tell.
        notices: Arc::new(|_| {}),
    };
    let swarm = goondan_host::start(project, settings, claim, socket)
        .await
        .map_err(host_error)?;
    let handle = swarm.handle().clone();
    let turns_started = Instant::now();
    let deadline = tokio::time::Instant::from_std(turns_started) + job.timeout;
    let turns = match tokio::time::timeout_at(deadline, converse(&handle, job, result)).await {
        Ok(turns) => turns,
        Err(_) => {
            cancel_everything(&handle).await;
            Turns::TimedOut
        }
    };
    result.latency_ms = millis(turns_started.elapsed());
    swarm.stop(true).await;
    let observed = observe(&workspace, (&result.agent, &job.instance_key))?;
    record_usage(result, &observed);
    let exchange = match turns {
        Turns::TimedOut => {
            result.status = CaseStatus::TimedOut;
            result.failures.push(Failure::new(
                TIMEOUT,
                format!(
                    "the Turns outlived the case's time limit of {} s and were stopped",
                    job.timeout.as_secs_f64()
                ),
            ));
            return Ok(());
        }
        Turns::Failed(failure) => {
            result.status = CaseStatus::Error;
            result.failures.push(failure);
            return Ok(());
        }
        Turns::Answered(exchange) => exchange,
    };
    let answer = exchange
        .last()
        .map(|(_, answer)| answer.as_str())
        .unwrap_or_default();
    let evidence = Evidence {
        answer,
        observed: &observed,
        latency: Duration::from_millis(result.latency_ms),
    };
    result.failures.extend(
        job.case
            .assertions
            .iter()
            .filter_map(|assertion| check(assertion, &evidence)),
    );
    if job.judged() {
        let judged = tokio::time::timeout_at(deadline, judge::judge(&env.bundle, job, &exchange));
        let Ok(verdict) = judged.await else {
            result.status = CaseStatus::TimedOut;
            result.failures.push(Failure::new(
                TIMEOUT,
                format!(
                    "the judge (Model/{}) did not answer within the case's time limit of {} s",
                    job.judge.as_deref().unwrap_or_default(),
                    job.timeout.as_secs_f64()
                ),
            ));
            return Ok(());
        };
        let verdict = verdict?;
        if verdict.score < job.threshold {
            result.failures.push(Failure::new(
                "threshold",
                format!(
                    "the judge scored {} (threshold {})",
                    verdict.score, job.threshold
                ),
            ));
        }
        result.score = Some(verdict.score);
        result.deductions = verdict.deductions;
    }
    Ok(())
}

/// Sends the case's messages in order, each after the previous answer.
async fn converse(handle: &OrchestratorHandle, job: &CaseJob, result: &mut CaseResult) -> Turns {
    let mut exchange = Vec::new();
    for message in job.case.messages() {
        let mut event = ConnectorEvent::text(CLI_EVENT, message.clone());
        event.instance_key = Some(job.instance_key.clone());
        let ingress = Ingress::cli_event(event, job.agent.clone());
        let pending = match handle.enqueue(ingress, None).await {
            Ok(pending) => pending,
            Err(error) => return Turns::Failed(Failure::new(error.code(), error.to_string())),
        };
        let answer = match pending.answer().await {
            Ok(answer) => answer,
            Err(error) => return Turns::Failed(Failure::new(error.code(), error.to_string())),
        };
        result.trace_id = answer.trace_id.clone();
        let text = match Answer::from_event(&answer).map(|answer| answer.outcome) {
            Some(AnswerOutcome::Failed(failure)) => {
                return Turns::Failed(Failure::new(
                    &failure.code,
                    format!("the Turn failed: {}", failure.message),
                ))
            }
            Some(AnswerOutcome::Ok { text, .. }) => text.unwrap_or_default(),
            None => answer.input.clone().unwrap_or_default(),
        };
        result.answer = Some(text.clone());
        exchange.push((message, text));
    }
    Turns::Answered(exchange)
}

/// Cancels the running Turn of every instance of a timed-out case.
async fn cancel_everything(handle: &OrchestratorHandle) {
    let Ok(instances) = handle.list().await else {
        return;
    };
    for instance in instances {
        // An instance with no Turn running answers E_NO_TURN_RUNNING:
        // nothing to do for it.
        let _ = handle
            .cancel_running(instance.key, CANCELLED_BY.into(), CANCEL_SETTLE)
            .await;
    }
}

/// A recording starts empty (the recorder appends); a replay needs its
/// cassettes.
fn prepare_cassettes(job: &CaseJob) -> Result<(), EvalError> {
    if let Some(cassettes) = &job.replay {
        let mut needed = vec![&cassettes.agents];
        if job.judged() {
            needed.push(&cassettes.judge);
        }
        for path in needed {
            if !path.is_file() {
                return Err(EvalError::CassetteMissing {
                    case: job.label(),
                    path: path.display().to_string(),
                });
            }
        }
    }
    if let Some(cassettes) = &job.record {
        for path in [&cassettes.agents, &cassettes.judge] {
            match std::fs::remove_file(path) {
                Ok(()) => {}
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => {
                    return Err(EvalError::Io {
                        what: format!("clearing {}", path.display()),
                        source: error,
                    })
                }
            }
        }
    }
    Ok(())
}

fn record_usage(result: &mut CaseResult, observed: &Observed) {
    result.steps = observed.steps;
    result.input_tokens = observed.input_tokens;
    result.output_tokens = observed.output_tokens;
    result.cost_usd = observed.cost_usd;
    result.turn_ms = observed.turn_ms;
}

fn host_error(error: goondan_host::HostError) -> EvalError {
    EvalError::Host {
        code: error.code().to_string(),
        message: error.to_string(),
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
