//! What a chaos run does: its seed, length, servers, clients, lock settings and fault mix.

use std::env;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redlock_core::{ConfigBuilder, RetryPolicy};

use super::adapter::AdapterKind;
use super::faults::FaultConfig;

/// Environment variable with the run's length in seconds (default [`DEFAULT_SECONDS`]); raise it
/// for a soak run.
pub const SECONDS_ENV: &str = "CHAOS_SECONDS";
/// Environment variable with the seed of the run's schedule (default: derived from the time of
/// day, and printed).
pub const SEED_ENV: &str = "CHAOS_SEED";
/// How long clients work under faults in a CI run. Setup and the checks after the run (waiting
/// for delayed restarts, connections and TTLs) add a few seconds.
pub const DEFAULT_SECONDS: u64 = 60;

/// The settings of one chaos run. [`ChaosConfig::from_env`] is what the test uses.
#[derive(Debug, Clone)]
pub struct ChaosConfig {
    /// Seeds the fault schedule and every client's choices.
    pub seed: u64,
    /// How long clients take locks while faults are injected.
    pub duration: Duration,
    /// Redis masters (each a `redis-server` process).
    pub nodes: usize,
    /// One entry per client: the adapter it runs on. A run's call bounds come from the first
    /// client's settings, which every client shares.
    pub clients: Vec<AdapterKind>,
    /// Resources the clients compete for; each has its own counter.
    pub resources: usize,
    /// TTLs are drawn uniformly from this range; its upper end is the longest TTL in use.
    pub ttl: (Duration, Duration),
    /// The clients' bound on one request's I/O to one node.
    pub io_timeout: Duration,
    /// The retry policy of `lock` (must have a bounded number of attempts: the call-time check
    /// derives its bound from it).
    pub retry: RetryPolicy,
    /// A critical section writes its counter only if at least this much validity is left: the
    /// margin a careful client keeps so that its write lands before the lock can pass on.
    pub write_guard: Duration,
    /// Every lock key starts with this; nothing else on the nodes does.
    pub key_prefix: String,
    /// What faults are injected, how often and for how long.
    pub faults: FaultConfig,
    /// How many of the nodes (the last ones) run `valkey-server` (`$VALKEY_SERVER`) instead of
    /// `redis-server`: one lock across both servers.
    pub valkey_nodes: usize,
    /// Whether the last of those runs Valkey 9.1 (`$VALKEY9_SERVER`) with its clients denied
    /// `@scripting`: native commands only, beside nodes that run the scripts.
    pub native_node: bool,
}

impl ChaosConfig {
    /// The CI settings: 5 nodes, 8 clients mixing the adapters ([`AdapterKind::for_client`]), 2
    /// resources, TTLs of 1.5–3 s, the fault mix of [`FaultConfig::default`], a run of
    /// [`DEFAULT_SECONDS`] — with [`SECONDS_ENV`] and [`SEED_ENV`] applied.
    ///
    /// # Panics
    /// If one of the variables is set but is not a whole number.
    pub fn from_env() -> Self {
        let seconds = env_number(SECONDS_ENV).unwrap_or(DEFAULT_SECONDS);
        let seed = env_number(SEED_ENV).unwrap_or_else(time_seed);
        Self {
            seed,
            duration: Duration::from_secs(seconds),
            ..Self::default()
        }
    }

    /// Every client's engine settings for the run: key prefix, retry policy, longest TTL.
    pub fn configure(&self, config: ConfigBuilder) -> ConfigBuilder {
        config
            .key_prefix(self.key_prefix.clone())
            .retry(self.retry)
            .max_ttl(self.max_ttl())
    }

    /// The longest TTL of the run's locks (also the clients' `max_ttl`).
    pub fn max_ttl(&self) -> Duration {
        self.ttl.1
    }

    /// The command line that reruns this schedule.
    pub fn rerun_command(&self) -> String {
        format!(
            "{SEED_ENV}={} {SECONDS_ENV}={} cargo test -p redlock-tests --test chaos -- --nocapture",
            self.seed,
            self.duration.as_secs()
        )
    }
}

impl Default for ChaosConfig {
    fn default() -> Self {
        Self {
            seed: 0,
            duration: Duration::from_secs(DEFAULT_SECONDS),
            nodes: 5,
            clients: (0..8).map(AdapterKind::for_client).collect(),
            resources: 2,
            ttl: (Duration::from_millis(1500), Duration::from_secs(3)),
            io_timeout: Duration::from_secs(1),
            retry: RetryPolicy::default()
                .attempts(6)
                .delay(Duration::from_millis(50))
                .jitter(Duration::from_millis(200)),
            write_guard: Duration::from_millis(300),
            key_prefix: "chaos:".to_owned(),
            faults: FaultConfig::default(),
            valkey_nodes: 0,
            native_node: false,
        }
    }
}

fn env_number(name: &str) -> Option<u64> {
    let value = env::var(name).ok().filter(|v| !v.trim().is_empty())?;
    match value.trim().parse() {
        Ok(number) => Some(number),
        Err(err) => panic!("{name}={value:?} is not a whole number: {err}"),
    }
}

/// A seed from the time of day: every CI run explores another schedule, and prints it.
fn time_seed() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    u64::try_from(nanos).unwrap_or(u64::MAX) ^ u64::from(std::process::id())
}
