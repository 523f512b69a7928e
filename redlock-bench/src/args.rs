//! The command line, and the [`Plan`] it resolves to: how many repetitions, cycles, seconds.
//!
//! It never measures anything and never touches a node; a bad value is a clap error with a
//! usage message, never a panic.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use crate::contender::Contender;

/// Tasks (threads for the blocking adapter) of the throughput scenario, each on its own key.
pub(crate) const THROUGHPUT_TASKS: usize = 64;
/// Tasks (threads for the blocking adapter) of the contention scenario, all on one key.
pub(crate) const CONTENTION_TASKS: usize = 8;
/// Cycles after which the memory scenario reads the RSS the first time.
const MEMORY_FIRST: u64 = 10_000;
/// Cycles after which the memory scenario reads the RSS the second time, by default: chosen so
/// that the scenario ends within about a minute on a 2-core machine (1M took 100–130 s there;
/// ask for it with `--memory-cycles 1000000`).
const DEFAULT_MEMORY_CYCLES: u64 = 500_000;

/// Benchmark redlock-rs against the raw Redis floor and rslock, on 5 local redis-servers.
#[derive(Debug, Parser)]
#[command(name = "redlock-bench", version)]
pub(crate) struct Args {
    /// Run every scenario tiny and once (a few hundred ms each): checks that the benchmark
    /// works; its numbers mean nothing.
    #[arg(long)]
    pub(crate) smoke: bool,
    /// Repetitions of each scenario per contender (contenders alternate between repetitions).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub(crate) reps: u32,
    /// Length of each throughput and contention run, e.g. `2s` or `500ms`.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub(crate) duration: Duration,
    /// Measured lock+release cycles of each sequential-latency run (after a warm-up).
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    pub(crate) cycles: u32,
    /// Lock+release cycles of the memory scenario (RSS is read after 10k and after this many).
    #[arg(long, default_value_t = DEFAULT_MEMORY_CYCLES,
          value_parser = clap::value_parser!(u64).range(10_000..=1_000_000_000))]
    pub(crate) memory_cycles: u64,
    /// Directory for bench.json, latency.svg and throughput.svg [default: target/bench in the
    /// workspace].
    #[arg(long, value_name = "DIR")]
    pub(crate) out_dir: Option<PathBuf>,
    /// Run only these contenders (comma-separated); the raw floors always run, as the references.
    #[arg(long, value_delimiter = ',', value_name = "CONTENDERS")]
    pub(crate) only: Vec<Contender>,
    /// Which server the 5 nodes run: `redis` (`$REDIS_SERVER`, else `redis-server` on `PATH`)
    /// or `valkey` (`$VALKEY9_SERVER`: a Valkey ≥ 9.1, which `scripts/ensure-valkey.sh 9.1`
    /// fetches). On Valkey the raw floors release with `DELIFEQ`, its cheapest correct
    /// compare-and-delete; on Redis with the release script.
    #[arg(long, value_enum, default_value_t = Server::Redis)]
    pub(crate) server: Server,
    /// How the nodes are configured: `stock` (the server's defaults: `SWAPDB` runs, so every
    /// acquisition on a proven connection is sealed against a swap in a `MULTI`), or `plain`
    /// (`SWAPDB` renamed away, no memory limit: the acquisition is a plain `SET NX PX`, the
    /// floor's own command).
    #[arg(long, value_enum, default_value_t = NodeConfig::Stock)]
    pub(crate) node_config: NodeConfig,
    /// Internal: run the memory scenario in this process and print its JSON (the parent starts
    /// it, so that its RSS is not the parent's).
    #[arg(long, hide = true)]
    pub(crate) memory_probe: bool,
    /// Internal: the node URLs of the memory probe.
    #[arg(long = "node", hide = true)]
    pub(crate) nodes: Vec<String>,
}

/// The server the nodes run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Server {
    /// redis-server.
    Redis,
    /// valkey-server 9.1 or later.
    Valkey,
}

/// How the nodes are configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum NodeConfig {
    /// The server's defaults.
    Stock,
    /// `SWAPDB` renamed away (`--rename-command SWAPDB ""`), `maxmemory` 0 (nothing evicted).
    Plain,
}

impl NodeConfig {
    /// `options` with this configuration.
    pub(crate) fn apply(
        self,
        options: redlock_local::ServerOptions,
    ) -> redlock_local::ServerOptions {
        match self {
            Self::Stock => options,
            Self::Plain => options.args(["--rename-command", "SWAPDB", ""]),
        }
    }

    /// What the report says of it.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Self::Stock => {
                "stock configuration (`SWAPDB` runs: a proven connection seals each \
                 acquisition in a `MULTI`)"
            }
            Self::Plain => {
                "`SWAPDB` renamed away, no memory limit (`--node-config plain`: an acquisition \
                 on a proven connection is a plain `SET NX PX`)"
            }
        }
    }
}

/// The environment variable naming the valkey-server of `--server valkey`.
pub(crate) const VALKEY9_SERVER_ENV: &str = "VALKEY9_SERVER";

/// What one run of the benchmark does, resolved from [`Args`].
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// Whether this is the smoke mode.
    pub(crate) smoke: bool,
    /// Repetitions of each scenario per contender.
    pub(crate) reps: u32,
    /// Unmeasured cycles before each latency run.
    pub(crate) warmup: u32,
    /// Measured cycles of each latency run.
    pub(crate) cycles: u32,
    /// Length of each throughput and contention run.
    pub(crate) duration: Duration,
    /// RSS checkpoints of the memory scenario, in cycles.
    pub(crate) memory_first: u64,
    /// The memory scenario's total cycles.
    pub(crate) memory_total: u64,
    /// Contenders, in the order of the first repetition; the raw floors first.
    pub(crate) contenders: Vec<Contender>,
    /// Where the JSON and the charts go.
    pub(crate) out_dir: PathBuf,
}

impl Plan {
    /// The plan `args` ask for; `--smoke` overrides the sizes.
    pub(crate) fn from_args(args: &Args) -> Self {
        let mut contenders: Vec<Contender> = Contender::ALL
            .into_iter()
            .filter(|c| c.is_floor() || args.only.is_empty() || args.only.contains(c))
            .collect();
        contenders.dedup();
        let out_dir = args.out_dir.clone().unwrap_or_else(default_out_dir);
        if args.smoke {
            return Self {
                smoke: true,
                reps: 1,
                warmup: 10,
                cycles: 100,
                duration: Duration::from_millis(200),
                memory_first: 500,
                memory_total: 2_000,
                contenders,
                out_dir,
            };
        }
        Self {
            smoke: false,
            reps: args.reps,
            warmup: 200,
            cycles: args.cycles,
            duration: args.duration,
            memory_first: MEMORY_FIRST,
            memory_total: args.memory_cycles,
            contenders,
            out_dir,
        }
    }
}

/// `target/bench` in the workspace this crate was built from.
fn default_out_dir() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest
        .parent()
        .map_or_else(|| manifest.clone(), PathBuf::from)
        .join("target")
        .join("bench")
}

/// Parses `250ms`, `2s` or `1.5s` (10 ms to 1 hour).
fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, scale) = if let Some(ms) = text.strip_suffix("ms") {
        (ms, 1e-3)
    } else if let Some(s) = text.strip_suffix('s') {
        (s, 1.0)
    } else {
        return Err(format!("`{text}`: give a unit, e.g. 2s or 500ms"));
    };
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a duration like 2s or 500ms"))?;
    let seconds = value * scale;
    if !(0.01..=3600.0).contains(&seconds) {
        return Err(format!("`{text}`: must be between 10ms and 1 hour"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units_and_bounds() {
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("2").is_err());
        assert!(parse_duration("fast").is_err());
        assert!(parse_duration("1ms").is_err());
        assert!(parse_duration("-3s").is_err());
        assert!(parse_duration("NaNs").is_err());
    }

    #[test]
    fn smoke_is_one_small_repetition_of_everything() {
        let args = Args::parse_from(["redlock-bench", "--smoke", "--reps", "9"]);
        let plan = Plan::from_args(&args);
        assert_eq!(plan.reps, 1);
        assert_eq!(plan.contenders, Contender::ALL.to_vec());
    }

    #[test]
    fn only_keeps_the_raw_floors() {
        let args = Args::parse_from(["redlock-bench", "--only", "rslock,blocking"]);
        let plan = Plan::from_args(&args);
        assert_eq!(
            plan.contenders,
            [
                Contender::Raw,
                Contender::RawAsyncStd,
                Contender::RawBlocking,
                Contender::Blocking,
                Contender::Rslock
            ]
        );
    }
}
