//! An engine command as a `redis` crate request.

use std::sync::LazyLock;

use redlock_core::{Command, NodeErrorKind, RedisForm, Reply, RequestId, Script, Transmit};

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
        // Room for every argument up front: one allocation each for the data and the offsets.
        const NUMBER: usize = 20;
        match command.redis_form() {
            RedisForm::Set { key, token, ttl_ms } => {
                let mut cmd = redis::Cmd::with_capacity(6, 9 + key.len() + token.len() + NUMBER);
                cmd.arg("SET")
                    .arg(key)
                    .arg(token)
                    .arg("NX")
                    .arg("PX")
                    .arg(ttl_ms);
                cmd
            }
            RedisForm::Script { script, keys, args } => {
                let mut key_bytes = 0;
                keys.for_each(|key| key_bytes += key.len());
                let count = 3 + keys.len() + args.len();
                let size = 7 + 40 + NUMBER + key_bytes + args.token.len() + NUMBER * args.len();
                let mut cmd = redis::Cmd::with_capacity(count, size);
                cmd.arg("EVALSHA")
                    .arg(compiled(script).get_hash())
                    .arg(keys.len());
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

/// The answers to a batch: each request's id and reply, in order.
pub type Answers = smallvec::SmallVec<[(RequestId, Reply); 1]>;

/// The answers to a batch, one per request in order with its id, and whether the connection
/// must be dropped (its transport failed or timed out: a late reply would be read as the answer
/// to the next command).
pub struct BatchReplies {
    /// One answer per request (inline for a batch of one, the common case of an uncontended
    /// client: no allocation).
    pub answers: Answers,
    /// Whether a blocking connection must be dropped before the next request: its transport
    /// broke (a write failed, the peer closed it, a reply did not parse) or it failed to set up.
    /// A read timeout is not a reason: see [`run_batch`].
    pub reconnect: bool,
    /// Whether even a multiplexed, reconnecting connection must be rebuilt: a setup error it
    /// keeps failing with ([`needs_new_connection`]). A timeout is not one: a multiplexed
    /// connection matches replies to requests in order and drops a late one, so keeping it
    /// keeps each node's requests in order (a new connection could let a release overtake a
    /// `SET` still on its way on the old one).
    pub rebuild: bool,
}

impl BatchReplies {
    /// Every request of `batch` failed with `err`.
    pub fn failed(batch: &[Transmit], err: &redis::RedisError) -> Self {
        let mut replies = Self::all(batch, Reply::Error(map_error(err)), is_broken(err));
        replies.rebuild = needs_new_connection(err);
        replies
    }

    /// Every request of `batch` failed because running it panicked.
    pub fn panicked(batch: &[Transmit]) -> Self {
        let mut replies = Self::all(batch, Reply::Error(NodeErrorKind::Protocol), true);
        replies.rebuild = true;
        replies
    }

    fn all(batch: &[Transmit], reply: Reply, reconnect: bool) -> Self {
        Self {
            answers: batch.iter().map(|t| (t.id, reply)).collect(),
            reconnect,
            rebuild: false,
        }
    }

    /// Reads the results of `batch`'s requests, in order, before any `NOSCRIPT` re-run;
    /// returns the positions of the requests to run again on their own (which loads the
    /// script). The one mapping of raw results to answers, for blocking and async connections.
    fn read(
        batch: &[Transmit],
        results: impl IntoIterator<Item = Result<redis::Value, redis::RedisError>>,
    ) -> (Self, Vec<usize>) {
        let mut replies = Self::all(batch, Reply::Nil, false);
        let mut again = Vec::new();
        for (index, result) in results.into_iter().enumerate() {
            match result {
                Ok(redis::Value::ServerError(err)) if err.code() == "NOSCRIPT" => {
                    again.push(index);
                }
                Err(err)
                    if err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
                {
                    again.push(index);
                }
                result => replies.rerun(index, result),
            }
        }
        (replies, again)
    }

    /// The answer of request `index`, run again on its own.
    fn rerun(&mut self, index: usize, result: Result<redis::Value, redis::RedisError>) {
        if let Err(err) = &result {
            self.reconnect |= is_broken(err);
            self.rebuild |= needs_new_connection(err);
        }
        if let Some((_, reply)) = self.answers.get_mut(index) {
            *reply = map_result(result);
        }
    }

    /// Traces and counts each answer as `node`'s after `latency`.
    pub fn trace(&self, node: &str, latency: std::time::Duration) {
        for (_, reply) in &self.answers {
            tracing::debug!(node, ?reply, ?latency, "reply");
            crate::telemetry::node_reply(node, latency, reply);
        }
    }
}

/// Whether a blocking connection whose request failed so must be dropped: a broken transport
/// or a setup error. Not a read timeout: the `redis` crate skips the late reply when it comes
/// (see [`run_batch`]).
fn is_broken(err: &redis::RedisError) -> bool {
    (err.is_io_error() && !err.is_timeout()) || needs_new_connection(err)
}

fn pipeline(batch: &[Transmit]) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for transmit in batch {
        pipe.add_command(Request::pipelined(&transmit.command));
    }
    pipe
}

/// Runs `batch` on a blocking connection as one write (one round trip, in order), running again
/// on its own each request whose script the node did not know.
///
/// # Implementation note
/// A reply that does not come within the connection's read timeout (`read_timeout`) fails its
/// request, and the connection is **kept**: the `redis` crate counts each reply it gave up on
/// and skips it when it comes, so a late reply is never read as another request's answer, and
/// everything sent later on this connection still runs after what was sent before — a release
/// can never overtake its own `SET` through a new connection. Once one reply of a batch timed
/// out, the rest are given up on with a 1 ms wait each instead of a full timeout each. A write
/// that failed, or any other broken transport, drops the connection ([`BatchReplies::reconnect`]).
pub fn run_batch(
    conn: &mut redis::Connection,
    batch: &[Transmit],
    read_timeout: std::time::Duration,
) -> BatchReplies {
    let packed = match batch {
        [transmit] => Request::pipelined(&transmit.command).get_packed_command(),
        _ => pipeline(batch).get_packed_pipeline(),
    };
    if let Err(err) = conn.send_packed_command(&packed) {
        // Part of the write may have gone out: the stream is not to be trusted.
        let mut replies = BatchReplies::failed(batch, &err);
        replies.reconnect = true;
        return replies;
    }
    let mut gave_up = false;
    let mut results = Vec::with_capacity(batch.len());
    for _ in batch {
        let result = conn.recv_response();
        if let Err(err) = &result
            && err.is_timeout()
            && !gave_up
        {
            gave_up = true;
            let _ = conn.set_read_timeout(Some(std::time::Duration::from_millis(1)));
        }
        results.push(result);
    }
    if gave_up {
        let _ = conn.set_read_timeout(Some(read_timeout));
    }
    let (mut replies, again) = BatchReplies::read(batch, results);
    for index in again {
        replies.rerun(index, Request::new(&batch[index].command).run(conn));
    }
    replies
}

/// [`run_batch`] on an async connection.
#[cfg(any(feature = "tokio", feature = "smol"))]
pub async fn run_batch_async<C: redis::aio::ConnectionLike>(
    conn: &mut C,
    batch: &[Transmit],
) -> BatchReplies {
    let (mut replies, again) = match batch {
        [transmit] => {
            let result = Request::pipelined(&transmit.command)
                .query_async(conn)
                .await;
            BatchReplies::read(batch, [result])
        }
        _ => match pipeline(batch).query_async::<Vec<redis::Value>>(conn).await {
            Ok(values) if values.len() == batch.len() => {
                BatchReplies::read(batch, values.into_iter().map(Ok))
            }
            // Not one answer per command: the connection cannot be trusted any more.
            Ok(_) => {
                let mut replies =
                    BatchReplies::all(batch, Reply::Error(NodeErrorKind::Protocol), true);
                replies.rebuild = true;
                return replies;
            }
            Err(err) => return BatchReplies::failed(batch, &err),
        },
    };
    for index in again {
        let result = Request::new(&batch[index].command).run_async(conn).await;
        replies.rerun(index, result);
    }
    replies
}
