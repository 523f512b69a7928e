//! What machine the numbers come from: cores, CPU model, load, the redis-server version, and
//! whether this binary was built with optimisations.
//!
//! It only reads (`/proc`, `redis-server --version`); a fact it cannot read is "unknown", never
//! an error.

use std::fs;
use std::process::Command;

use serde::Serialize;

/// The machine, as far as it can tell.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Machine {
    /// Cores this process may use.
    pub(crate) cores: usize,
    /// `model name` from `/proc/cpuinfo`.
    pub(crate) cpu: String,
    /// `redis-server --version`, trimmed.
    pub(crate) redis: String,
    /// `/proc/loadavg` (1, 5, 15 minutes) when the run started.
    pub(crate) load_at_start: String,
    /// Whether this binary has debug assertions (a debug build: numbers not comparable).
    pub(crate) debug_build: bool,
}

impl Machine {
    /// Reads the machine's facts; the nodes run `server` (`None`: `$REDIS_SERVER`, else
    /// `redis-server` on `PATH`).
    pub(crate) fn detect(server: Option<&std::ffi::OsStr>) -> Self {
        Self {
            cores: std::thread::available_parallelism().map_or(0, usize::from),
            cpu: cpu_model().unwrap_or_else(|| "unknown".to_owned()),
            redis: redis_version(server).unwrap_or_else(|| "unknown".to_owned()),
            load_at_start: load_average(),
            debug_build: cfg!(debug_assertions),
        }
    }
}

/// `/proc/loadavg`'s three averages, or "unknown".
pub(crate) fn load_average() -> String {
    fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .filter(|text| !text.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

fn cpu_model() -> Option<String> {
    let info = fs::read_to_string("/proc/cpuinfo").ok()?;
    info.lines()
        .find(|line| line.starts_with("model name"))
        .and_then(|line| line.split_once(':'))
        .map(|(_, model)| model.trim().to_owned())
}

/// The version line of the server the nodes run (`server`, else `$REDIS_SERVER`, else
/// `redis-server` on `PATH`).
fn redis_version(server: Option<&std::ffi::OsStr>) -> Option<String> {
    let program = server
        .map(std::ffi::OsStr::to_os_string)
        .or_else(|| std::env::var_os(redlock_local::REDIS_SERVER_ENV))
        .filter(|value| !value.is_empty())
        .unwrap_or_else(|| "redis-server".into());
    let output = Command::new(program).arg("--version").output().ok()?;
    let text = String::from_utf8_lossy(&output.stdout);
    let line = text.lines().next()?.trim();
    (!line.is_empty()).then(|| line.to_owned())
}
