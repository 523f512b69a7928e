//! Nodes for an example or a demo: the ones `REDLOCK_NODES` names, or local ones started here.

use std::env;

use crate::error::HarnessError;
use crate::options::ServerOptions;
use crate::servers::Servers;

/// The environment variable that names real nodes (`redis://host:port,...`), as the `redlock`
/// command reads it.
pub const NODES_ENV: &str = "REDLOCK_NODES";

/// The nodes an example runs on: those of `$REDLOCK_NODES`, or `count` local `redis-server`
/// processes started for it (and stopped when this is dropped).
///
/// ```
/// let nodes = redlock_local::Nodes::from_env_or_start(3)?;
/// assert!(!nodes.urls().is_empty());
/// # Ok::<(), redlock_local::HarnessError>(())
/// ```
#[derive(Debug)]
pub struct Nodes {
    urls: Vec<String>,
    /// The local servers, if they were started here.
    local: Option<Servers>,
}

impl Nodes {
    /// Reads `$REDLOCK_NODES`; if it is unset or empty, starts `count` local servers.
    ///
    /// # Errors
    /// If local servers were needed and could not be started (e.g. `redis-server` is missing).
    pub fn from_env_or_start(count: usize) -> Result<Self, HarnessError> {
        let named: Vec<String> = env::var(NODES_ENV)
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|url| !url.is_empty())
            .map(str::to_owned)
            .collect();
        if !named.is_empty() {
            return Ok(Self {
                urls: named,
                local: None,
            });
        }
        let servers = Servers::try_start_with(count, &ServerOptions::new())?;
        Ok(Self {
            urls: servers.urls(),
            local: Some(servers),
        })
    }

    /// The nodes' URLs.
    pub fn urls(&self) -> &[String] {
        &self.urls
    }

    /// Whether the nodes were started here (and are stopped when this is dropped).
    pub fn is_local(&self) -> bool {
        self.local.is_some()
    }
}
