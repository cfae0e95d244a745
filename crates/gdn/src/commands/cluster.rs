//! `gdn cluster status|deploy` and the `--cluster` forms of `gdn run
//! --input`, `gdn instance list|export|cancel|history|fork|rewind` and
//! `gdn logs`: a person's commands against a swarm that runs on several
//! hosts (docs/cluster.md, docs/operator-control.md). `gdn
//! approvals|approve|deny --cluster` share its reads
//! (`commands/approvals.rs`). What they do is `goondan_host::cluster::
//! client` and `goondan_cluster`; this module parses, calls and renders.

use crate::answers::{self, report};
use crate::cli::{ClusterArgs, ClusterCommand, GlobalArgs};
use crate::exit::Outcome;
use crate::render::cluster_error as print_cluster_error;
use goondan_cluster::subject::InstanceAddress;
use goondan_cluster::{Cluster, ClusterError, ClusterUrls};
use goondan_host::cluster::client::{self, connect_as_client, Deployed, HostRollout, RolloutWait};
use goondan_host::cluster::{workspace_of, ClusterMode};
use goondan_host::{HostError, Project};
use goondan_orchestrator::{Ingress, SwarmInfo};
use goondan_store::ExtensionStateSource;
use std::time::Duration;

/// `gdn run --cluster URLS --input TEXT`: routes the input as the swarm's
/// rules say, sends it to its instance's inbox and prints the answer. No
/// host needs to run here.
pub(crate) async fn ask(
    mode: &ClusterMode,
    info: &SwarmInfo,
    ingress: Ingress,
    global: &GlobalArgs,
) -> Outcome {
    match client::ask(mode, info, ingress).await {
        Ok((key, reply)) => report(
            answers::from_cluster_reply(reply),
            Some(&key.instance_key),
            global.json,
        ),
        Err(HostError::Orchestrator(error)) => report(Err(error.to_body()), None, global.json),
        Err(error) => crate::render::host_error(&error, crate::project::format(global)),
    }
}

/// `gdn cluster ...`.
pub(crate) fn command(global: &GlobalArgs, args: &ClusterArgs) -> anyhow::Result<Outcome> {
    match &args.command {
        ClusterCommand::Status { cluster } => status(global, cluster),
        ClusterCommand::Deploy { cluster, wait } => {
            deploy(global, cluster, Duration::from_secs(*wait))
        }
    }
}

/// `gdn cluster deploy`: makes this folder's bundle the one every host
/// runs, then waits up to `wait` until every live host runs it.
fn deploy(global: &GlobalArgs, urls: &str, wait: Duration) -> anyhow::Result<Outcome> {
    let project = match crate::project::load(global, None, None)? {
        Ok(project) => project,
        Err(outcome) => return Ok(outcome),
    };
    crate::runtime::current_thread()?.block_on(async {
        let (cluster, deployed) = match client::deploy(urls, &project).await {
            Ok(deployed) => deployed,
            Err(error) => return Ok(crate::render::host_error(&error, crate::project::format(global))),
        };
        match &deployed {
            Deployed::Activated { digest, size } => println!(
                "deployed bundle {digest} ({} KiB) for Swarm/{}",
                size.div_ceil(1024),
                project.swarm_name
            ),
            Deployed::AlreadyActive { digest } => println!("bundle {digest} is already active"),
        }
        if wait.is_zero() {
            return Ok(Outcome::Success);
        }
        let quiet = global.quiet;
        let waited = client::wait_for_hosts(&cluster, deployed.digest(), wait, |host, state| {
            if quiet {
                return;
            }
            match state {
                HostRollout::Runs => println!("  {host}: runs it"),
                HostRollout::Refused { problem } => println!("  {host}: refused it: {problem}"),
            }
        })
        .await;
        Ok(match waited {
            Err(error) => print_cluster_error(&error),
            Ok(RolloutWait::Settled { hosts, refused }) => {
                if hosts == 0 {
                    println!("no host is running; each host that starts runs this bundle");
                }
                if refused > 0 {
                    crate::render::error(
                        "E_CLUSTER_BUNDLE",
                        &format!("{refused} host(s) refused the bundle and run on with their previous one"),
                        Some("fix what they report (`gdn cluster status` shows it) and deploy again"),
                    );
                    Outcome::Failure
                } else {
                    Outcome::Success
                }
            }
            Ok(RolloutWait::Behind(behind)) => {
                crate::render::error(
                    "E_CLUSTER_TIMEOUT",
                    &format!(
                        "after {}s, {} host(s) do not run the bundle yet: {}",
                        wait.as_secs(),
                        behind.len(),
                        behind.join(", ")
                    ),
                    Some("`gdn cluster status` shows what each host runs; a host applies a rollout once its running Turns allow the restart"),
                );
                Outcome::Failure
            }
        })
    })
}

/// Connects as a person's command does and runs `read`; a cluster error
/// is printed and becomes the outcome.
pub(crate) fn read_cluster<T>(
    urls: &str,
    read: impl AsyncFnOnce(&Cluster) -> Result<T, ClusterError>,
) -> anyhow::Result<Result<T, Outcome>> {
    let read = crate::runtime::current_thread()?.block_on(async {
        let cluster = connect_as_client(&ClusterUrls::parse(urls)?).await?;
        read(&cluster).await
    });
    Ok(read.map_err(|error| print_cluster_error(&error)))
}

/// `gdn instance export KEY --cluster URLS --to DIR`.
pub(crate) fn export(
    global: &GlobalArgs,
    key: &str,
    urls: &str,
    to: &std::path::Path,
) -> anyhow::Result<Outcome> {
    let (project, workspace_id) = match cluster_workspace(global)? {
        Ok(found) => found,
        Err(outcome) => return Ok(outcome),
    };
    let non_empty = std::fs::read_dir(to)
        .map(|mut entries| entries.next().is_some())
        .unwrap_or(false);
    if non_empty {
        crate::render::error(
            "E_EXPORT_TARGET_NOT_EMPTY",
            &format!("{} exists and is not empty", to.display()),
            Some("export into a new or empty folder"),
        );
        return Ok(Outcome::BadArguments);
    }
    let (agent, instance_key) = crate::project::split_key(key);
    let agent = match agent {
        Some(agent) => agent,
        None => goondan_host::project::swarm_info(&project)?.entry_agent,
    };
    let address = InstanceAddress::new(&workspace_id, &agent, &instance_key);
    if let Err(outcome) = read_cluster(urls, async |cluster| {
        goondan_cluster::export(cluster, &address, to).await
    })? {
        return Ok(outcome);
    }
    println!("exported {agent}:{instance_key} to {}", to.display());
    Ok(Outcome::Success)
}

/// `gdn cluster status`: hosts, and each host's shards with their backlog.
fn status(global: &GlobalArgs, urls: &str) -> anyhow::Result<Outcome> {
    let status = match read_cluster(urls, goondan_cluster::membership::cluster_status)? {
        Ok(status) => status,
        Err(outcome) => return Ok(outcome),
    };
    if global.json {
        println!("{}", serde_json::to_string(&status)?);
        return Ok(Outcome::Success);
    }
    match &status.active_bundle {
        Some(active) => println!(
            "bundle {} ({} KiB, made active by {} at {})",
            active.digest,
            active.size.div_ceil(1024),
            active.deployed_by,
            active.deployed_at
        ),
        None => println!("no bundle active yet"),
    }
    println!("{} host(s)", status.hosts.len());
    for host in &status.hosts {
        let shards: Vec<&goondan_cluster::membership::ShardStatus> = status
            .shards
            .iter()
            .filter(|shard| {
                shard
                    .lease
                    .as_ref()
                    .is_some_and(|lease| lease.host == host.host)
            })
            .collect();
        let pending: u64 = shards.iter().filter_map(|shard| shard.pending).sum();
        let in_flight: usize = shards.iter().filter_map(|shard| shard.ack_pending).sum();
        let bundle = host
            .bundle
            .as_deref()
            .map_or("-", goondan_cluster::bundle::short_digest);
        let behind = match (&status.active_bundle, &host.bundle) {
            (Some(active), Some(runs)) if &active.digest != runs => " (not the active bundle)",
            _ => "",
        };
        println!(
            "  {}  shards={} pending={pending} inFlight={in_flight} bundle={bundle}{behind} version={} started={}",
            host.host,
            shards.len(),
            host.version,
            host.started_at
        );
        if let Some(refused) = &host.bundle_refused {
            println!(
                "    refused bundle {}: {}",
                goondan_cluster::bundle::short_digest(&refused.digest),
                refused.problem
            );
        }
    }
    let unowned = status
        .shards
        .iter()
        .filter(|shard| shard.lease.is_none())
        .count();
    if unowned > 0 {
        println!("  {unowned} shard(s) without an owner");
    }
    Ok(Outcome::Success)
}

/// The project of the current folder (or `--config`) and the cluster
/// workspace it names, for commands that read a cluster.
pub(crate) fn cluster_workspace(
    global: &GlobalArgs,
) -> anyhow::Result<Result<(Project, String), Outcome>> {
    Ok(crate::project::load(global, None, None)?.map(|project| {
        let workspace_id = workspace_of(&project);
        (project, workspace_id)
    }))
}

/// `gdn instance cancel KEY --cluster URLS`: the cancel goes to the host
/// that owns each instance `KEY` names (`agent:instanceKey`, or that key of
/// every agent of the swarm), all at once, and the Turns they stopped are
/// reported together.
pub(crate) fn cancel(global: &GlobalArgs, urls: &str, key: &str) -> anyhow::Result<Outcome> {
    use goondan_host::cluster::operator::{OperatorRequest, OperatorResponse};
    let started = std::time::Instant::now();
    let (project, workspace_id) = match cluster_workspace(global)? {
        Ok(found) => found,
        Err(outcome) => return Ok(outcome),
    };
    let swarm_agents = goondan_host::project::swarm_info(&project)?.agents;
    // `agent:instanceKey` names one instance when the agent is the
    // swarm's; anything else is an instance key (which may hold a colon).
    let named: Vec<(String, String)> = match crate::project::split_key(key) {
        (Some(agent), instance_key) if swarm_agents.contains(&agent) => {
            vec![(agent, instance_key)]
        }
        _ => swarm_agents
            .into_iter()
            .map(|agent| (agent, key.to_string()))
            .collect(),
    };
    let requests: Vec<OperatorRequest> = named
        .into_iter()
        .map(|(agent, instance_key)| OperatorRequest::Cancel {
            agent,
            instance_key,
            by: super::operator::BY.to_string(),
        })
        .collect();
    let answers = crate::runtime::current_thread()?.block_on(async {
        let cluster = connect_as_client(&ClusterUrls::parse(urls)?).await?;
        let asked = requests
            .iter()
            .map(|request| client::ask_operator(&cluster, &workspace_id, request));
        Ok::<_, HostError>(futures_util::future::join_all(asked).await)
    });
    let answers = match answers {
        Ok(answers) => answers,
        Err(error) => {
            return Ok(crate::render::host_error(
                &error,
                crate::project::format(global),
            ))
        }
    };
    let mut outcome = goondan_orchestrator::orchestrator::CancelOutcome {
        cancelled: Vec::new(),
        ended: true,
    };
    for answer in answers {
        match answer {
            Ok(OperatorResponse::Cancelled(one)) => {
                outcome.cancelled.extend(one.cancelled);
                outcome.ended &= one.ended;
            }
            // An agent with no Turn of that key running.
            Ok(OperatorResponse::Failed(refused)) if refused.code == "E_NO_TURN_RUNNING" => {}
            Ok(OperatorResponse::Failed(refused)) => {
                return Ok(crate::answers::print_refusal(&refused))
            }
            Ok(other) => anyhow::bail!("the instance's owner answered a cancel with {other:?}"),
            Err(error) => {
                return Ok(crate::render::host_error(
                    &error,
                    crate::project::format(global),
                ))
            }
        }
    }
    if outcome.cancelled.is_empty() {
        crate::render::error(
            "E_NO_TURN_RUNNING",
            &format_args!(
                "no Turn of `{key}` runs on any host of the cluster; nothing was cancelled"
            ),
            Some("`gdn instance list --cluster` shows the cluster's instances"),
        );
        return Ok(Outcome::Failure);
    }
    Ok(super::operator::report_cancel(global, &outcome, started))
}

/// The one instance of the cluster `key` names: `agent:instanceKey` of
/// one of the swarm's agents, or an instance key only one agent has (as
/// the cluster's directory lists them); an outcome when there is not
/// exactly one (printed already).
async fn resolve_instance(
    cluster: &Cluster,
    project: &Project,
    workspace_id: &str,
    key: &str,
) -> Result<Result<InstanceAddress, Outcome>, HostError> {
    let agents = goondan_host::project::swarm_info(project)?.agents;
    if let (Some(agent), instance_key) = crate::project::split_key(key) {
        if agents.contains(&agent) {
            return Ok(Ok(InstanceAddress::new(
                workspace_id,
                &agent,
                &instance_key,
            )));
        }
    }
    let mut found: Vec<InstanceAddress> =
        goondan_cluster::directory::instances(cluster, workspace_id)
            .await?
            .into_iter()
            .filter(|record| record.instance_key == key)
            .map(|record| {
                InstanceAddress::new(workspace_id, &record.agent_name, &record.instance_key)
            })
            .collect();
    match found.len() {
        1 => Ok(Ok(found.remove(0))),
        0 => {
            crate::render::error(
                "E_INSTANCE_NOT_FOUND",
                &format_args!("no instance of the cluster matches `{key}`"),
                Some("list them with `gdn instance list --cluster URLS`"),
            );
            Ok(Err(Outcome::Failure))
        }
        _ => {
            let names: Vec<String> = found.iter().map(InstanceAddress::routing_key).collect();
            crate::render::error(
                "E_INSTANCE_AMBIGUOUS",
                &format_args!(
                    "`{key}` names {} instances: {}",
                    names.len(),
                    names.join(", ")
                ),
                Some("name one as agent:instanceKey"),
            );
            Ok(Err(Outcome::Failure))
        }
    }
}

/// Connects, finds the instance `key` names and runs `act` on it; a
/// failure to connect or to find it is printed and becomes the outcome.
fn on_instance<T>(
    global: &GlobalArgs,
    urls: &str,
    key: &str,
    act: impl AsyncFnOnce(&Cluster, &str, InstanceAddress) -> Result<T, HostError>,
) -> anyhow::Result<Result<T, Outcome>> {
    let (project, workspace_id) = match cluster_workspace(global)? {
        Ok(found) => found,
        Err(outcome) => return Ok(Err(outcome)),
    };
    let done = crate::runtime::current_thread()?.block_on(async {
        let cluster = connect_as_client(&ClusterUrls::parse(urls)?).await?;
        match resolve_instance(&cluster, &project, &workspace_id, key).await? {
            Ok(address) => act(&cluster, &workspace_id, address).await.map(Ok),
            Err(outcome) => Ok(Err(outcome)),
        }
    });
    Ok(done.unwrap_or_else(|error| {
        Err(crate::render::host_error(
            &error,
            crate::project::format(global),
        ))
    }))
}

/// `gdn instance history KEY --cluster URLS`: the Turns of the instance's
/// committed conversation as its log in the cluster holds it, read
/// without its owner.
pub(crate) fn history(global: &GlobalArgs, urls: &str, key: &str) -> anyhow::Result<Outcome> {
    let read = on_instance(global, urls, key, async |cluster, _, address| {
        let turns = goondan_cluster::history::turns(cluster, &address).await?;
        Ok((address, turns))
    })?;
    let (address, turns) = match read {
        Ok(read) => read,
        Err(outcome) => return Ok(outcome),
    };
    if global.json {
        let rows: Vec<serde_json::Value> = turns
            .iter()
            .map(|turn| {
                serde_json::json!({
                    "index": turn.index,
                    "turnId": turn.start.turn_id,
                    "eventId": turn.start.event_id,
                    "createdAt": turn.start.created_at,
                    "input": turn.start.input,
                    "nMessages": turn.n_messages,
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({
                "agentName": address.agent_name,
                "instanceKey": address.instance_key,
                "turns": rows,
            })
        );
        return Ok(Outcome::Success);
    }
    println!("{}: {} Turn(s)", address.routing_key(), turns.len());
    if !turns.is_empty() {
        println!(
            "{:>4}  {:<29} {:<24} {:>8}  INPUT",
            "#", "TURN ID", "TIME", "MESSAGES"
        );
    }
    for turn in &turns {
        println!(
            "{:>4}  {:<29} {:<24} {:>8}  {}",
            turn.index,
            turn.start.turn_id.as_deref().unwrap_or("-"),
            turn.start.created_at,
            turn.n_messages,
            turn.start.input
        );
    }
    Ok(Outcome::Success)
}

/// The warning of a fork or a rewind in a cluster that could not restore
/// the extension state a Turn ended with.
fn warn_if_compacted(source: ExtensionStateSource, turn_index: usize, who: &str) {
    if source.is_exact() {
        return;
    }
    crate::render::warning(
        "W_EXTENSION_STATE_CURRENT",
        &format_args!(
            "the log no longer holds the commit of Turn {turn_index} (a snapshot took it), so the extension state it left is unknown; {who} got the current extension state"
        ),
        Some("export the instance with `gdn instance export --cluster` to check an extension's state"),
    );
}

/// Cancels the running Turn of `address` through its owner, for `--cancel`;
/// nothing running is fine. The Turns cancelled are said on stderr; an
/// outcome when the cancel failed (printed already).
async fn cancel_first(
    cluster: &Cluster,
    workspace_id: &str,
    address: &InstanceAddress,
) -> Result<Result<(), Outcome>, HostError> {
    use goondan_host::cluster::operator::{OperatorRequest, OperatorResponse};
    let request = OperatorRequest::Cancel {
        agent: address.agent_name.clone(),
        instance_key: address.instance_key.clone(),
        by: super::operator::BY.to_string(),
    };
    match client::ask_operator(cluster, workspace_id, &request).await? {
        OperatorResponse::Cancelled(outcome) if outcome.ended => {
            for turn in outcome.cancelled {
                eprintln!("cancelled the running Turn of {} first", turn.key);
            }
            Ok(Ok(()))
        }
        OperatorResponse::Cancelled(_) => {
            let refused = goondan_types::ErrorBody::new(
                "E_TURN_RUNNING",
                format!("the cancelled Turn of {} had not ended when the wait ran out; nothing was forked", address.routing_key()),
            )
            .with_suggestion("try again in a moment");
            Ok(Err(crate::answers::print_refusal(&refused)))
        }
        OperatorResponse::Failed(refused) if refused.code == "E_NO_TURN_RUNNING" => Ok(Ok(())),
        OperatorResponse::Failed(refused) => Ok(Err(crate::answers::print_refusal(&refused))),
        other => Err(ClusterError::Corrupt {
            what: format!("the answer of the owner of {}", address.routing_key()),
            reason: format!("a cancel answered with {other:?}"),
        }
        .into()),
    }
}

/// `gdn instance fork KEY --at TURN [--as NEWKEY] [--cancel] --cluster
/// URLS`: the new instance's log is written from here, from the
/// original's committed conversation, without its owner (a Turn it runs
/// is neither cut nor seen); `--cancel` goes to its owner first.
pub(crate) fn fork(
    global: &GlobalArgs,
    urls: &str,
    asked: &super::operator::Rewrite<'_>,
    new_key: Option<&str>,
) -> anyhow::Result<Outcome> {
    let forked = on_instance(
        global,
        urls,
        asked.key,
        async |cluster, workspace_id, from| {
            if asked.cancel {
                if let Err(outcome) = cancel_first(cluster, workspace_id, &from).await? {
                    return Ok(Err(outcome));
                }
            }
            let new_key = new_key.map_or_else(
                || {
                    format!(
                        "{}-fork-{}",
                        from.instance_key,
                        goondan_types::trace::random_hex(3)
                    )
                },
                str::to_string,
            );
            let to = InstanceAddress::new(workspace_id, &from.agent_name, &new_key);
            let claimant = format!(
                "gdn instance fork on {}",
                goondan_host::cluster::host_name().unwrap_or_else(|| "an unnamed machine".into())
            );
            let turn = goondan_store::TurnRef::parse(asked.turn);
            let forked = goondan_cluster::history::fork(
                cluster,
                &from,
                &turn,
                &to,
                super::operator::BY,
                &claimant,
            )
            .await?;
            Ok(Ok((from, to, forked)))
        },
    )?;
    let (from, to, forked) = match forked.and_then(|inner| inner) {
        Ok(forked) => forked,
        Err(outcome) => return Ok(outcome),
    };
    if global.json {
        let mut report = serde_json::to_value(&forked)?;
        report["agentName"] = to.agent_name.clone().into();
        report["instanceKey"] = to.instance_key.clone().into();
        report["forkedFrom"] = from.instance_key.clone().into();
        println!("{report}");
    } else {
        println!(
            "forked {} at Turn {} ({}) into {}: {} message(s)",
            from.routing_key(),
            forked.at.turn_index,
            forked.at.turn_id.as_deref().unwrap_or("id unknown"),
            to.routing_key(),
            forked.n_messages
        );
        println!(
            "{}",
            super::operator::state_line(forked.extension_state, forked.at.turn_index)
        );
    }
    warn_if_compacted(forked.extension_state, forked.at.turn_index, "the fork");
    Ok(Outcome::Success)
}

/// `gdn instance rewind KEY --to TURN [--cancel] --cluster URLS`: the
/// owner of the instance holds it (refusing while a Turn runs, unless
/// `--cancel`), rewrites its log, and lets go of it.
pub(crate) fn rewind(
    global: &GlobalArgs,
    urls: &str,
    asked: &super::operator::Rewrite<'_>,
) -> anyhow::Result<Outcome> {
    use goondan_host::cluster::operator::{OperatorRequest, OperatorResponse};
    let answered = on_instance(
        global,
        urls,
        asked.key,
        async |cluster, workspace_id, address| {
            let request = OperatorRequest::Rewind {
                agent: address.agent_name.clone(),
                instance_key: address.instance_key.clone(),
                to: asked.turn.to_string(),
                cancel: asked.cancel,
                by: super::operator::BY.to_string(),
            };
            let answer = client::ask_operator(cluster, workspace_id, &request).await?;
            Ok((address, answer))
        },
    )?;
    let (address, answer) = match answered {
        Ok(answered) => answered,
        Err(outcome) => return Ok(outcome),
    };
    let (rewound, cancelled) = match answer {
        OperatorResponse::Rewound { rewound, cancelled } => (rewound, cancelled),
        OperatorResponse::Failed(refused) => return Ok(crate::answers::print_refusal(&refused)),
        other => anyhow::bail!("the instance's owner answered a rewind with {other:?}"),
    };
    for turn in &cancelled {
        eprintln!("cancelled the running Turn of {} first", turn.key);
    }
    let key = address.routing_key();
    if global.json {
        let mut report = serde_json::to_value(&rewound)?;
        report["agentName"] = address.agent_name.clone().into();
        report["instanceKey"] = address.instance_key.clone().into();
        println!("{report}");
    } else {
        match &rewound.archive {
            Some(archive) => println!(
                "rewound {key} to Turn {} ({}): {} Turn(s), {} message(s){} archived in the cluster as {}",
                rewound.to.turn_index,
                rewound.to.turn_id.as_deref().unwrap_or("id unknown"),
                archive.n_turns,
                archive.n_messages,
                if archive.n_pending_events > 0 {
                    format!(" and {} pending event(s)", archive.n_pending_events)
                } else {
                    String::new()
                },
                archive.object
            ),
            None => println!(
                "{key} already ends with Turn {}; nothing to rewind",
                rewound.to.turn_index
            ),
        }
        if rewound.archive.is_some() {
            println!(
                "{}",
                super::operator::state_line(rewound.extension_state, rewound.to.turn_index)
            );
        }
    }
    if rewound.archive.is_some() {
        warn_if_compacted(
            rewound.extension_state,
            rewound.to.turn_index,
            "the instance",
        );
    }
    Ok(Outcome::Success)
}

/// `gdn instance list --cluster URLS`: the instances some host claimed,
/// newest claim first, with whether that host is still live.
pub(crate) fn list_instances(
    global: &GlobalArgs,
    urls: &str,
    agent: Option<&str>,
    limit: Option<usize>,
) -> anyhow::Result<Outcome> {
    let (_, workspace_id) = match cluster_workspace(global)? {
        Ok(found) => found,
        Err(outcome) => return Ok(outcome),
    };
    let read = read_cluster(urls, async |cluster| {
        let instances = goondan_cluster::directory::instances(cluster, &workspace_id).await?;
        let status = goondan_cluster::membership::cluster_status(cluster).await?;
        Ok((instances, status.hosts))
    })?;
    let (mut instances, hosts) = match read {
        Ok(read) => read,
        Err(outcome) => return Ok(outcome),
    };
    instances.retain(|record| agent.is_none_or(|agent| record.agent_name == agent));
    instances.sort_by(|a, b| b.claimed_at.cmp(&a.claimed_at));
    let total = instances.len();
    instances.truncate(limit.unwrap_or(usize::MAX));
    let live = |host: &str| hosts.iter().any(|info| info.host == host);
    if global.json {
        let rows: Vec<serde_json::Value> = instances
            .iter()
            .map(|record| {
                serde_json::json!({
                    "agentName": record.agent_name,
                    "instanceKey": record.instance_key,
                    "host": record.host,
                    "hostLive": live(&record.host),
                    "claimedAt": record.claimed_at,
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({ "instances": rows, "hidden": total - instances.len() })
        );
        return Ok(Outcome::Success);
    }
    println!(
        "{:<24} {:<16} {:<24} {:<6} CLAIMED",
        "INSTANCE KEY", "AGENT", "HOST", "LIVE"
    );
    for record in &instances {
        println!(
            "{:<24} {:<16} {:<24} {:<6} {}",
            record.instance_key,
            record.agent_name,
            record.host,
            if live(&record.host) { "yes" } else { "no" },
            record.claimed_at
        );
    }
    if total > instances.len() {
        println!("({} more; --all lists every one)", total - instances.len());
    }
    Ok(Outcome::Success)
}

/// `gdn logs --cluster URLS`: the runtime events every host's agents
/// published, filtered and in time order, as JSON lines.
pub(crate) fn logs(
    global: &GlobalArgs,
    urls: &str,
    filter: &goondan_store::RuntimeEventFilter,
) -> anyhow::Result<Outcome> {
    let (_, workspace_id) = match cluster_workspace(global)? {
        Ok(found) => found,
        Err(outcome) => return Ok(outcome),
    };
    let read = read_cluster(urls, async |cluster| {
        goondan_cluster::directory::observations(cluster, &workspace_id).await
    })?;
    let lines = match read {
        Ok(lines) => lines,
        Err(outcome) => return Ok(outcome),
    };
    let mut events: Vec<(String, String)> = lines
        .into_iter()
        .filter_map(|line| {
            let event: goondan_types::RuntimeEvent = serde_json::from_slice(&line).ok()?;
            filter.matches(&event).then(|| {
                (
                    event.base().timestamp.clone(),
                    String::from_utf8_lossy(&line).into_owned(),
                )
            })
        })
        .collect();
    events.sort_by(|a, b| a.0.cmp(&b.0));
    let skip = events
        .len()
        .saturating_sub(filter.last.unwrap_or(usize::MAX));
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    for (_, line) in &events[skip..] {
        writeln!(out, "{line}")?;
    }
    out.flush()?;
    Ok(Outcome::Success)
}
