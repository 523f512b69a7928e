//! An engine command as a `redis` crate request.

use std::sync::LazyLock;

use redlock_core::{Command, NodeErrorKind, RedisForm, Reply, Script};

use crate::reply::{map_error, map_result, needs_new_connection};

static ACQUIRE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(Script::Acquire.source()));
static RELEASE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(Script::Release.source()));
static EXTEND: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(Script::Extend.source()));
static ACQUIRE_CHECKED: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(Script::AcquireChecked.source()));
static ACQUIRE_FENCED: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(Script::AcquireFenced.source()));
static COMMIT_FENCE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(Script::CommitFence.source()));
static TRUST: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(Script::Trust.source()));

/// How often a script is tried when the node keeps answering `NOSCRIPT`: each try loads it
/// (`EVALSHA`, then `SCRIPT LOAD` and `EVALSHA` again), and a `SCRIPT FLUSH` between that load
/// and that call would otherwise fail the request — a release that failed so leaves its key for
/// the TTL.
const SCRIPT_ATTEMPTS: usize = 3;

/// Whether a script call failed because the node did not know the script.
fn is_noscript(result: &Result<redis::Value, redis::RedisError>) -> bool {
    matches!(result, Err(err) if err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript))
}

/// The compiled form of one of the engine's scripts.
fn compiled(script: Script) -> &'static redis::Script {
    match script {
        Script::Acquire => &ACQUIRE,
        Script::Release => &RELEASE,
        Script::Extend => &EXTEND,
        Script::AcquireChecked => &ACQUIRE_CHECKED,
        Script::Trust => &TRUST,
        Script::AcquireFenced => &ACQUIRE_FENCED,
        Script::CommitFence => &COMMIT_FENCE,
    }
}

/// A command ready to run: `SET … NX PX …`, or the script by `EVALSHA`, loading it on `NOSCRIPT`
/// (after a `SCRIPT FLUSH` or on a fresh node).
pub enum Request {
    /// A plain command.
    Cmd(redis::Cmd),
    /// A script invocation.
    Script(redis::ScriptInvocation<'static>),
}

impl Request {
    /// Builds the request for `command`, exactly as the engine's [`RedisForm`] says.
    pub fn new(command: &Command) -> Self {
        match command.redis_form() {
            RedisForm::Set { key, token, ttl_ms } => {
                let mut cmd = redis::cmd("SET");
                cmd.arg(key).arg(token).arg("NX").arg("PX").arg(ttl_ms);
                Self::Cmd(cmd)
            }
            RedisForm::Script { script, keys, args } => {
                let mut invocation = compiled(script).prepare_invoke();
                keys.for_each(|key| {
                    invocation.key(key);
                });
                invocation.arg(args.token);
                for number in args.numbers() {
                    invocation.arg(number);
                }
                Self::Script(invocation)
            }
        }
    }

    /// `command` as one plain `redis::Cmd` — `SET …`, or `EVALSHA <sha1> n keys… args…` — to
    /// put in a pipeline. A node that does not know the script answers `NOSCRIPT` to it: run
    /// that one again as a [`Request`], which loads the script.
    pub fn pipelined(command: &Command) -> redis::Cmd {
        match command.redis_form() {
            RedisForm::Set { key, token, ttl_ms } => {
                let mut cmd = redis::cmd("SET");
                cmd.arg(key).arg(token).arg("NX").arg("PX").arg(ttl_ms);
                cmd
            }
            RedisForm::Script { script, keys, args } => {
                let mut cmd = redis::cmd("EVALSHA");
                cmd.arg(compiled(script).get_hash()).arg(keys.len());
                keys.for_each(|key| {
                    cmd.arg(key);
                });
                cmd.arg(args.token);
                for number in args.numbers() {
                    cmd.arg(number);
                }
                cmd
            }
        }
    }

    #[cfg(any(feature = "tokio", feature = "smol"))]
    /// Runs the request on an async connection (map the result with
    /// [`map_result`](crate::map_result)).
    pub async fn run_async<C: redis::aio::ConnectionLike>(
        &self,
        conn: &mut C,
    ) -> Result<redis::Value, redis::RedisError> {
        match self {
            Self::Cmd(cmd) => cmd.query_async(conn).await,
            Self::Script(invocation) => {
                let mut result = invocation.invoke_async(conn).await;
                for _ in 1..SCRIPT_ATTEMPTS {
                    if !is_noscript(&result) {
                        break;
                    }
                    result = invocation.invoke_async(conn).await;
                }
                result
            }
        }
    }

    /// Runs the request on a blocking connection (map the result with
    /// [`map_result`](crate::map_result)).
    pub fn run(
        &self,
        conn: &mut dyn redis::ConnectionLike,
    ) -> Result<redis::Value, redis::RedisError> {
        match self {
            Self::Cmd(cmd) => cmd.query(conn),
            Self::Script(invocation) => {
                let mut result = invocation.invoke(conn);
                for _ in 1..SCRIPT_ATTEMPTS {
                    if !is_noscript(&result) {
                        break;
                    }
                    result = invocation.invoke(conn);
                }
                result
            }
        }
    }
}

/// The replies of a batch, one per command in order, and whether the connection must be
/// dropped (its transport failed or timed out: a late reply would be read as the answer to the
/// next command).
pub struct BatchReplies {
    /// One reply per command.
    pub replies: Vec<Reply>,
    /// Whether to reconnect before the next request.
    pub reconnect: bool,
}

impl BatchReplies {
    fn failed(err: &redis::RedisError, count: usize) -> Self {
        Self {
            replies: vec![Reply::Error(map_error(err)); count],
            reconnect: err.is_io_error() || err.is_timeout() || needs_new_connection(err),
        }
    }

    /// The reply of one request run on its own.
    fn single(result: Result<redis::Value, redis::RedisError>) -> Self {
        match result {
            Err(err) => Self::failed(&err, 1),
            ok => Self {
                replies: vec![map_result(ok)],
                reconnect: false,
            },
        }
    }

    /// Maps a pipeline's answer; a command the node answered `NOSCRIPT` is left open for the
    /// caller to run again on its own (which loads the script).
    fn pipelined(
        values: Result<Vec<redis::Value>, redis::RedisError>,
        count: usize,
    ) -> Result<Partial, Self> {
        let values = values.map_err(|err| Self::failed(&err, count))?;
        if values.len() != count {
            // Not one answer per command: the connection cannot be trusted any more.
            return Err(Self {
                replies: vec![Reply::Error(NodeErrorKind::Protocol); count],
                reconnect: true,
            });
        }
        let replies = values
            .into_iter()
            .map(|value| match &value {
                redis::Value::ServerError(err) if err.code() == "NOSCRIPT" => None,
                _ => Some(map_result(Ok(value))),
            })
            .collect();
        Ok(Partial {
            replies,
            reconnect: false,
        })
    }
}

fn pipeline<'a>(commands: impl Iterator<Item = &'a Command>) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for command in commands {
        pipe.add_command(Request::pipelined(command));
    }
    pipe
}

/// Runs `commands` on a blocking connection as one pipeline (one round trip, in order; a
/// single command as a plain request), running again on its own each command whose script the
/// node did not know.
pub fn run_batch(conn: &mut dyn redis::ConnectionLike, commands: &[&Command]) -> BatchReplies {
    if let [command] = commands {
        return BatchReplies::single(Request::new(command).run(conn));
    }
    let values = pipeline(commands.iter().copied()).query(conn);
    match BatchReplies::pipelined(values, commands.len()) {
        Ok(mut replies) => {
            for (index, command) in replies.to_rerun(commands) {
                replies.rerun(index, Request::new(command).run(conn));
            }
            replies.done()
        }
        Err(failed) => failed,
    }
}

/// [`run_batch`] on an async connection.
#[cfg(any(feature = "tokio", feature = "smol"))]
pub async fn run_batch_async<C: redis::aio::ConnectionLike>(
    conn: &mut C,
    commands: &[&Command],
) -> BatchReplies {
    if let [command] = commands {
        return BatchReplies::single(Request::new(command).run_async(conn).await);
    }
    let values = pipeline(commands.iter().copied()).query_async(conn).await;
    match BatchReplies::pipelined(values, commands.len()) {
        Ok(mut replies) => {
            for (index, command) in replies.to_rerun(commands) {
                let result = Request::new(command).run_async(conn).await;
                replies.rerun(index, result);
            }
            replies.done()
        }
        Err(failed) => failed,
    }
}

/// A pipeline's replies while the commands the node answered `NOSCRIPT` run again on their own.
struct Partial {
    replies: Vec<Option<Reply>>,
    reconnect: bool,
}

impl Partial {
    /// The commands to run again, with their positions.
    fn to_rerun<'a>(&self, commands: &[&'a Command]) -> Vec<(usize, &'a Command)> {
        self.replies
            .iter()
            .zip(commands)
            .enumerate()
            .filter(|(_, (reply, _))| reply.is_none())
            .map(|(index, (_, command))| (index, *command))
            .collect()
    }

    fn rerun(&mut self, index: usize, result: Result<redis::Value, redis::RedisError>) {
        let again = BatchReplies::single(result);
        self.reconnect |= again.reconnect;
        self.replies[index] = again.replies.into_iter().next();
    }

    fn done(self) -> BatchReplies {
        BatchReplies {
            replies: self
                .replies
                .into_iter()
                .map(|reply| reply.unwrap_or(Reply::Error(NodeErrorKind::Protocol)))
                .collect(),
            reconnect: self.reconnect,
        }
    }
}

/// Each reply of a batch with its request's id, traced and counted as `node`'s answer after
/// `latency`.
pub fn answered(
    node: &str,
    latency: std::time::Duration,
    transmits: Vec<redlock_core::Transmit>,
    replies: Vec<Reply>,
) -> Vec<(redlock_core::RequestId, Reply)> {
    transmits
        .into_iter()
        .zip(replies)
        .map(|(transmit, reply)| {
            tracing::debug!(node, ?reply, ?latency, "reply");
            crate::telemetry::node_reply(node, latency, &reply);
            (transmit.id, reply)
        })
        .collect()
}
