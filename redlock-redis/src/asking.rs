//! Following an `ASK` on a cluster node: during a legacy slot migration (`CLUSTER SETSLOT …
//! MIGRATING`/`IMPORTING` and `MIGRATE`), the source master answers `ASK <slot> <host:port>`
//! for a key it no longer holds, and the importing master serves that key only to a command
//! that comes right after `ASKING`. A request so answered goes to the importing master once,
//! each of its commands after an `ASKING`, and the slot map stays as it is (the source still
//! serves the slot's other keys).
//!
//! # What it never does
//! It never sends `ASKING` inside a transaction (the server would queue it, and the `EXEC`
//! would answer one item too many): one `ASKING` before `MULTI` covers the whole transaction.
//! It never hands an `ASKING` reply to the reading of a batch: the reading sees the replies
//! of its own commands only, in order.

use redis::{Pipeline, Value};

/// How many masters that an `ASK` named and the slot map does not know a cluster node keeps a
/// connection to until it learns the map again (the oldest goes first): a master added to the
/// cluster after the map was learnt and importing a slot, as a scale-out does, gets one
/// connection rather than one per batch, and `ASK`s naming ever new addresses keep no more.
pub(crate) const IMPORTING_KEPT: usize = 8;

/// A pipeline as it goes on the wire, and which of its commands are an added `ASKING` (none
/// when the node did not answer `ASK`: no allocation then).
pub(crate) struct Wire {
    pub pipe: Pipeline,
    /// Per command on the wire, whether it is an added `ASKING`; empty when none was added.
    added: Vec<bool>,
}

impl Wire {
    /// `pipe` as it is.
    pub(crate) fn plain(pipe: Pipeline) -> Self {
        Self {
            pipe,
            added: Vec::new(),
        }
    }

    /// `pipe` for the importing master of a migration: `ASKING` before each command outside a
    /// transaction, and before each `MULTI`.
    pub(crate) fn asking(pipe: &Pipeline) -> Self {
        let mut asked = redis::pipe();
        asked.ignore_errors();
        let mut added = Vec::with_capacity(pipe.len() * 2);
        let mut in_transaction = false;
        for cmd in pipe.cmd_iter() {
            let name = match cmd.args_iter().next() {
                Some(redis::Arg::Simple(name)) => name,
                _ => &[][..],
            };
            if !in_transaction {
                asked.cmd("ASKING");
                added.push(true);
            }
            if name.eq_ignore_ascii_case(b"MULTI") {
                in_transaction = true;
            } else if name.eq_ignore_ascii_case(b"EXEC") || name.eq_ignore_ascii_case(b"DISCARD") {
                in_transaction = false;
            }
            asked.add_command(cmd.clone());
            added.push(false);
        }
        Self { pipe: asked, added }
    }

    /// How many commands go on the wire (and how many replies come back).
    pub(crate) fn len(&self) -> usize {
        match self.added.is_empty() {
            true => self.pipe.len(),
            false => self.added.len(),
        }
    }

    /// The replies to the pipeline's own commands, in order, without those of the added
    /// `ASKING`s.
    pub(crate) fn own<T>(&self, replies: impl IntoIterator<Item = T>) -> impl Iterator<Item = T> {
        let added = self.added.iter().copied().chain(std::iter::repeat(false));
        replies
            .into_iter()
            .zip(added)
            .filter_map(|(reply, added)| (!added).then_some(reply))
    }

    /// [`Wire::own`] of a whole answer; an error stays the error.
    pub(crate) fn own_values(
        &self,
        values: redis::RedisResult<Vec<Value>>,
    ) -> redis::RedisResult<Vec<Value>> {
        values.map(|values| self.own(values).collect())
    }
}

/// Where a reply redirects with `ASK`: the importing master's `host:port` as the cluster
/// announces it (`None`: not an `ASK`).
pub(crate) fn ask_target(result: &Result<Value, redis::RedisError>) -> Option<&str> {
    match result {
        Ok(Value::ServerError(err)) if err.code() == "ASK" => {
            err.details()?.split_ascii_whitespace().nth(1)
        }
        Err(err) if err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::Ask) => {
            err.redirect_node().map(|(addr, _)| addr)
        }
        _ => None,
    }
}

/// A `host:port` split at its last colon (an IPv6 host keeps its own); `None` when the port is
/// not a number.
pub(crate) fn host_and_port(target: &str) -> Option<(&str, u16)> {
    let (host, port) = target.rsplit_once(':')?;
    Some((host, port.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(pipe: &Pipeline) -> Vec<String> {
        pipe.cmd_iter()
            .map(|cmd| match cmd.args_iter().next() {
                Some(redis::Arg::Simple(name)) => String::from_utf8_lossy(name).into_owned(),
                _ => String::new(),
            })
            .collect()
    }

    #[test]
    fn asking_goes_before_each_command_and_each_transaction_never_inside_one() {
        let mut pipe = redis::pipe();
        pipe.cmd("SET").arg("k").arg("v");
        pipe.cmd("MULTI").cmd("SET").arg("k").cmd("GET").arg("k");
        pipe.cmd("EXEC");
        pipe.cmd("EVALSHA").arg("0");
        let wire = Wire::asking(&pipe);
        assert_eq!(
            names(&wire.pipe),
            [
                "ASKING", "SET", "ASKING", "MULTI", "SET", "GET", "EXEC", "ASKING", "EVALSHA"
            ]
        );
        assert_eq!(wire.len(), 9);
        let replies: Vec<usize> = wire.own(0..9).collect();
        assert_eq!(
            replies,
            [1, 3, 4, 5, 6, 8],
            "the replies of the pipeline's own commands"
        );
    }

    #[test]
    fn a_plain_wire_is_the_pipeline_as_it_is() {
        let mut pipe = redis::pipe();
        pipe.cmd("SET").arg("k").arg("v").cmd("GET").arg("k");
        let wire = Wire::plain(pipe);
        assert_eq!(names(&wire.pipe), ["SET", "GET"]);
        assert_eq!(wire.len(), 2);
        assert_eq!(wire.own(0..2).collect::<Vec<_>>(), [0, 1]);
        assert_eq!(
            wire.own_values(Ok(vec![Value::Okay, Value::Nil])).ok(),
            Some(vec![Value::Okay, Value::Nil])
        );
    }

    #[test]
    fn an_ask_names_the_importing_master() {
        let server = |text: &str| Ok(parse_error(text));
        assert_eq!(
            ask_target(&server("ASK 3999 127.0.0.1:7001")),
            Some("127.0.0.1:7001")
        );
        assert_eq!(
            ask_target(&parse_error("ASK 3999 127.0.0.1:7001").extract_error()),
            Some("127.0.0.1:7001"),
            "a single command's error"
        );
        assert_eq!(ask_target(&server("MOVED 3999 127.0.0.1:7001")), None);
        assert_eq!(ask_target(&Ok(Value::Okay)), None);
        assert_eq!(host_and_port("127.0.0.1:7001"), Some(("127.0.0.1", 7001)));
        assert_eq!(host_and_port("::1:7001"), Some(("::1", 7001)));
        assert_eq!(host_and_port("host:port"), None);
        assert_eq!(host_and_port("host"), None);
    }

    /// A server error as a RESP3 reply carries it (`-CODE details`).
    fn parse_error(text: &str) -> Value {
        redis::parse_redis_value(format!("-{text}\r\n").as_bytes()).unwrap_or(Value::Nil)
    }
}
