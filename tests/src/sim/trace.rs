//! The event trace of a traced run, and the minimal slice of it that explains a violation.
//!
//! Untraced runs record nothing (no formatting on the hot path); a failing seed is run again with
//! the trace on, which also proves the failure replays.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::checker::{Violation, ms};
use super::clock::Nanos;

/// One traced event.
#[derive(Debug, Clone)]
struct Line {
    t: Nanos,
    client: Option<usize>,
    node: Option<usize>,
    /// The keys the event touched (empty: not about particular keys).
    keys: Vec<Vec<u8>>,
    text: String,
}

/// Everything that happened in a traced run, in order.
#[derive(Debug, Default)]
pub(crate) struct Trace {
    lines: Vec<Line>,
    labels: BTreeMap<Vec<u8>, String>,
}

impl Trace {
    /// Records an event at true time `t`.
    pub(crate) fn push(
        &mut self,
        t: Nanos,
        client: Option<usize>,
        node: Option<usize>,
        keys: Vec<Vec<u8>>,
        text: String,
    ) {
        self.lines.push(Line {
            t,
            client,
            node,
            keys,
            text,
        });
    }

    /// Names a token by its lease (`c1#3`), so traces never print token bytes.
    pub(crate) fn name_token(&mut self, token: &[u8], label: &str) {
        self.labels.insert(token.to_vec(), label.to_owned());
    }

    /// The lease name of a token.
    pub(crate) fn token(&self, token: &[u8]) -> &str {
        self.labels.get(token).map_or("?", String::as_str)
    }

    /// The last `max` lines.
    pub(crate) fn tail(&self, max: usize) -> String {
        let from = self.lines.len().saturating_sub(max);
        render(self.lines[from..].iter())
    }

    /// The events that explain `violation`: those of its two clients and of the nodes, that touch
    /// its resource (or no key in particular), from `lookback` before the first claim until the
    /// overlap ends; the last `max` of them.
    pub(crate) fn minimal(&self, violation: &Violation, lookback: Nanos, max: usize) -> String {
        let clients = [violation.first.client, violation.second.client];
        let from = violation
            .first
            .start
            .min(violation.second.start)
            .saturating_sub(lookback);
        let until = violation.overlap().1;
        let relevant: Vec<&Line> = self
            .lines
            .iter()
            .filter(|l| l.t >= from && l.t <= until)
            .filter(|l| l.client.is_none_or(|c| clients.contains(&c)))
            .filter(|l| l.keys.is_empty() || l.keys.contains(&violation.resource))
            .collect();
        let skip = relevant.len().saturating_sub(max);
        let mut out = String::new();
        if skip > 0 {
            let _ = writeln!(out, "  ... {skip} earlier relevant events left out");
        }
        out + &render(relevant[skip..].iter().copied())
    }
}

fn render<'a>(lines: impl Iterator<Item = &'a Line>) -> String {
    let mut out = String::new();
    for line in lines {
        let who = match (line.client, line.node) {
            (Some(c), Some(n)) => format!("c{c}/n{n}"),
            (Some(c), None) => format!("c{c}"),
            (None, Some(n)) => format!("n{n}"),
            (None, None) => "world".to_owned(),
        };
        let _ = writeln!(out, "  {:>12}  {who:<6} {}", ms(line.t), line.text);
    }
    out
}
