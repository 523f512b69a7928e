//! What a client runs against: its nodes and its checked settings, the same in every adapter.

use std::sync::Arc;

use redlock_core::Config;

/// A client's nodes and checked settings; every adapter's `Redlock` shows them through its
/// `config()` and `nodes()`.
#[derive(Debug)]
pub(crate) struct Deployment {
    config: Config,
    labels: Arc<[Arc<str>]>,
}

impl Deployment {
    /// `config` for the nodes named `labels` (`host:port`).
    pub(crate) fn new(config: Config, labels: Arc<[Arc<str>]>) -> Self {
        Self { config, labels }
    }

    /// The checked settings.
    pub(crate) fn config(&self) -> &Config {
        &self.config
    }

    /// The nodes, as `host:port` (never with credentials).
    pub(crate) fn nodes(&self) -> &[Arc<str>] {
        &self.labels
    }

    /// The node labels, to share with a driver.
    #[cfg(any(feature = "tokio", feature = "smol"))]
    pub(crate) fn labels(&self) -> Arc<[Arc<str>]> {
        self.labels.clone()
    }
}
