//! The in-memory Redis node the simulated network delivers requests to.

use std::collections::BTreeMap;
use std::time::Duration;

use redlock_core::{Command, NodeErrorKind, Op, Reply};

use crate::At;

/// key -> (token, expiry).
pub(crate) type Keys = BTreeMap<Vec<u8>, (Vec<u8>, At)>;

/// One Redis node: key -> (token, expiry), with the semantics of `SET NX PX` and the three
/// scripts (expired keys are gone for every command).
#[derive(Debug, Clone, Default)]
pub(crate) struct Node {
    pub(crate) keys: Keys,
}

impl Node {
    fn purge(&mut self, now: At) {
        self.keys.retain(|_, (_, expires)| *expires > now);
    }

    /// Whether any of the command's keys is held under another token.
    pub(crate) fn foreign(&mut self, now: At, command: &Command) -> bool {
        self.purge(now);
        let token = command.spec().token().as_bytes();
        command
            .spec()
            .keys()
            .any(|key| self.keys.get(key).is_some_and(|(value, _)| value != token))
    }

    pub(crate) fn run(&mut self, now: At, command: &Command) -> Reply {
        self.purge(now);
        let token = command.spec().token().as_bytes();
        let keys: Vec<&[u8]> = command.spec().keys().collect();
        let ttl = Duration::from_millis(command.ttl_ms().unwrap_or(0));
        let single = keys.len() == 1;
        match command.op() {
            Op::SetIfAbsent => {
                if keys.iter().any(|key| self.keys.contains_key(*key)) {
                    return if single { Reply::Nil } else { Reply::Int(0) };
                }
                for key in keys {
                    self.keys.insert(key.to_vec(), (token.to_vec(), now + ttl));
                }
                if single { Reply::Ok } else { Reply::Int(1) }
            }
            Op::DeleteIfEquals => {
                let (mut released, mut foreign) = (0, 0);
                for key in keys {
                    match self.keys.get(key) {
                        Some((value, _)) if value == token => {
                            self.keys.remove(key);
                            released += 1;
                        }
                        Some(_) => foreign += 1,
                        None => {}
                    }
                }
                Reply::Int(if foreign > 0 {
                    -1
                } else {
                    i64::from(released > 0)
                })
            }
            Op::ExpireIfEquals => {
                let held = keys
                    .iter()
                    .all(|key| self.keys.get(*key).is_some_and(|(value, _)| value == token));
                if held {
                    // The extend script only ever lengthens a key's TTL.
                    for key in keys {
                        if let Some((_, expires)) = self.keys.get_mut(key) {
                            *expires = (*expires).max(now + ttl);
                        }
                    }
                }
                Reply::Int(i64::from(held))
            }
            _ => Reply::Error(NodeErrorKind::Other),
        }
    }
}
