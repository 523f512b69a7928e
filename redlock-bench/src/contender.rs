//! The contenders, and how each one is set up to run a scenario: which runtime, which client.
//!
//! Every run gets a fresh runtime and a fresh client (connections are made in the warm-up), so
//! no contender inherits another's threads, connections or background tasks. It never decides
//! what a scenario measures: that is [`Scenario`]'s.

use std::fmt;

use clap::ValueEnum;

use crate::clients::raw::{Multiplexed, RawClient};
use crate::clients::raw_threads::NodeThreads;
use crate::exec::{AsyncStdExec, Executor, SmolExec, TokioExec};
use crate::scenarios::Scenario;

/// One way of taking the lock (or, for the raw floors, of sending its commands).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
pub(crate) enum Contender {
    /// The floor: `SET NX PX` then the release script, fanned out with the redis crate, on a
    /// multi-thread tokio runtime. Every `×raw` ratio is against it.
    Raw,
    /// The same floor on the async-std executor (the redis crate's smol connections): the
    /// reference of `redlock-async-std`.
    RawAsyncStd,
    /// The same floor on threads (one blocking connection and thread per node): the reference
    /// of `redlock-blocking`.
    RawBlocking,
    /// `redlock-tokio` on a current-thread runtime.
    TokioCt,
    /// `redlock-tokio` on a multi-thread runtime.
    TokioMt,
    /// `redlock-async-std`.
    AsyncStd,
    /// `redlock-smol`, on smol's global executor.
    Smol,
    /// `redlock-blocking`: threads instead of tasks.
    Blocking,
    /// `rslock`, on a multi-thread tokio runtime.
    Rslock,
}

impl Contender {
    /// Every contender, the floors first (the reference of `×raw` at the top).
    pub(crate) const ALL: [Self; 9] = [
        Self::Raw,
        Self::RawAsyncStd,
        Self::RawBlocking,
        Self::TokioCt,
        Self::TokioMt,
        Self::AsyncStd,
        Self::Smol,
        Self::Blocking,
        Self::Rslock,
    ];

    /// Short name: in keys, JSON and chart axes.
    pub(crate) fn id(self) -> &'static str {
        match self {
            Self::Raw => "raw",
            Self::RawAsyncStd => "raw-async-std",
            Self::RawBlocking => "raw-blocking",
            Self::TokioCt => "tokio-ct",
            Self::TokioMt => "tokio-mt",
            Self::AsyncStd => "async-std",
            Self::Smol => "smol",
            Self::Blocking => "blocking",
            Self::Rslock => "rslock",
        }
    }

    /// What it is, for the tables.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Raw => "raw floor (redis crate, tokio mt)",
            Self::RawAsyncStd => "raw floor (redis crate, async-std)",
            Self::RawBlocking => "raw floor (redis crate, threads)",
            Self::TokioCt => "redlock-tokio, current-thread",
            Self::TokioMt => "redlock-tokio, multi-thread",
            Self::AsyncStd => "redlock-async-std",
            Self::Smol => "redlock-smol",
            Self::Blocking => "redlock-blocking (threads)",
            Self::Rslock => "rslock 0.10 (tokio mt)",
        }
    }

    /// Whether it is a raw floor: a reference that always runs, also with `--only`.
    pub(crate) fn is_floor(self) -> bool {
        matches!(self, Self::Raw | Self::RawAsyncStd | Self::RawBlocking)
    }

    /// The floor on the same runtime or threads, for the `×own floor` ratio: `raw-async-std`
    /// for async-std and smol (both on async-io, the redis crate's smol connections; their
    /// executors differ), `raw-blocking` for blocking, and each floor for itself. The tokio rows
    /// have none: their reference is `raw`, which `×raw` already is.
    pub(crate) fn own_floor(self) -> Option<Self> {
        match self {
            Self::Raw => Some(Self::Raw),
            Self::RawAsyncStd | Self::AsyncStd | Self::Smol => Some(Self::RawAsyncStd),
            Self::RawBlocking | Self::Blocking => Some(Self::RawBlocking),
            Self::TokioCt | Self::TokioMt | Self::Rslock => None,
        }
    }

    /// Runs `scenario` once with this contender against the nodes at `urls`.
    pub(crate) fn run<S: Scenario>(self, scenario: &S, urls: &[String]) -> S::Run {
        match self {
            Self::Raw => {
                let exec = TokioExec::multi_thread();
                let client = RawClient::new(exec.block_on(Multiplexed::connect(urls)));
                scenario.run_async(&exec, &client)
            }
            Self::RawAsyncStd => {
                // Connected outside any tokio runtime: the redis crate picks smol's.
                let client = RawClient::new(AsyncStdExec.block_on(Multiplexed::connect(urls)));
                scenario.run_async(&AsyncStdExec, &client)
            }
            Self::RawBlocking => {
                let client = RawClient::new(NodeThreads::connect(urls));
                scenario.run_blocking(&client)
            }
            Self::TokioCt | Self::TokioMt => {
                let exec = if self == Self::TokioCt {
                    TokioExec::current_thread()
                } else {
                    TokioExec::multi_thread()
                };
                let client = redlock_tokio::Redlock::new(urls).expect("redlock-tokio client");
                scenario.run_async(&exec, &client)
            }
            Self::AsyncStd => {
                let client =
                    redlock_async_std::Redlock::new(urls).expect("redlock-async-std client");
                scenario.run_async(&AsyncStdExec, &client)
            }
            Self::Smol => {
                let client = redlock_smol::Redlock::new(urls).expect("redlock-smol client");
                scenario.run_async(&SmolExec, &client)
            }
            Self::Blocking => {
                let client = redlock_blocking::Redlock::new(urls).expect("redlock-blocking client");
                scenario.run_blocking(&client)
            }
            Self::Rslock => {
                let exec = TokioExec::multi_thread();
                let client = rslock::LockManager::new(urls.to_vec());
                scenario.run_async(&exec, &client)
            }
        }
    }
}

impl fmt::Display for Contender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.id())
    }
}
