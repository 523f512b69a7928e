//! The command line: global options, subcommands, and the short form `redlock NAME -- CMD`.

use std::ffi::OsString;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::duration;

/// Exit codes, in the spirit of flock(1) and sysexits.h; listed in `--help`.
pub(crate) const EXIT_CODES: &str = "\
Exit status:
  0    success (for `run`: the command's own status)
  64   bad arguments or settings (EX_USAGE)
  69   a node did not answer or failed a check (`status`, `nodes`; `nodes check --strict`:
       any warning of a risk to a held lock too) (EX_UNAVAILABLE)
  75   the lock was not acquired (held by another, or too few nodes) (EX_TEMPFAIL)
  76   the lock was lost while the command ran (the command was terminated, unless
       `--on-lost ignore` let it finish)
  77   the token does not hold the lock (`extend`, `release`) (EX_NOPERM)
  127  the command could not be started

Examples:
  export REDLOCK_NODES=redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379
  redlock nightly-report -- ./make-report.sh           # one try; 75 if another host holds it
  redlock run --wait 5m --ttl 30s nightly-report -- ./make-report.sh
  TOKEN=$(redlock acquire deploy --ttl 45s)            # one step of a script takes the lock,
  redlock extend deploy \"$TOKEN\" --ttl 45s            # a later one keeps it,
  redlock release deploy \"$TOKEN\"                     # and another releases it
  redlock status deploy nightly-report --json          # who holds what, per node (a snapshot)
  redlock nodes check --strict                         # reachable, version, login, scripts, warnings
  redlock nodes trust                                  # fresh deployment: no lock is live
  redlock nodes trust 10.0.0.2:6379                    # one node: its sit-out is needless
  redlock demo                                         # a tour on 5 local redis-servers";

/// Distributed locks for scripts and cron jobs (Redlock over independent Redis masters): run a
/// command while holding a lock, like flock(1) across machines, or take and release locks
/// step by step.
#[derive(Debug, Parser)]
#[command(name = "redlock", version, about, after_help = EXIT_CODES)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) global: Global,
    #[command(subcommand)]
    pub(crate) command: Cmd,
}

/// Options every subcommand takes.
#[derive(Debug, Clone, Args)]
pub(crate) struct Global {
    /// A Redis master, `redis://[user:password@]host:port[/db]`; give each node once. Keep
    /// passwords in REDLOCK_NODES rather than here, out of the process list.
    #[arg(
        short,
        long = "node",
        env = "REDLOCK_NODES",
        hide_env_values = true,
        value_delimiter = ',',
        global = true
    )]
    pub(crate) nodes: Vec<String>,

    /// A cluster node's votes per lock, `POSITION=VOTES` (its position in the --node list,
    /// from 0): the cluster lends each lock that many votes, each in a slot of its own, on
    /// distinct masters under an even slot layout. Comma-separate or repeat for several.
    #[arg(
        long = "cluster-votes",
        env = "REDLOCK_CLUSTER_VOTES",
        value_delimiter = ',',
        value_name = "POSITION=VOTES",
        global = true
    )]
    pub(crate) cluster_votes: Vec<String>,

    /// More URLs of a cluster node's cluster, `POSITION=URL`, asked when the node's own URL
    /// does not answer. Keep passwords in REDLOCK_CLUSTER_SEEDS rather than here.
    #[arg(
        long = "cluster-seed",
        env = "REDLOCK_CLUSTER_SEEDS",
        hide_env_values = true,
        value_delimiter = ',',
        value_name = "POSITION=URL",
        global = true
    )]
    pub(crate) cluster_seeds: Vec<String>,

    /// Prefix of the Redis keys.
    #[arg(long, default_value = "redlock:", global = true)]
    pub(crate) prefix: String,

    /// The longest TTL any client of these nodes uses: a node that lost its memory (restart
    /// without persistence, flush) refuses to vote for this long. Must be the same for every
    /// client of the nodes, and at least every `--ttl`.
    #[arg(
        long,
        env = "REDLOCK_MAX_TTL",
        hide_env_values = true,
        default_value = "60s",
        value_parser = duration::parse,
        global = true
    )]
    pub(crate) max_ttl: Duration,

    /// Print what happens on stderr.
    #[arg(short, long, global = true)]
    pub(crate) verbose: bool,

    /// Print no report on stdout, only what a script needs (`acquire`'s token); errors still go
    /// to stderr and the exit status says what happened.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub(crate) quiet: bool,

    /// How reports are printed on stdout: `text` for people, `json` (one document) for programs.
    #[arg(long, value_enum, default_value = "text", global = true)]
    pub(crate) format: Format,

    /// Short for `--format json`.
    #[arg(long, global = true, conflicts_with = "format")]
    pub(crate) json: bool,
}

impl Global {
    /// `--cluster-votes`, parsed: `(position, votes)`.
    pub(crate) fn votes(&self) -> Result<Vec<(usize, usize)>, crate::Failure> {
        let max = redlock_core::MAX_CLUSTER_VOTES;
        self.cluster_votes
            .iter()
            .map(|given| {
                given
                    .split_once('=')
                    .and_then(|(node, votes)| {
                        Some((node.trim().parse().ok()?, votes.trim().parse().ok()?))
                    })
                    .filter(|&(node, votes): &(usize, usize)| {
                        node < self.nodes.len() && (1..=max).contains(&votes)
                    })
                    .ok_or_else(|| {
                        (
                            crate::USAGE,
                            format!(
                                "--cluster-votes {given:?}: give POSITION=VOTES, a position in \
                                 the --node list (from 0) and 1 to {max} votes, e.g. 0=3 (the \
                                 first --node lends each lock 3 votes)"
                            ),
                        )
                    })
            })
            .collect()
    }

    /// `--cluster-seed`, parsed: `(position, url)`. The error never repeats a URL (it may
    /// hold a password).
    pub(crate) fn seeds(&self) -> Result<Vec<(usize, String)>, crate::Failure> {
        self.cluster_seeds
            .iter()
            .enumerate()
            .map(|(index, given)| {
                given
                    .split_once('=')
                    .and_then(|(node, url)| {
                        Some((node.trim().parse().ok()?, url.trim().to_owned()))
                    })
                    .ok_or_else(|| {
                        (
                            crate::USAGE,
                            format!(
                                "--cluster-seed #{index}: give POSITION=URL, e.g. \
                                 0=redis://10.0.0.2:6379 (a seed of the first --node's cluster)"
                            ),
                        )
                    })
            })
            .collect()
    }

    /// The output format, `--json` included.
    pub(crate) fn format(&self) -> Format {
        if self.json { Format::Json } else { self.format }
    }
}

/// `--format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    /// Lines for people.
    Text,
    /// One JSON document for programs.
    Json,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Cmd {
    /// Run a command while holding the lock (extended while it runs; the command is terminated
    /// if the lock is lost). A guard process sits between redlock and the command: if redlock
    /// itself dies, even by kill -9, the command still gets the --on-lost treatment before the
    /// lock's validity ends. `redlock NAME -- CMD` is short for `redlock run NAME -- CMD`.
    #[command(
        after_help = "Examples:\n  redlock run nightly-report -- ./make-report.sh\n  redlock run --wait 5m --ttl 30s --on-lost kill backup -- ./backup.sh\n  redlock run --fenced ledger -- sh -c 'write-with-fence \"$REDLOCK_FENCE\"'"
    )]
    Run(RunArgs),
    /// Take the lock and print its token (and nothing else) on stdout; the lock stays held until
    /// its TTL, `extend` or `release`, by any process that has the token.
    #[command(
        after_help = "Example:\n  TOKEN=$(redlock acquire deploy --ttl 45s) || exit\n  redlock acquire deploy --json   # {\"resource\":..,\"token\":..,\"valid_ms\":..,\"fence\":..}"
    )]
    Acquire(AcquireArgs),
    /// Extend a lock by its token to `--ttl` from now (proving the token holds it on a quorum).
    #[command(
        after_help = "Example:\n  redlock extend deploy \"$TOKEN\" --ttl 45s || echo 'lost it' >&2"
    )]
    Extend(TokenArgs),
    /// Release a lock by its token; keys under another token are never touched.
    #[command(
        after_help = "Example:\n  redlock release deploy \"$TOKEN\"   # exit 77 if the token holds nothing"
    )]
    Release(ReleaseArgs),
    /// Show who holds each lock on each node, its time to live and fence, and whether each node
    /// may vote (restart-aware voting): a snapshot that may be stale the moment it prints. Reads
    /// only; never changes a key.
    #[command(
        after_help = "Examples:\n  redlock status deploy nightly-report\n  redlock status deploy --json | jq '.resources[0].quorum_holder'"
    )]
    Status(StatusArgs),
    /// Operations on the nodes themselves.
    #[command(subcommand)]
    Nodes(NodesCmd),
    /// Measure lock latency, throughput and hand-over under contention against the nodes (or
    /// against local ones it starts with --local), with a latency histogram.
    #[command(
        after_help = "Examples:\n  redlock bench --local 5                 # 5 local redis-servers, started and stopped\n  redlock bench --clients 16 --duration 10s --json"
    )]
    Bench(crate::bench::BenchArgs),
    /// A one-minute tour on 5 local redis-servers it starts and stops itself: 8 workers
    /// increment a counter under one lock while nodes are killed and restarted.
    #[command(
        after_help = "Example:\n  redlock demo            # needs redis-server on PATH (or REDIS_SERVER=/path)"
    )]
    Demo(crate::demo::DemoArgs),
    /// The guard process `run` puts between itself and the command (internal).
    #[command(name = "__guard", hide = true)]
    Guard(crate::guard::GuardArgs),
}

#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// The names of the locks.
    #[arg(required = true)]
    pub(crate) resources: Vec<String>,
}

/// How a lock is taken: its TTL and how long to wait for it.
#[derive(Debug, Args)]
pub(crate) struct Taking {
    /// How long the lock lives unless extended (`run` extends it while the command runs).
    #[arg(short, long, default_value = "30s", value_parser = duration::parse)]
    pub(crate) ttl: Duration,
    /// How long to wait for the lock if another holder has it (0: a single try).
    #[arg(short, long, default_value = "0", value_parser = duration::parse)]
    wait: Duration,
    /// A single try: fail at once (exit 75) if another holder has the lock (same as --wait 0).
    #[arg(long, conflicts_with = "wait")]
    no_wait: bool,
    /// When another holder has the lock, exit 75 without a word, as `flock -n` does: a cron
    /// line that skips quietly. Any other failure still prints its line.
    #[arg(long)]
    pub(crate) quiet_if_held: bool,
}

impl Taking {
    /// How long to keep trying (zero: a single round).
    pub(crate) fn wait(&self) -> Duration {
        if self.no_wait {
            Duration::ZERO
        } else {
            self.wait
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    pub(crate) taking: Taking,
    /// Also mint a fencing token, passed to the command as REDLOCK_FENCE.
    #[arg(long)]
    pub(crate) fenced: bool,
    /// What to do to the command when the lock is lost, or when redlock itself dies (even by
    /// kill -9; its guard process then acts): `term` (SIGTERM, then SIGKILL if it is still
    /// running when the validity ends), `kill` (SIGKILL at once), or `ignore` (let it finish
    /// unprotected; redlock still exits 76). A redlock killed this way releases nothing: the
    /// lock stays until its TTL.
    #[arg(long, value_enum, default_value = "term")]
    pub(crate) on_lost: OnLost,
    /// The name of the lock.
    pub(crate) resource: String,
    /// The command to run, and its arguments (after `--`). It gets REDLOCK_RESOURCE and
    /// REDLOCK_TOKEN (and REDLOCK_FENCE with --fenced) in its environment.
    #[arg(last = true, required = true)]
    pub(crate) command: Vec<String>,
}

/// `run --on-lost`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum OnLost {
    /// SIGTERM, then SIGKILL when the validity ends.
    Term,
    /// SIGKILL at once.
    Kill,
    /// Leave the command running (unprotected).
    Ignore,
}

#[derive(Debug, Args)]
pub(crate) struct AcquireArgs {
    #[command(flatten)]
    pub(crate) taking: Taking,
    /// The name of the lock.
    pub(crate) resource: String,
}

#[derive(Debug, Args)]
pub(crate) struct TokenArgs {
    /// The new TTL, from now.
    #[arg(short, long, default_value = "30s", value_parser = duration::parse)]
    pub(crate) ttl: Duration,
    /// The name of the lock.
    pub(crate) resource: String,
    /// The token `acquire` printed (it may start with `-`, as a caller-chosen token can).
    #[arg(allow_hyphen_values = true)]
    pub(crate) token: String,
}

#[derive(Debug, Args)]
pub(crate) struct ReleaseArgs {
    /// The name of the lock.
    pub(crate) resource: String,
    /// The token `acquire` printed (it may start with `-`, as a caller-chosen token can).
    #[arg(allow_hyphen_values = true)]
    pub(crate) token: String,
}

#[derive(Debug, Subcommand)]
pub(crate) enum NodesCmd {
    /// Check every node: reachable, server and version, login, script support, round-trip
    /// latency, and its restart-aware voting state. Exit 69 if any check fails. Then warn, one
    /// line each, about what can put a held lock at risk: eviction (maxmemory with a policy
    /// other than noeviction), a clock far from the others', a replica or cluster mode, two URLs
    /// that reach the same server, and persistence settings that matter to restart-aware voting;
    /// and, where the user may run no script, which locks are error votes there.
    #[command(
        after_help = "Examples:\n  redlock nodes check --json\n  redlock nodes check --strict   # exit 69 on any warning of a risk to a held lock"
    )]
    Check(CheckArgs),
    /// Mark every node (or only the NODEs named) trusted for restart-aware voting: a fresh or
    /// restarted node then votes at once instead of waiting out --max-ttl, and its epoch
    /// carries its identity. Only when you know no lock is live on the nodes trusted.
    #[command(
        after_help = "Examples:\n  redlock nodes trust                    # a fresh deployment\n  redlock nodes trust 10.0.0.2:6379      # one node's needless sit-out (see `redlock status`)"
    )]
    Trust(TrustArgs),
}

/// What a command-line parse error becomes: `--help` and `--version` print and exit 0; every
/// other one is a usage error, exit 64 with one line on stderr (clap's own report is several
/// lines and exit 2, which scripts reading the README's table would not expect).
pub(crate) fn parse_error(err: &clap::Error) -> std::process::ExitCode {
    use clap::error::ErrorKind;
    match err.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = err.print();
            std::process::ExitCode::SUCCESS
        }
        _ => {
            eprintln!("redlock: {}", usage_line(err));
            std::process::ExitCode::from(crate::USAGE)
        }
    }
}

/// A parse error as one line: what is wrong, and the usage of the (sub)command.
pub(crate) fn usage_line(err: &clap::Error) -> String {
    let rendered = err.render().to_string();
    let usage = rendered
        .lines()
        .find_map(|line| line.trim().strip_prefix("Usage: "))
        .map(str::trim);
    let what = if err.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        "a subcommand is missing".to_owned()
    } else {
        // The first paragraph (e.g. "the following required arguments were not provided:"
        // and the indented names below it), joined into one line; tips and usage follow a
        // blank line.
        let first: Vec<&str> = rendered
            .lines()
            .map(str::trim)
            .skip_while(|line| line.is_empty())
            .take_while(|line| !line.is_empty())
            .collect();
        match first.join(" ") {
            what if what.is_empty() => err.kind().to_string(),
            what => what.strip_prefix("error: ").unwrap_or(&what).to_owned(),
        }
    };
    match usage {
        Some(usage) => format!("{what}; usage: {usage} (more with --help)"),
        None => format!("{what} (more with --help)"),
    }
}

#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    /// Exit 69 if there is any warning of a risk to a held lock, not only if a node failed a
    /// check (persistence settings that restart-aware voting covers do not count).
    #[arg(long)]
    pub(crate) strict: bool,
}

#[derive(Debug, Args)]
pub(crate) struct TrustArgs {
    /// Trust only these nodes, each as `host:port` the way `redlock nodes check` names it
    /// (a node of --node / REDLOCK_NODES). None: every node.
    #[arg(value_name = "NODE")]
    pub(crate) only: Vec<String>,
}

/// The arguments, with `run` inserted first when the first word is not a subcommand (the short
/// form `redlock [options] NAME -- CMD`).
pub(crate) fn args_with_run(args: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    let mut args: Vec<OsString> = args.into_iter().collect();
    let subcommands = [
        "run", "acquire", "extend", "release", "status", "nodes", "bench", "demo", "help",
        "__guard",
    ];
    // Options that take a value, to skip over when looking for the first word.
    let with_value = [
        "-n",
        "--node",
        "--prefix",
        "--max-ttl",
        "--cluster-votes",
        "--cluster-seed",
        "--format",
        "-t",
        "--ttl",
        "-w",
        "--wait",
    ];
    let mut i = 1;
    while let Some(arg) = args.get(i).and_then(|a| a.to_str()) {
        if arg == "--" || !arg.starts_with('-') {
            let is_subcommand = subcommands.contains(&arg);
            if !is_subcommand && arg != "--" {
                args.insert(1, "run".into());
            }
            break;
        }
        let takes_value = with_value.contains(&arg);
        i += if takes_value { 2 } else { 1 };
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    fn parse(words: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(args_with_run(words.iter().map(OsString::from)))
    }

    #[test]
    fn tokens_may_start_with_a_hyphen() {
        for words in [
            &["redlock", "release", "deploy", "-Vx9"][..],
            &["redlock", "release", "deploy", "--", "-Vx9"],
            &["redlock", "extend", "deploy", "-Vx9", "--ttl", "10s"],
            &["redlock", "extend", "--ttl", "10s", "deploy", "-Vx9"],
        ] {
            let cli = parse(words).unwrap_or_else(|err| panic!("{words:?}: {err}"));
            let token = match cli.command {
                Cmd::Release(args) => args.token,
                Cmd::Extend(args) => args.token,
                other => panic!("{other:?}"),
            };
            assert_eq!(token, "-Vx9", "{words:?}");
        }
    }

    #[test]
    fn a_usage_error_is_one_line_with_the_usage() {
        for words in [
            &["redlock", "release", "deploy"][..],
            &["redlock", "acquire", "deploy", "--bogus"],
            &["redlock", "nodes"],
        ] {
            let err = parse(words).expect_err("a usage error");
            let line = usage_line(&err);
            assert!(!line.contains('\n'), "{words:?}: {line}");
            assert!(line.contains("usage: redlock"), "{words:?}: {line}");
        }
        let err = parse(&["redlock", "--ttl", "soon", "job", "--", "true"]).expect_err("bad ttl");
        assert_eq!(
            usage_line(&err),
            "invalid value 'soon' for '--ttl <TTL>': `soon` is not a duration; use e.g. 500ms, \
             30s, 2m, 1h (more with --help)"
        );
        let err = parse(&["redlock", "release", "deploy"]).expect_err("no token");
        assert_eq!(
            usage_line(&err),
            "the following required arguments were not provided: <TOKEN>; usage: redlock \
             release <RESOURCE> <TOKEN> (more with --help)"
        );
        let err = parse(&["redlock", "nodes"]).expect_err("no subcommand");
        assert!(usage_line(&err).starts_with("a subcommand is missing"));
        let err = parse(&["redlock", "acquire", "deploy", "--bogus"]).expect_err("bad flag");
        assert!(
            usage_line(&err).starts_with("unexpected argument '--bogus' found"),
            "{}",
            usage_line(&err)
        );
    }

    #[test]
    fn the_short_form_is_run() {
        let args = |words: &[&str]| args_with_run(words.iter().map(OsString::from));
        assert_eq!(
            args(&["redlock", "--ttl", "5s", "job", "--", "true"]),
            args(&["redlock", "run", "--ttl", "5s", "job", "--", "true"])
        );
        let explicit = args(&["redlock", "release", "job", "t"]);
        assert_eq!(explicit[1], "release");
        assert_eq!(args(&["redlock", "--help"]).len(), 2);
    }
}
