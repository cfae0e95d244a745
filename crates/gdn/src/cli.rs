//! The command line as typed: clap structs only, validated without IO.
//! Each subcommand is one variant of [`Command`] with its own `Args`
//! struct; adding a subcommand means adding a variant here and a module
//! under `commands/`.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

/// Goondan: run declarative swarms of LLM agents.
#[derive(Debug, Parser)]
// `about` comes from the doc comment above, not from the crate's
// description, which speaks of the hidden modes a user never types.
#[command(name = "gdn", version, propagate_version = true)]
pub(crate) struct Cli {
    /// Options every command accepts, before or after the subcommand.
    #[command(flatten)]
    pub(crate) global: GlobalArgs,
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

impl Cli {
    /// Parses the process arguments. The processes an orchestrator starts
    /// (`gdn agent`, `gdn connector`, and `gdn strip-types` for a plugin
    /// host) are parsed by [`ChildCli`], which builds three subcommands
    /// instead of the whole tree: every agent start pays for parsing, and
    /// the pages of code and data it touches stay in the agent's memory.
    pub(crate) fn try_parse_args() -> Result<Cli, clap::Error> {
        Cli::parse_arguments(std::env::args_os().collect())
    }

    fn parse_arguments(arguments: Vec<std::ffi::OsString>) -> Result<Cli, clap::Error> {
        let child_mode = arguments
            .get(1)
            .and_then(|mode| mode.to_str())
            .is_some_and(|mode| matches!(mode, "agent" | "connector" | "strip-types"));
        if child_mode {
            let child = ChildCli::try_parse_from(arguments)?;
            return Ok(Cli {
                global: child.global,
                command: match child.command {
                    ChildCommand::Agent(args) => Command::Agent(args),
                    ChildCommand::Connector(args) => Command::Connector(args),
                    ChildCommand::StripTypes(args) => Command::StripTypes(args),
                },
            });
        }
        Cli::try_parse_from(arguments)
    }
}

/// The command line of a process an orchestrator or plugin host starts:
/// the hidden modes of [`Command`], with the same arguments.
#[derive(Debug, Parser)]
#[command(name = "gdn", version)]
struct ChildCli {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    command: ChildCommand,
}

#[derive(Debug, Subcommand)]
enum ChildCommand {
    Agent(AgentArgs),
    Connector(ConnectorArgs),
    #[command(name = "strip-types")]
    StripTypes(StripTypesArgs),
}

/// The global options of `cli.md` §1.3.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Global options")]
pub(crate) struct GlobalArgs {
    /// The bundle file or folder (default: the current folder).
    #[arg(short = 'c', long, global = true, value_name = "PATH")]
    pub(crate) config: Option<PathBuf>,
    /// The System Root holding instance state.
    #[arg(long, global = true, value_name = "PATH", env = "GOONDAN_STATE_ROOT")]
    pub(crate) state_root: Option<PathBuf>,
    /// Print machine-readable JSON.
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// Never color the output.
    #[arg(long = "no-color", global = true)]
    pub(crate) no_color: bool,
    /// Say more.
    #[arg(short, long, global = true, action = clap::ArgAction::Count, conflicts_with = "quiet")]
    pub(crate) verbose: u8,
    /// Say only what is wrong.
    #[arg(short, long, global = true)]
    pub(crate) quiet: bool,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Check a bundle: schema, references, files, naming.
    Validate(ValidateArgs),
    /// Start the orchestrator of a Swarm (or attach to the running one).
    Run(RunArgs),
    /// Re-read the bundle and gracefully restart the running swarm's agent
    /// and connector processes (with --agent, only that agent's, bundle
    /// unchanged).
    Restart(RestartArgs),
    /// Stop the running orchestrator gracefully (its agents finish their
    /// Turns within the grace period) and wait until it has exited.
    Stop(StopArgs),
    /// List, restart, delete, cancel, fork or rewind agent instances, or
    /// show their Turns.
    Instance(InstanceArgs),
    /// The tool calls and questions waiting for a person's decision.
    Approvals(ApprovalsArgs),
    /// Approve a waiting tool call (it runs once, with the arguments as
    /// asked or as given with --args).
    Approve(ApproveArgs),
    /// Deny a waiting tool call (the model is told why).
    Deny(DenyArgs),
    /// Show runtime events or a process log.
    Logs(LogsArgs),
    /// Show tokens and costs of model calls, by swarm, agent, instance or
    /// day.
    Usage(UsageArgs),
    /// A swarm spread over several hosts (`gdn run --cluster`): its hosts,
    /// shards and backlog.
    Cluster(ClusterArgs),
    /// Run the bundle's Eval cases as real swarms and report how well
    /// they did (or compare two stored runs).
    Eval(EvalArgs),
    /// Run one AgentProcess (spawned by the orchestrator; not for people).
    #[command(hide = true)]
    Agent(AgentArgs),
    /// Run one ConnectorProcess (spawned by the orchestrator; not for people).
    #[command(hide = true)]
    Connector(ConnectorArgs),
    /// Print a TypeScript file as JavaScript, types removed (run by the
    /// plugin host on Node without type stripping; not for people).
    #[command(hide = true, name = "strip-types")]
    StripTypes(StripTypesArgs),
    /// Create a new project from a template.
    Init(InitArgs),
    /// Check this machine and the current project: version, System Root,
    /// provider keys, script runtimes, bundle.
    Doctor(DoctorArgs),
    /// Model Context Protocol: serve the running swarm to MCP clients.
    Mcp(McpArgs),
    /// Serve the running swarm over A2A and an OpenAI-compatible API
    /// (starting it in the background when none runs).
    Serve(ServeArgs),
    /// Manage package dependencies and publish packages.
    Package(PackageArgs),
    /// Run a package registry.
    Registry(RegistryArgs),
    /// Open a web view of the swarms under the System Root:
    /// conversations, a live timeline, span trees, costs, call graphs
    /// (read-only unless --allow-actions).
    Studio(StudioArgs),
}

/// `gdn package`.
#[derive(Debug, Args)]
pub(crate) struct PackageArgs {
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: PackageCommand,
}

/// The registry a package command talks to.
#[derive(Debug, Args)]
pub(crate) struct RegistryFlag {
    /// The registry URL (default: the Package's spec.registry.url, then
    /// GOONDAN_REGISTRY, then `registry` in the System Root's config.json).
    #[arg(long, value_name = "URL")]
    pub(crate) registry: Option<String>,
}

/// The subcommands of `gdn package`.
#[derive(Debug, Subcommand)]
pub(crate) enum PackageCommand {
    /// Add a dependency to the Package and install it.
    Add {
        /// `@scope/name`, `@scope/name@1.2.0`, `@scope/name@^1` or
        /// `@scope/name@<dist-tag>`.
        reference: String,
        /// Depend on exactly the resolved version instead of `^version`.
        #[arg(short = 'E', long)]
        exact: bool,
        /// Accepted for the original's scripts; it changes nothing, since
        /// a Package has no devDependencies (a note says so).
        #[arg(short = 'D', long)]
        dev: bool,
        #[command(flatten)]
        registry: RegistryFlag,
    },
    /// Install the Package's dependencies (from goondan.lock.yaml when it
    /// still matches).
    Install {
        /// Refuse to change goondan.lock.yaml (for CI).
        #[arg(long)]
        frozen_lockfile: bool,
        #[command(flatten)]
        registry: RegistryFlag,
    },
    /// Resolve dependencies again (all, or one), ignoring the lockfile's
    /// choice for them.
    Update {
        /// Only this package.
        name: Option<String>,
        /// Re-lock a version whose integrity changed on the registry
        /// (refused otherwise: a published version should never change).
        #[arg(long)]
        accept_changed_integrity: bool,
        #[command(flatten)]
        registry: RegistryFlag,
    },
    /// Remove a dependency from the Package and the lockfile.
    Remove {
        /// The package name.
        name: String,
    },
    /// Validate, pack and upload this bundle as a package.
    Publish {
        /// The dist-tag to point at the new version.
        #[arg(long, default_value = "latest")]
        tag: String,
        /// Who may install it.
        #[arg(long, value_parser = ["public", "restricted"])]
        access: Option<String>,
        /// Check and pack, upload nothing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        registry: RegistryFlag,
    },
    /// Withdraw a published version (`name@version`), or the whole
    /// package (`name` with --force).
    Unpublish {
        /// `name@version`, or `name`.
        reference: String,
        /// Needed to remove every version.
        #[arg(short, long)]
        force: bool,
        #[command(flatten)]
        registry: RegistryFlag,
    },
    /// Mark a version deprecated (an empty message clears the mark).
    Deprecate {
        /// `name@version`.
        reference: String,
        /// Why, and what to use instead.
        message: String,
        #[command(flatten)]
        registry: RegistryFlag,
    },
    /// Store a registry token in the System Root's config.json (read from
    /// stdin; prefer `${VAR}` references or GOONDAN_REGISTRY_TOKEN).
    Login {
        #[command(flatten)]
        registry: RegistryFlag,
    },
    /// Forget the stored token of a registry.
    Logout {
        #[command(flatten)]
        registry: RegistryFlag,
    },
    /// Write this bundle's package tarball (`<name>-<version>.tgz`).
    Pack {
        /// The folder to write it to (default: the bundle folder).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// Show a package's versions, dist-tags and deprecations.
    Info {
        /// `@scope/name` (or `@scope/name@version` for one version).
        reference: String,
        #[command(flatten)]
        registry: RegistryFlag,
    },
    /// The installed packages under the System Root, or remove them all.
    Cache {
        /// What to do.
        #[command(subcommand)]
        command: PackageCacheCommand,
    },
}

/// `gdn package cache` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum PackageCacheCommand {
    /// List the installed packages and their size.
    Info,
    /// Remove every installed package (the next install downloads again).
    Clean,
}

/// `gdn registry`.
#[derive(Debug, Args)]
pub(crate) struct RegistryArgs {
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: RegistryCommand,
}

/// The subcommands of `gdn registry`.
#[derive(Debug, Subcommand)]
pub(crate) enum RegistryCommand {
    /// Serve a package registry from a folder.
    Serve(RegistryServeArgs),
}

/// `gdn registry serve`.
#[derive(Debug, Args)]
pub(crate) struct RegistryServeArgs {
    /// The folder holding the packages (created when missing).
    #[arg(long, value_name = "DIR")]
    pub(crate) dir: PathBuf,
    /// The address to listen on; loopback by default.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:4873")]
    pub(crate) addr: std::net::SocketAddr,
    /// Bearer tokens allowed to publish, unpublish and deprecate, one per
    /// line (at least 24 characters each). Without it the registry is
    /// read-only.
    #[arg(long, value_name = "FILE")]
    pub(crate) token_file: Option<PathBuf>,
    /// The URL clients reach the registry at, for tarball URLs (default:
    /// http://<addr>).
    #[arg(long, value_name = "URL")]
    pub(crate) public_url: Option<String>,
    /// The largest request body in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = goondan_package::registry::server::DEFAULT_MAX_BODY_BYTES)]
    pub(crate) max_body_bytes: u64,
    /// The most open connections.
    #[arg(long, value_name = "N", default_value_t = 256)]
    pub(crate) max_connections: u64,
    /// The most open connections from one client (an IPv4 address or an
    /// IPv6 /64); default: a quarter of `--max-connections`.
    #[arg(long, value_name = "N")]
    pub(crate) max_connections_per_client: Option<u64>,
    /// Seconds a request head may take to arrive.
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    pub(crate) header_timeout: u64,
}

/// `gdn mcp`.
#[derive(Debug, Args)]
pub(crate) struct McpArgs {
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: McpCommand,
}

/// The subcommands of `gdn mcp`.
#[derive(Debug, Subcommand)]
pub(crate) enum McpCommand {
    /// Serve the running swarm as an MCP server on stdin/stdout: one tool
    /// per agent, each call a Turn. Needs an orchestrator started with
    /// `gdn run --detach` (or a foreground `gdn run`).
    Serve(McpServeArgs),
}

/// `gdn mcp serve`.
#[derive(Debug, Args)]
pub(crate) struct McpServeArgs {
    /// The Swarm to serve (default: `default`, else the only one).
    #[arg(short, long)]
    pub(crate) swarm: Option<String>,
    /// An extra env file, applied over .env.local and .env, for loading
    /// the bundle.
    #[arg(long, value_name = "PATH")]
    pub(crate) env_file: Option<PathBuf>,
    /// Serve streamable HTTP at this address (`127.0.0.1:8765`; the
    /// endpoint is `/mcp`) instead of stdio. Loopback only, unless
    /// `--allow-remote` and `--token-env` are both given.
    #[arg(long, value_name = "ADDR")]
    pub(crate) http: Option<std::net::SocketAddr>,
    /// Accept a non-loopback `--http` address, any `Origin`, and a `Host`
    /// that is an IP address or an `--allowed-host` name.
    #[arg(long, requires = "http")]
    pub(crate) allow_remote: bool,
    /// A host name remote clients reach the server by (the `Host` they
    /// send, without port), beside loopback names and IP addresses;
    /// repeat for more.
    #[arg(long, value_name = "NAME", requires = "allow_remote")]
    pub(crate) allowed_host: Vec<String>,
    /// The variable holding the bearer token HTTP clients must send
    /// (`Authorization: Bearer <token>`), at least 24 characters.
    #[arg(long, value_name = "NAME", requires = "http")]
    pub(crate) token_env: Option<String>,
    /// Do not start an orchestrator when none runs for the bundle (by
    /// default one is started in the background, as `gdn run --detach`
    /// does); exit with E_ORCHESTRATOR_NOT_RUNNING instead.
    #[arg(long)]
    pub(crate) no_start: bool,
}

/// `gdn serve`.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// The Swarm to serve (default: `default`, else the only one).
    #[arg(short, long)]
    pub(crate) swarm: Option<String>,
    /// An extra env file, applied over .env.local and .env, for loading
    /// the bundle.
    #[arg(long, value_name = "PATH")]
    pub(crate) env_file: Option<PathBuf>,
    /// Where to listen. Loopback by default; any other address needs
    /// --token-env.
    #[arg(long, value_name = "HOST:PORT", default_value = goondan_serve::DEFAULT_ADDR)]
    pub(crate) addr: std::net::SocketAddr,
    /// The variable holding the bearer token clients must send
    /// (`Authorization: Bearer <token>`), at least 24 characters;
    /// required beyond loopback.
    #[arg(long, value_name = "NAME")]
    pub(crate) token_env: Option<String>,
    /// A host name clients reach the server by (the `Host` they send,
    /// without port), beside loopback names and IP addresses; repeat for
    /// more. Only with --token-env.
    #[arg(long, value_name = "NAME", requires = "token_env")]
    pub(crate) allowed_host: Vec<String>,
    /// The base URL clients reach the server by, as the Agent Cards name
    /// it (default: `http://` and the address listened on); for a server
    /// behind a proxy.
    #[arg(long, value_name = "URL")]
    pub(crate) public_url: Option<String>,
    /// Do not start an orchestrator when none runs for the bundle (by
    /// default one is started in the background, as `gdn run --detach`
    /// does); exit with E_ORCHESTRATOR_NOT_RUNNING instead.
    #[arg(long)]
    pub(crate) no_start: bool,
}

/// `gdn strip-types`.
#[derive(Debug, Args)]
pub(crate) struct StripTypesArgs {
    /// The `.ts`, `.mts` or `.cts` file.
    #[arg(value_name = "FILE")]
    pub(crate) file: PathBuf,
}

/// `gdn init`.
#[derive(Debug, Args)]
pub(crate) struct InitArgs {
    /// The project folder, created when missing (default: `.`).
    pub(crate) path: Option<PathBuf>,
    /// The Package name (default: the folder's name, made to follow the
    /// naming convention).
    #[arg(short, long)]
    pub(crate) name: Option<String>,
    /// What to start from.
    #[arg(short, long, value_enum, default_value_t = Template::Default)]
    pub(crate) template: Template,
    /// Run `git init` (default: when git exists and the folder is not
    /// inside a repository yet).
    #[arg(long, overrides_with = "no_git")]
    pub(crate) git: bool,
    /// Never run `git init`.
    #[arg(long = "no-git", overrides_with = "git")]
    pub(crate) no_git: bool,
    /// Overwrite files the template writes (an existing .env is kept).
    #[arg(short, long)]
    pub(crate) force: bool,
}

/// The templates of `gdn init`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Template {
    /// One assistant with a prompt file and a text tool.
    Default,
    /// A coordinator delegating to a researcher.
    MultiAgent,
    /// The smallest runnable project.
    Minimal,
    /// A reusable package: resources in their own files.
    Package,
}

/// `gdn doctor`.
#[derive(Debug, Args)]
pub(crate) struct DoctorArgs {
    /// An extra env file, applied over .env.local and .env.
    #[arg(long, value_name = "PATH")]
    pub(crate) env_file: Option<PathBuf>,
    /// Repair what has one safe repair: create a missing System Root with
    /// its layout, make one readable by others private (0700), and fix
    /// the bundle as `gdn validate --fix` does.
    #[arg(long)]
    pub(crate) fix: bool,
}

/// `gdn run`.
#[derive(Debug, Args)]
#[command(next_help_heading = "Run options")]
pub(crate) struct RunArgs {
    /// The Swarm to run (default: `default`, else the only one).
    #[arg(short, long)]
    pub(crate) swarm: Option<String>,
    /// Send one message to the entry agent, print the answer and exit.
    #[arg(long, conflicts_with = "input_file")]
    pub(crate) input: Option<String>,
    /// Like --input, reading the message from a file (at most 1 MiB; a
    /// FIFO or device is read through the same bound).
    #[arg(long, value_name = "PATH")]
    pub(crate) input_file: Option<PathBuf>,
    /// Talk to this instance of the entry agent (default: the Swarm's
    /// instance key); each key keeps its own conversation.
    #[arg(long, value_name = "KEY")]
    pub(crate) instance_key: Option<String>,
    /// Run in the background; logs go under the System Root.
    #[arg(long)]
    pub(crate) detach: bool,
    /// Stay attached to this terminal (the default; the original's flag,
    /// the opposite of --detach).
    #[arg(long, conflicts_with = "detach")]
    pub(crate) foreground: bool,
    /// Chat in this terminal even when stdin is not one (by default a
    /// piped stdin is read as one message per line).
    #[arg(long, conflicts_with_all = ["input", "input_file", "detach"])]
    pub(crate) interactive: bool,
    /// Do not install missing package dependencies before starting (they
    /// must already be installed, as `gdn package install` does).
    #[arg(long = "no-install")]
    pub(crate) no_install: bool,
    /// An extra env file, applied over .env.local and .env.
    #[arg(long, value_name = "PATH")]
    pub(crate) env_file: Option<PathBuf>,
    /// Record every model exchange to this cassette (replay it with the
    /// `replay` provider).
    #[arg(long, value_name = "PATH")]
    pub(crate) record: Option<PathBuf>,
    /// Watch the bundle's files (and the files they name, and the env
    /// files); after an edit, reload and validate it and restart only what
    /// changed. An invalid edit is reported and the swarm runs on. (A
    /// cluster host follows `gdn cluster deploy` instead.)
    #[arg(short, long, conflicts_with = "cluster")]
    pub(crate) watch: bool,
    /// Run as one host of a swarm spread over several hosts on NATS
    /// JetStream (comma-separated `nats://` or `tls://` servers); with
    /// --input, send that one input through the cluster and print the
    /// answer (no host needed here). See docs/cluster.md.
    #[arg(long, value_name = "URLS", env = "GOONDAN_CLUSTER", conflicts_with_all = ["interactive", "watch"])]
    pub(crate) cluster: Option<String>,
    /// This host's name in the cluster (default: the host name and a hash
    /// of the state root).
    #[arg(long, value_name = "ID", requires = "cluster")]
    pub(crate) host_id: Option<String>,
}

/// `gdn eval`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct EvalArgs {
    /// Compare or list stored runs instead of running.
    #[command(subcommand)]
    pub(crate) command: Option<EvalCommand>,
    /// The Evals to run (default: every Eval of the bundle).
    pub(crate) names: Vec<String>,
    /// Run only the cases of this name, in the Evals named (else in every
    /// Eval); repeat it, or separate names with commas (a case whose own
    /// name holds a comma is still found by it). An unknown name is an
    /// error that lists the cases there are.
    #[arg(long = "case", value_name = "NAME")]
    pub(crate) cases: Vec<String>,
    /// Run every case with each of these Models in turn (comma-separated
    /// Model names of the bundle), instead of the agents' own.
    #[arg(long, value_delimiter = ',', value_name = "MODELS")]
    pub(crate) models: Vec<String>,
    /// Run every case this many times (the report gives the mean score
    /// and its spread).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) repeat: Option<u32>,
    /// Case runs at once (default: the number of cores).
    #[arg(short, long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) jobs: Option<u32>,
    /// Every case's time limit in seconds (default: the Eval's
    /// timeoutSeconds, else 120).
    #[arg(long, value_name = "SECONDS")]
    pub(crate) timeout: Option<f64>,
    /// Record each case's model exchanges (and its judge's) as cassettes
    /// in this folder.
    #[arg(long, value_name = "DIR", conflicts_with = "replay")]
    pub(crate) record: Option<PathBuf>,
    /// Answer each case from the cassettes in this folder: no network, no
    /// key (tools still run).
    #[arg(long, value_name = "DIR")]
    pub(crate) replay: Option<PathBuf>,
    /// Also write the report as JUnit XML to this file.
    #[arg(long, value_name = "FILE")]
    pub(crate) junit: Option<PathBuf>,
    /// Also write the report as Markdown to this file.
    #[arg(long, value_name = "FILE")]
    pub(crate) markdown: Option<PathBuf>,
    /// Compare with this stored run (an id, or `latest` for the one
    /// before this run) after running.
    #[arg(long, value_name = "RUN")]
    pub(crate) baseline: Option<String>,
    /// An extra env file, applied over .env.local and .env.
    #[arg(long, value_name = "PATH")]
    pub(crate) env_file: Option<PathBuf>,
}

/// The subcommands of `gdn eval`.
#[derive(Debug, Subcommand)]
pub(crate) enum EvalCommand {
    /// Show what got better or worse from one stored run to another.
    Compare {
        /// The earlier run's id (`latest`: the newest).
        before: String,
        /// The later run's id (`latest`: the newest).
        after: String,
    },
    /// List the stored runs.
    Runs,
}

/// `gdn restart`.
#[derive(Debug, Args)]
pub(crate) struct RestartArgs {
    /// Only this agent's processes.
    #[arg(short, long)]
    pub(crate) agent: Option<String>,
    /// Clear the message history before restarting.
    #[arg(long)]
    pub(crate) fresh: bool,
}

/// `gdn instance`.
#[derive(Debug, Args)]
pub(crate) struct InstanceArgs {
    /// What to do; none opens the interactive screen on a terminal (a
    /// list otherwise).
    #[command(subcommand)]
    pub(crate) command: Option<InstanceCommand>,
}

/// `gdn instance` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum InstanceCommand {
    /// Every instance under the System Root, with its live process.
    List {
        /// Only this agent's instances.
        #[arg(short, long)]
        agent: Option<String>,
        /// At most this many (the most recently updated first).
        #[arg(short = 'n', long, default_value_t = 20, conflicts_with = "all")]
        limit: usize,
        /// Every instance, no limit.
        #[arg(long)]
        all: bool,
        /// List the instances of a cluster (`gdn run --cluster`) instead,
        /// with the host that claimed each last.
        #[arg(long, value_name = "URLS", env = "GOONDAN_CLUSTER")]
        cluster: Option<String>,
    },
    /// Restart the processes serving an instance.
    Restart {
        /// `instanceKey`, or `agent:instanceKey` for one agent.
        key: String,
        /// Clear the message history first.
        #[arg(long)]
        fresh: bool,
    },
    /// Write an instance of a cluster (`gdn run --cluster`) in the
    /// single-host layout: `messages/base.jsonl`, `messages/events.jsonl`,
    /// `extensions/`.
    Export {
        /// `agent:instanceKey`, or `instanceKey` of the entry agent.
        key: String,
        /// The cluster's NATS servers.
        #[arg(long, value_name = "URLS", env = "GOONDAN_CLUSTER")]
        cluster: String,
        /// The folder to write (created; must be empty or missing).
        #[arg(long, value_name = "DIR")]
        to: PathBuf,
    },
    /// Stop the processes of an instance and delete its state.
    Delete {
        /// `instanceKey`, or `agent:instanceKey` for one agent.
        key: String,
        /// Do not ask for confirmation.
        #[arg(short, long)]
        force: bool,
    },
    /// Cancel the Turn an instance is running: its model request is
    /// dropped, its tool processes are ended, and its requester gets
    /// E_TURN_CANCELLED.
    Cancel {
        /// `instanceKey` (every agent's), or `agent:instanceKey`.
        key: String,
        /// Cancel in a cluster (`gdn run --cluster`): the cancel goes to
        /// the host that runs the instance now.
        #[arg(long, value_name = "URLS", env = "GOONDAN_CLUSTER")]
        cluster: Option<String>,
    },
    /// List an instance's Turns: position, id, time, input and cost.
    History {
        /// `instanceKey`, or `agent:instanceKey`.
        key: String,
        /// Also list the Turns earlier rewinds archived (one host only).
        #[arg(long)]
        archived: bool,
        /// List the Turns of an instance of a cluster (`gdn run
        /// --cluster`), from its log in the cluster.
        #[arg(long, value_name = "URLS", env = "GOONDAN_CLUSTER")]
        cluster: Option<String>,
    },
    /// Make a new instance (same agent) whose history is this one's up to
    /// the end of a Turn; the original is left as it is.
    Fork {
        /// `instanceKey`, or `agent:instanceKey`.
        key: String,
        /// The Turn to fork at: its position in `gdn instance history`, or
        /// its id.
        #[arg(long, value_name = "TURN")]
        at: String,
        /// The new instance key (default: a new one, printed).
        #[arg(long = "as", value_name = "NEWKEY")]
        new_key: Option<String>,
        /// Cancel a running Turn of the instance first instead of refusing.
        #[arg(long)]
        cancel: bool,
        /// Fork an instance of a cluster (`gdn run --cluster`): the new
        /// instance's log is written in the cluster.
        #[arg(long, value_name = "URLS", env = "GOONDAN_CLUSTER")]
        cluster: Option<String>,
    },
    /// List an instance's newest messages with their ids, the ids
    /// `gdn instance edit --message` takes.
    Messages {
        /// `instanceKey`, or `agent:instanceKey`.
        key: String,
        /// How many of the newest messages to list.
        #[arg(long, value_name = "N", default_value_t = 20)]
        last: usize,
    },
    /// Change one message's text, or one extension's state, of an
    /// instance; its next Turn runs on what was edited. The edit is
    /// recorded with what it replaced in the instance's edits/ folder.
    #[command(group(
        clap::ArgGroup::new("edited")
            .required(true)
            .args(["message", "extension"])
    ))]
    Edit {
        /// `instanceKey`, or `agent:instanceKey`.
        key: String,
        /// The message to change, by its id (`gdn instance messages`).
        #[arg(long, value_name = "ID", requires = "text")]
        message: Option<String>,
        /// The message's new text (for a tool message, its result).
        #[arg(long, value_name = "TEXT", requires = "message")]
        text: Option<String>,
        /// The extension whose state to replace.
        #[arg(
            long,
            value_name = "NAME",
            requires = "state",
            conflicts_with = "message"
        )]
        extension: Option<String>,
        /// The extension's new state, as JSON.
        #[arg(long, value_name = "JSON", requires = "extension")]
        state: Option<String>,
        /// Cancel a running Turn of the instance first instead of refusing.
        #[arg(long)]
        cancel: bool,
    },
    /// Move an instance back to the end of a Turn; what came after is
    /// kept in an archive beside its log.
    Rewind {
        /// `instanceKey`, or `agent:instanceKey`.
        key: String,
        /// The Turn to end with: its position in `gdn instance history`, or
        /// its id.
        #[arg(long, value_name = "TURN")]
        to: String,
        /// Cancel a running Turn of the instance first instead of refusing.
        #[arg(long)]
        cancel: bool,
        /// Rewind an instance of a cluster (`gdn run --cluster`): the host
        /// that runs it rewrites its log, and the archive is kept in the
        /// cluster.
        #[arg(long, value_name = "URLS", env = "GOONDAN_CLUSTER")]
        cluster: Option<String>,
    },
}

/// `gdn cluster`.
#[derive(Debug, Args)]
pub(crate) struct ClusterArgs {
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: ClusterCommand,
}

/// `gdn cluster` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum ClusterCommand {
    /// Live hosts, which host owns each shard, and the inbox backlog.
    Status {
        /// The cluster's NATS servers.
        #[arg(long, value_name = "URLS", env = "GOONDAN_CLUSTER")]
        cluster: String,
    },
    /// Make this folder's bundle (or --config) the one every host runs,
    /// then wait until each live host runs it. Hosts restart only what
    /// changed, as `gdn run --watch` does after an edit.
    Deploy {
        /// The cluster's NATS servers.
        #[arg(long, value_name = "URLS", env = "GOONDAN_CLUSTER")]
        cluster: String,
        /// How long to wait for the hosts, in seconds (0: do not wait).
        #[arg(long, value_name = "SECONDS", default_value_t = 60)]
        wait: u64,
    },
}

/// `gdn logs`.
#[derive(Debug, Args)]
pub(crate) struct LogsArgs {
    /// The Swarm's instance key (default: the bundle's or the active one).
    #[arg(short, long)]
    pub(crate) instance_key: Option<String>,
    /// Only runtime events of this agent.
    #[arg(short, long)]
    pub(crate) agent: Option<String>,
    /// Only runtime events of this trace.
    #[arg(long)]
    pub(crate) trace: Option<String>,
    /// Only runtime events of this type (`tool.completed`, or `tool.*`).
    #[arg(long = "type", value_name = "TYPE")]
    pub(crate) event_type: Option<String>,
    /// Show a process log instead (`orchestrator`, `<agent>-<instanceKey>`
    /// or `connection-<name>`).
    #[arg(short, long)]
    pub(crate) process: Option<String>,
    /// Which stream of a process log (with --process).
    #[arg(long, value_enum, default_value_t = LogStream::Both)]
    pub(crate) stream: LogStream,
    /// Keep printing new lines.
    #[arg(short, long)]
    pub(crate) follow: bool,
    /// How many lines to show (of each log file, for a process log).
    #[arg(short = 'l', long, short_alias = 'n', default_value_t = 200)]
    pub(crate) lines: usize,
    /// Read the runtime events every host of a cluster (`gdn run
    /// --cluster`) published, instead of this System Root's.
    #[arg(long, value_name = "URLS", env = "GOONDAN_CLUSTER", conflicts_with_all = ["process", "follow"])]
    pub(crate) cluster: Option<String>,
}

/// `gdn studio`.
#[derive(Debug, Args)]
pub(crate) struct StudioArgs {
    /// Where to listen. Beyond loopback a token is required: set
    /// GOONDAN_STUDIO_TOKEN (24+ characters) or use the generated one
    /// printed in the URL.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:7317")]
    pub(crate) addr: std::net::SocketAddr,
    /// Let the page act through the running orchestrator: send a message
    /// to an instance, approve or deny a pending approval, cancel an
    /// instance's running Turn, fork an instance from one of its Turns,
    /// rewind an instance to one of its Turns, edit a message's text or
    /// an extension's state, re-run a case of a stored eval run (a new
    /// `gdn eval` of that one case, in its bundle's folder, with this
    /// System Root). Actions need the token
    /// (printed in the URL) even on loopback, and the page's CSRF token.
    #[arg(long)]
    pub(crate) allow_actions: bool,
}

/// `gdn usage`.
#[derive(Debug, Args)]
pub(crate) struct UsageArgs {
    /// One row per what.
    #[arg(long, value_enum, default_value_t = UsageGroup::Instance)]
    pub(crate) by: UsageGroup,
    /// Only this agent's calls.
    #[arg(short, long)]
    pub(crate) agent: Option<String>,
    /// Only calls on or after this UTC day (YYYY-MM-DD).
    #[arg(long, value_name = "YYYY-MM-DD", value_parser = parse_day)]
    pub(crate) since: Option<String>,
}

/// What one `gdn usage` row sums over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum UsageGroup {
    /// One Swarm (workspace).
    Swarm,
    /// One agent of a Swarm.
    Agent,
    /// One agent instance.
    Instance,
    /// One UTC day of a Swarm.
    Day,
}

/// Accepts a calendar day as `YYYY-MM-DD`.
fn parse_day(text: &str) -> Result<String, String> {
    chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .map(|day| day.format("%Y-%m-%d").to_string())
        .map_err(|_| {
            format!("`{text}` is not a day; write it as YYYY-MM-DD, for example 2026-05-01")
        })
}

/// Which stream of a process log `gdn logs --process` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum LogStream {
    /// Its standard output.
    Stdout,
    /// Its standard error (where its log lines go).
    Stderr,
    /// Both, stdout first.
    Both,
}

impl LogStream {
    /// The streams, as log file names spell them.
    pub(crate) fn names(self) -> &'static [&'static str] {
        match self {
            LogStream::Stdout => &["stdout"],
            LogStream::Stderr => &["stderr"],
            LogStream::Both => &["stdout", "stderr"],
        }
    }
}

/// `gdn agent` (hidden).
#[derive(Debug, Args)]
pub(crate) struct AgentArgs {
    /// The bundle folder.
    #[arg(long)]
    pub(crate) bundle_dir: PathBuf,
    /// The Agent resource.
    #[arg(long)]
    pub(crate) agent_name: String,
    /// The instance key.
    #[arg(long)]
    pub(crate) instance_key: String,
    /// The Swarm.
    #[arg(long)]
    pub(crate) swarm: Option<String>,
    /// An extra env file.
    #[arg(long)]
    pub(crate) env_file: Option<PathBuf>,
    /// Record model exchanges to this cassette.
    #[arg(long)]
    pub(crate) record: Option<PathBuf>,
    /// Run with this Model instead of the agent's (`gdn eval --models`).
    #[arg(long)]
    pub(crate) use_model: Option<String>,
    /// Answer from this cassette instead of the provider (`gdn eval
    /// --replay`).
    #[arg(long)]
    pub(crate) replay: Option<PathBuf>,
    /// The instance's working folder, relative to the bundle folder
    /// (`agents__spawn`'s `cwd`).
    #[arg(long)]
    pub(crate) workdir: Option<PathBuf>,
}

/// `gdn connector` (hidden).
#[derive(Debug, Args)]
pub(crate) struct ConnectorArgs {
    /// The bundle folder.
    #[arg(long)]
    pub(crate) bundle_dir: PathBuf,
    /// The Connection resource to run.
    #[arg(long)]
    pub(crate) connection: String,
    /// An extra env file.
    #[arg(long)]
    pub(crate) env_file: Option<PathBuf>,
}

/// `gdn approvals`.
#[derive(Debug, Args)]
pub(crate) struct ApprovalsArgs {
    /// List the requests of every instance of a cluster (`gdn run
    /// --cluster`), whichever host runs them.
    #[arg(long, value_name = "URLS", env = "GOONDAN_CLUSTER")]
    pub(crate) cluster: Option<String>,
}

/// `gdn approve`.
#[derive(Debug, Args)]
pub(crate) struct ApproveArgs {
    /// The approval's id (`apv_…`, from `gdn approvals`).
    pub(crate) id: String,
    /// Decide a request of a cluster (`gdn run --cluster`): the decision
    /// goes to the host that runs its instance now.
    #[arg(long, value_name = "URLS", env = "GOONDAN_CLUSTER")]
    pub(crate) cluster: Option<String>,
    /// Why, recorded with the decision.
    #[arg(long)]
    pub(crate) reason: Option<String>,
    /// Run the call with these arguments instead (a JSON object, checked
    /// against the tool's parameters before it is sent).
    #[arg(long, value_name = "JSON")]
    pub(crate) args: Option<String>,
}

/// `gdn deny`.
#[derive(Debug, Args)]
pub(crate) struct DenyArgs {
    /// The approval's id (`apv_…`, from `gdn approvals`).
    pub(crate) id: String,
    /// Decide a request of a cluster (`gdn run --cluster`): the decision
    /// goes to the host that runs its instance now.
    #[arg(long, value_name = "URLS", env = "GOONDAN_CLUSTER")]
    pub(crate) cluster: Option<String>,
    /// Why; the model reads it.
    #[arg(long)]
    pub(crate) reason: Option<String>,
}

/// `gdn stop`.
#[derive(Debug, Args)]
pub(crate) struct StopArgs {
    /// How long to wait for the orchestrator to exit, in seconds (its
    /// agents have the Swarm's grace period to finish their Turns).
    #[arg(long, value_name = "SECONDS", default_value_t = 310)]
    pub(crate) wait: u64,
}

/// `gdn validate`.
#[derive(Debug, Args)]
pub(crate) struct ValidateArgs {
    /// The bundle folder or YAML file (default: --config, else `.`).
    pub(crate) path: Option<PathBuf>,
    /// Treat warnings as errors.
    #[arg(long)]
    pub(crate) strict: bool,
    /// Fix what has one right fix (a missing or other `apiVersion`) in
    /// the bundle's files, say so on stderr, then validate again.
    #[arg(long)]
    pub(crate) fix: bool,
    /// Output format (default: text, or json with --json).
    #[arg(long, value_enum)]
    pub(crate) format: Option<Format>,
    /// An extra env file, applied over .env.local and .env.
    #[arg(long, value_name = "PATH")]
    pub(crate) env_file: Option<PathBuf>,
}

/// How `validate` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    /// Human-readable, colored on a terminal.
    Text,
    /// One JSON object: `{ valid, errors, warnings }`.
    Json,
    /// GitHub Actions workflow annotations.
    Github,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_definition_is_consistent() {
        Cli::command().debug_assert();
        ChildCli::command().debug_assert();
    }

    #[test]
    fn a_child_mode_parses_as_the_whole_command_line_would() {
        let cases: [&[&str]; 3] = [
            &[
                "agent",
                "--bundle-dir",
                "/b",
                "--state-root",
                "/s",
                "--env-file",
                "/e",
                "--swarm",
                "default",
                "--record",
                "/r",
                "--agent-name",
                "coder",
                "--instance-key",
                "k:1",
                "--workdir",
                "sub",
            ],
            &[
                "connector",
                "--bundle-dir",
                "/b",
                "--state-root",
                "/s",
                "--connection",
                "tg",
            ],
            &["strip-types", "tool.ts"],
        ];
        for case in cases {
            let arguments = || std::iter::once("gdn").chain(case.iter().copied());
            let lean = Cli::parse_arguments(arguments().map(Into::into).collect()).unwrap();
            let whole = Cli::try_parse_from(arguments()).unwrap();
            assert_eq!(format!("{lean:?}"), format!("{whole:?}"), "{case:?}");
        }
        // A mistake is still an argument error.
        let error = Cli::parse_arguments(["gdn", "agent", "--bogus"].map(Into::into).to_vec());
        assert_eq!(
            error.unwrap_err().kind(),
            clap::error::ErrorKind::UnknownArgument
        );
    }

    #[test]
    fn the_operator_commands_parse_their_turn_and_keys() {
        let parse = |args: &[&str]| {
            let cli = Cli::try_parse_from(std::iter::once("gdn").chain(args.iter().copied()))
                .unwrap_or_else(|error| panic!("{args:?}: {error}"));
            match cli.command {
                Command::Instance(InstanceArgs {
                    command: Some(command),
                }) => command,
                other => panic!("{args:?} parsed as {other:?}"),
            }
        };
        assert!(matches!(
            parse(&["instance", "fork", "k", "--at", "2", "--as", "k2", "--cancel"]),
            InstanceCommand::Fork { ref key, ref at, new_key: Some(ref new), cancel: true, .. }
                if key == "k" && at == "2" && new == "k2"
        ));
        assert!(matches!(
            parse(&["instance", "rewind", "coder:k", "--to", "turn_ab"]),
            InstanceCommand::Rewind { ref to, cancel: false, .. } if to == "turn_ab"
        ));
        assert!(matches!(
            parse(&["instance", "history", "k", "--archived", "--json"]),
            InstanceCommand::History { archived: true, .. }
        ));
        assert!(matches!(
            parse(&["instance", "cancel", "k"]),
            InstanceCommand::Cancel { ref key, .. } if key == "k"
        ));
        assert!(matches!(
            parse(&["instance", "cancel", "k", "--cluster", "nats://a:4222"]),
            InstanceCommand::Cancel { cluster: Some(ref urls), .. } if urls == "nats://a:4222"
        ));
        assert!(matches!(
            parse(&["instance", "history", "k", "--cluster", "nats://a:4222"]),
            InstanceCommand::History {
                cluster: Some(_),
                archived: false,
                ..
            }
        ));
        for missing in [
            &["gdn", "instance", "fork", "k"][..],
            &["gdn", "instance", "rewind", "k"][..],
        ] {
            assert!(Cli::try_parse_from(missing).is_err(), "{missing:?}");
        }
        let Command::Approve(approve) =
            Cli::try_parse_from(["gdn", "approve", "apv_1", "--cluster", "nats://a:4222"])
                .unwrap()
                .command
        else {
            panic!("not approve");
        };
        assert_eq!(approve.cluster.as_deref(), Some("nats://a:4222"));
    }

    #[test]
    fn global_flags_parse_on_either_side_of_the_subcommand() {
        for args in [
            &["gdn", "--json", "-q", "validate", "x"][..],
            &["gdn", "validate", "x", "--json", "-q"][..],
        ] {
            let cli = Cli::try_parse_from(args).unwrap();
            assert!(cli.global.json && cli.global.quiet);
            let Command::Validate(validate) = cli.command else {
                panic!("parsed as another command");
            };
            assert_eq!(validate.path, Some(PathBuf::from("x")));
        }
        assert!(Cli::try_parse_from(["gdn", "-v", "-q", "validate"]).is_err());
        assert!(Cli::try_parse_from(["gdn", "validate", "--format", "yaml"]).is_err());
    }

    /// The flags and short aliases of the original's cli.md parse here
    /// with the same meaning.
    #[test]
    fn the_originals_flags_and_aliases_parse() {
        let parse = |args: &[&str]| {
            Cli::try_parse_from(std::iter::once("gdn").chain(args.iter().copied()))
                .unwrap_or_else(|error| panic!("{args:?}: {error}"))
        };
        let Command::Run(run) =
            parse(&["run", "-w", "-s", "main", "--foreground", "--no-install"]).command
        else {
            panic!("not run");
        };
        assert!(run.watch && run.foreground && run.no_install);
        assert_eq!(run.swarm.as_deref(), Some("main"));
        let Command::Run(run) = parse(&["run", "--interactive"]).command else {
            panic!("not run");
        };
        assert!(run.interactive);
        assert!(Cli::try_parse_from(["gdn", "run", "--foreground", "--detach"]).is_err());
        assert!(Cli::try_parse_from(["gdn", "run", "--interactive", "--input", "x"]).is_err());

        let Command::Instance(instance) =
            parse(&["instance", "list", "-a", "coder", "-n", "5"]).command
        else {
            panic!("not instance");
        };
        assert!(matches!(
            instance.command,
            Some(InstanceCommand::List { agent: Some(ref a), limit: 5, all: false, .. }) if a == "coder"
        ));
        let Command::Instance(instance) = parse(&["instance", "list", "--all"]).command else {
            panic!("not instance");
        };
        assert!(matches!(
            instance.command,
            Some(InstanceCommand::List { all: true, .. })
        ));
        let Command::Package(package) = parse(&["package", "add", "@a/b", "-D", "-E"]).command
        else {
            panic!("not package");
        };
        assert!(matches!(
            package.command,
            PackageCommand::Add {
                dev: true,
                exact: true,
                ..
            }
        ));
        let Command::Instance(instance) = parse(&["instance"]).command else {
            panic!("not instance");
        };
        assert!(
            instance.command.is_none(),
            "bare `gdn instance` is the screen"
        );
        let Command::Instance(instance) = parse(&["instance", "delete", "user:1", "-f"]).command
        else {
            panic!("not instance");
        };
        assert!(matches!(
            instance.command,
            Some(InstanceCommand::Delete { force: true, .. })
        ));

        let Command::Logs(logs) = parse(&[
            "logs",
            "-i",
            "session-1",
            "-p",
            "connector-telegram",
            "--stream",
            "stderr",
            "-l",
            "50",
        ])
        .command
        else {
            panic!("not logs");
        };
        assert_eq!(logs.instance_key.as_deref(), Some("session-1"));
        assert_eq!(logs.process.as_deref(), Some("connector-telegram"));
        assert_eq!(
            (logs.stream, logs.lines, logs.follow),
            (LogStream::Stderr, 50, false)
        );
        let Command::Logs(logs) = parse(&["logs", "-a", "coder", "-f", "-n", "7"]).command else {
            panic!("not logs");
        };
        assert_eq!(
            (logs.stream, logs.lines, logs.follow),
            (LogStream::Both, 7, true)
        );

        let Command::Restart(restart) = parse(&["restart", "-a", "coder", "--fresh"]).command
        else {
            panic!("not restart");
        };
        assert!(restart.fresh && restart.agent.as_deref() == Some("coder"));
        let Command::Init(init) = parse(&[
            "init",
            "./p",
            "-n",
            "@me/tools",
            "-t",
            "multi-agent",
            "--no-git",
            "-f",
        ])
        .command
        else {
            panic!("not init");
        };
        assert!(init.no_git && init.force && init.name.as_deref() == Some("@me/tools"));
        let cli = parse(&[
            "-c", "./bundle", "validate", "--strict", "--format", "github",
        ]);
        assert_eq!(
            cli.global.config.as_deref(),
            Some(std::path::Path::new("./bundle"))
        );
    }
}
