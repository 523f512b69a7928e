//! Metrics, through the [`metrics`](https://docs.rs/metrics) facade (feature `metrics`): plug in
//! any exporter (Prometheus, OpenTelemetry, StatsD) and the adapters report what users otherwise
//! hand-roll. Without the feature every function here is empty and inlined away: no metric code,
//! no dependency.
//!
//! | name | kind | labels | what |
//! |---|---|---|---|
//! | `redlock_acquisitions_total` | counter | `outcome` = `acquired`, `contended`, `unavailable`, `too_slow`, `not_held` (`other`: a reason a later engine adds) | settled acquisitions (and resumptions) |
//! | `redlock_acquire_seconds` | histogram | `outcome` | from the first round's start to the outcome |
//! | `redlock_acquire_attempts` | histogram | `outcome` | rounds an acquisition ran |
//! | `redlock_hold_seconds` | histogram | — | from acquired to the release's report |
//! | `redlock_extensions_total` | counter | `trigger` = `caller`, `auto`; `result` = `extended`, `failed` | extensions |
//! | `redlock_locks_lost_total` | counter | `cause` = `not_held`, `expired`, `no_time_left` (`other`: a later engine's) | locks lost while held: an auto-extended lock that could not be kept, or a held lock whose validity ran out |
//! | `redlock_releases_total` | counter | — | releases reported (by a lock or by token) |
//! | `redlock_node_request_seconds` | histogram | `node` (`host:port`) | one request's round trip to one node |
//! | `redlock_node_errors_total` | counter | `node`, `kind` (`connection`, `timeout`, `auth`, …) | failed requests per node |
//! | `redlock_node_sit_outs_total` | counter | `node`, `cause` ([`SitOutCause::word`](redlock_core::SitOutCause::word)) | refusals to vote, by why the node's memory is young |
//! | `redlock_waiting_locks` | gauge | — | locks of this process waiting for a release notice |
//! | `redlock_master_request_seconds` | histogram | `node` (the cluster node), `master` (`host:port`) | on a cluster node, one request's round trip to the master of its slot |
//! | `redlock_master_errors_total` | counter | `node`, `master`, `kind` | on a cluster node, failed requests per master (`cluster`: moved, down or failing over) |
//! | `redlock_master_sit_outs_total` | counter | `node`, `master`, `cause` | on a cluster node, refusals to vote per master (a promoted replica, an imported slot) |
//!
//! Node labels are `host:port`, never a URL (no password). The same facts are in the `tracing`
//! events (`acquired` with `attempts`, `not acquired` with `reason` and `attempts`, `released`
//! with the counts, `reply` with `node` and `latency`, `node sits out` with `node`, `for_ms` and
//! `cause`).

use std::time::{Duration, Instant};

use redlock_core::{FailureReason, LossCause, Reply, Trigger};

/// A batch's round trip to a node, timed only where a metric or a `debug` event reads it:
/// one is started for every batch, and reading the clock twice per batch is time on the
/// lock's path. The `reply` event carries no `latency` where it goes out through the `log`
/// crate with no `tracing` subscriber (nothing then asks for it).
#[derive(Clone, Copy)]
pub(crate) struct Stopwatch(Option<Instant>);

impl Stopwatch {
    /// Starts timing if anything will read the time: the `metrics` feature, or a `tracing`
    /// subscriber that takes the `reply` event (`debug`, target `redlock_redis::request`).
    pub(crate) fn start() -> Self {
        let read = cfg!(feature = "metrics") || Self::reply_event_on();
        Self(read.then(Instant::now))
    }

    /// Whether a `tracing` subscriber takes the `reply` event ([`crate::BatchReplies::trace`]).
    fn reply_event_on() -> bool {
        tracing::enabled!(target: "redlock_redis::request", tracing::Level::DEBUG)
    }

    /// The time since [`start`](Stopwatch::start), if it was timed.
    pub(crate) fn elapsed(self) -> Option<Duration> {
        self.0.map(|started| started.elapsed())
    }
}

/// An acquisition (or resumption) settled.
#[inline]
pub(crate) fn acquisition(started: Instant, attempts: u32, failure: Option<FailureReason>) {
    #[cfg(feature = "metrics")]
    {
        let outcome = match failure {
            None => "acquired",
            Some(FailureReason::Contended) => "contended",
            Some(FailureReason::Unavailable) => "unavailable",
            Some(FailureReason::TooSlow) => "too_slow",
            Some(FailureReason::NotHeld) => "not_held",
            Some(_) => "other",
        };
        metrics::counter!("redlock_acquisitions_total", "outcome" => outcome).increment(1);
        metrics::histogram!("redlock_acquire_seconds", "outcome" => outcome)
            .record(started.elapsed().as_secs_f64());
        metrics::histogram!("redlock_acquire_attempts", "outcome" => outcome)
            .record(f64::from(attempts));
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (started, attempts, failure);
}

/// A release reported; `held_since` when the lock was held here.
#[inline]
pub(crate) fn release(held_since: Option<Instant>) {
    #[cfg(feature = "metrics")]
    {
        metrics::counter!("redlock_releases_total").increment(1);
        if let Some(since) = held_since {
            metrics::histogram!("redlock_hold_seconds").record(since.elapsed().as_secs_f64());
        }
    }
    #[cfg(not(feature = "metrics"))]
    let _ = held_since;
}

/// An extension ended.
#[inline]
pub(crate) fn extension(trigger: Trigger, extended: bool) {
    #[cfg(feature = "metrics")]
    {
        let trigger = match trigger {
            Trigger::Caller => "caller",
            Trigger::Renewal => "auto",
        };
        let result = if extended { "extended" } else { "failed" };
        metrics::counter!("redlock_extensions_total", "trigger" => trigger, "result" => result)
            .increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (trigger, extended);
}

/// An auto-extended lock was lost.
#[inline]
pub(crate) fn lost(cause: LossCause) {
    #[cfg(feature = "metrics")]
    {
        let cause = match cause {
            LossCause::NotHeld => "not_held",
            LossCause::Expired => "expired",
            LossCause::NoTimeLeft => "no_time_left",
            _ => "other",
        };
        metrics::counter!("redlock_locks_lost_total", "cause" => cause).increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = cause;
}

/// One request to `node` answered (or failed) after `latency` (timed by a [`Stopwatch`], so
/// always there with the `metrics` feature).
#[inline]
pub(crate) fn node_reply(node: &str, latency: Option<Duration>, reply: &Reply) {
    #[cfg(feature = "metrics")]
    {
        if let Some(latency) = latency {
            metrics::histogram!("redlock_node_request_seconds", "node" => node.to_owned())
                .record(latency.as_secs_f64());
        }
        if let Reply::Error(kind) = reply {
            metrics::counter!(
                "redlock_node_errors_total",
                "node" => node.to_owned(),
                "kind" => error_kind(*kind)
            )
            .increment(1);
        }
        if let Reply::Ineligible { cause, .. } = reply {
            metrics::counter!(
                "redlock_node_sit_outs_total",
                "node" => node.to_owned(),
                "cause" => cause.word()
            )
            .increment(1);
        }
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (node, latency, reply);
}

/// On cluster node `node`, the requests sent to master `master` at `sent` answered (or failed)
/// with `answers`: each counted by [`master_reply`].
pub(crate) fn master_replies(node: &str, master: &str, sent: Stopwatch, answers: &crate::Answers) {
    let latency = sent.elapsed();
    for (_, reply) in answers {
        master_reply(node, master, latency, reply);
    }
}

/// On cluster node `node`, one request to master `master` answered (or failed) after
/// `latency`: the per-master view of [`node_reply`], which counts the cluster node's answer.
#[inline]
fn master_reply(node: &str, master: &str, latency: Option<Duration>, reply: &Reply) {
    #[cfg(feature = "metrics")]
    {
        let labels = || [("node", node.to_owned()), ("master", master.to_owned())];
        if let Some(latency) = latency {
            metrics::histogram!("redlock_master_request_seconds", &labels())
                .record(latency.as_secs_f64());
        }
        if let Reply::Error(kind) = reply {
            let [node, master] = labels();
            metrics::counter!(
                "redlock_master_errors_total",
                node.0 => node.1, master.0 => master.1, "kind" => error_kind(*kind)
            )
            .increment(1);
        }
        if let Reply::Ineligible { cause, .. } = reply {
            let [node, master] = labels();
            metrics::counter!(
                "redlock_master_sit_outs_total",
                node.0 => node.1, master.0 => master.1, "cause" => cause.word()
            )
            .increment(1);
        }
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (node, master, latency, reply);
}

/// A lock started (`true`) or stopped (`false`) waiting for a release notice.
#[inline]
pub(crate) fn waiting(started: bool) {
    #[cfg(feature = "metrics")]
    {
        let gauge = metrics::gauge!("redlock_waiting_locks");
        if started {
            gauge.increment(1.0);
        } else {
            gauge.decrement(1.0);
        }
    }
    #[cfg(not(feature = "metrics"))]
    let _ = started;
}

#[cfg(feature = "metrics")]
fn error_kind(kind: redlock_core::NodeErrorKind) -> &'static str {
    use redlock_core::NodeErrorKind;
    match kind {
        NodeErrorKind::Connection => "connection",
        NodeErrorKind::Timeout => "timeout",
        NodeErrorKind::Auth => "auth",
        NodeErrorKind::NoPermission => "no_permission",
        NodeErrorKind::NoScript => "no_script",
        NodeErrorKind::WrongType => "wrong_type",
        NodeErrorKind::ReadOnly => "read_only",
        NodeErrorKind::OutOfMemory => "out_of_memory",
        NodeErrorKind::Busy => "busy",
        NodeErrorKind::Loading => "loading",
        NodeErrorKind::Protocol => "protocol",
        NodeErrorKind::Tls => "tls",
        NodeErrorKind::Cluster => "cluster",
        NodeErrorKind::CrossSlot => "cross_slot",
        NodeErrorKind::SameCluster => "same_cluster",
        NodeErrorKind::NotACluster => "not_a_cluster",
        NodeErrorKind::SharedMaster => "shared_master",
        // `Other`, and kinds a later engine adds.
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::Stopwatch;
    use tracing::{Level, Metadata, span};

    /// A subscriber that takes events at or above `level` for `target` alone.
    struct Takes {
        target: &'static str,
        level: Level,
    }

    impl tracing::Subscriber for Takes {
        fn enabled(&self, metadata: &Metadata<'_>) -> bool {
            metadata.target() == self.target && *metadata.level() <= self.level
        }
        fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
            span::Id::from_u64(1)
        }
        fn record(&self, _: &span::Id, _: &span::Record<'_>) {}
        fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}
        fn event(&self, _: &tracing::Event<'_>) {}
        fn enter(&self, _: &span::Id) {}
        fn exit(&self, _: &span::Id) {}
    }

    fn reply_event_on_under(target: &'static str, level: Level) -> bool {
        let subscriber = Takes { target, level };
        tracing::subscriber::with_default(subscriber, Stopwatch::reply_event_on)
    }

    #[test]
    fn a_batch_is_timed_when_its_reply_event_or_a_metric_reads_the_time() {
        // The `reply` event's own target and level.
        assert!(reply_event_on_under("redlock_redis::request", Level::DEBUG));
        assert!(reply_event_on_under("redlock_redis::request", Level::TRACE));
        // Another target or a higher level: nothing reads the time.
        assert!(!reply_event_on_under("redlock_redis::request", Level::INFO));
        assert!(!reply_event_on_under(
            "redlock_redis::telemetry",
            Level::DEBUG
        ));
        assert!(!Stopwatch::reply_event_on());
        // The metrics always read it.
        let timed = tracing::subscriber::with_default(
            Takes {
                target: "redlock_redis::request",
                level: Level::DEBUG,
            },
            || Stopwatch::start().elapsed().is_some(),
        );
        assert!(timed);
        assert_eq!(
            Stopwatch::start().elapsed().is_some(),
            cfg!(feature = "metrics")
        );
    }
}
