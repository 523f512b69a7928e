//! An engine command as a `redis` crate request.

use std::sync::LazyLock;

use redlock_core::{Command, RedisForm, Script};

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
