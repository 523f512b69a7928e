//! An engine command as a `redis` crate request.

use std::sync::LazyLock;

#[cfg(any(feature = "tokio", feature = "smol"))]
use redis::aio::MultiplexedConnection;

use redlock_core::{
    Arg, Dialect, FENCE_KEY_PREFIX, Keyspace, NodeBatch, NodeErrorKind, PartRead, PartValue,
    ProofRead, RELEASED_CHANNEL_PREFIX, RedisForm, Reply, RequestId, Script, SealRead, SealReplies,
    Transmit,
};

use crate::asking::{Wire, ask_target};
use crate::memory::Tracking;
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
    match result {
        Ok(redis::Value::ServerError(err)) => err.code() == "NOSCRIPT",
        Err(err) => err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript),
        Ok(_) => false,
    }
}

/// Every script the engine runs: those a node lacks are loaded on each connection as it is
/// made (see [`crate::dialect`]), so that no batch on it meets `NOSCRIPT` until the node's
/// scripts are flushed.
pub(crate) const SCRIPTS: [Script; 7] = [
    Script::Acquire,
    Script::Release,
    Script::Extend,
    Script::AcquireChecked,
    Script::Trust,
    Script::AcquireFenced,
    Script::CommitFence,
];

/// The SHA1 `script` runs by (`EVALSHA`), as `SCRIPT EXISTS` asks about it.
pub(crate) fn script_hash(script: Script) -> &'static str {
    compiled(script).get_hash()
}

/// The compiled form of one of the engine's scripts (a script added here goes in [`SCRIPTS`]
/// too).
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

/// One part of a form as a plain `redis::Cmd` to put in a pipeline: a native command, or
/// `EVALSHA <sha1> n keys… args…` for a script (a node that does not know the script answers
/// `NOSCRIPT`: a release, an extension or a fence's commit runs again as a [`Request`], which
/// loads it; any other request is not run again, see [`Reading::reruns`]).
pub(crate) fn part_cmd(form: &RedisForm<'_>, part: usize) -> redis::Cmd {
    // Room for every argument up front: one allocation each for the data and the offsets.
    let (count, size) = part_room(form, part);
    let mut cmd = redis::Cmd::with_capacity(count, size);
    write_part(form, part, &mut cmd);
    cmd
}

/// The pipeline of `forms`' parts alone, each transaction form in its own `MULTI`: what a
/// batch with nothing to read beside its requests sends ([`Outgoing::Parts`]) on an async
/// connection. The one builder of such pipelines, whose output [`crate::encoded`] compares
/// with, step by step (a blocking connection packs the same commands from the same steps).
#[cfg(any(feature = "tokio", feature = "smol", test))]
pub(crate) fn parts_pipeline(forms: &[RedisForm<'_>]) -> redis::Pipeline {
    let mut pipe = each_answered();
    for form in forms {
        push_request(&mut pipe, form, Seals::new());
    }
    pipe
}

/// An empty pipeline whose every command's reply is read, an error reply too (not the first
/// error for the whole pipeline): each request's parts are answered one by one.
fn each_answered() -> redis::Pipeline {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    pipe
}

/// One command of a request in a pipeline ([`request_steps`]).
pub(crate) enum Step<'f, 'a> {
    /// A command of one word: `MULTI` or `EXEC`.
    Marker(&'static str),
    /// Part `.1` of the form.
    Part(&'f RedisForm<'a>, usize),
    /// The request's next seal read (they come in order).
    Seal,
}

/// The commands of a request whose form is `form` and whose seal reads `seals` values, in
/// their order in a pipeline: its parts, then its seal's reads; in a `MULTI` of its own when
/// it has a seal or its form is a transaction.
pub(crate) fn request_steps<'f, 'a>(
    form: &'f RedisForm<'a>,
    seals: usize,
) -> impl Iterator<Item = Step<'f, 'a>> {
    let transaction = seals > 0 || form.is_transaction();
    let marker = move |word| transaction.then_some(Step::Marker(word));
    marker("MULTI")
        .into_iter()
        .chain((0..form.parts()).map(move |part| Step::Part(form, part)))
        .chain((0..seals).map(|_| Step::Seal))
        .chain(marker("EXEC"))
}

/// A request's seal reads, in order (inline: a seal reads one or two values).
type Seals = smallvec::SmallVec<[redis::Cmd; 2]>;

/// Adds request `form` to `pipe` ([`request_steps`]), with its seal's reads `seals` (none
/// for a request that is not sealed).
fn push_request(pipe: &mut redis::Pipeline, form: &RedisForm<'_>, seals: Seals) {
    let mut reads = seals.into_iter();
    for step in request_steps(form, reads.len()) {
        match step {
            Step::Marker(word) => {
                pipe.cmd(word);
            }
            Step::Part(form, part) => {
                pipe.add_command(part_cmd(form, part));
            }
            Step::Seal => {
                if let Some(read) = reads.next() {
                    pipe.add_command(read);
                }
            }
        }
    }
}

/// How many arguments [`write_part`] writes, and about how many bytes (numbers at their
/// longest): the room [`part_cmd`] makes for them up front.
fn part_room(form: &RedisForm<'_>, part: usize) -> (usize, usize) {
    const NUMBER: usize = 20;
    if let RedisForm::Script { keys, args, .. } = *form {
        let mut key_bytes = 0;
        keys.for_each(|key| key_bytes += key.len());
        let count = 3 + keys.len() + args.len();
        let size = 7 + 40 + NUMBER + key_bytes + args.token.len() + NUMBER * args.len();
        return (count, size);
    }
    let (mut count, mut size) = (0, 0);
    form.for_each_arg(part, |arg| {
        count += 1;
        size += match arg {
            Arg::Bytes(bytes) => bytes.len(),
            Arg::Number(_) => NUMBER,
            // On a cluster, `{tag}` too: at most 5 bytes.
            Arg::Channel(_, key) => RELEASED_CHANNEL_PREFIX.len() + key.len() + 5,
            Arg::Fence(_, key) => FENCE_KEY_PREFIX.len() + key.len(),
        };
    });
    (count, size)
}

/// Writes the arguments of one part of a form to `out`, in order: the one encoding of a form,
/// which [`part_cmd`] builds a command of and [`crate::encoded`] compares a command with.
pub(crate) fn write_part<W: redis::RedisWrite + ?Sized>(
    form: &RedisForm<'_>,
    part: usize,
    out: &mut W,
) {
    use redis::ToRedisArgs;
    if let RedisForm::Script { script, keys, args } = *form {
        "EVALSHA".write_redis_args(out);
        compiled(script).get_hash().write_redis_args(out);
        keys.len().write_redis_args(out);
        keys.for_each(|key| key.write_redis_args(out));
        args.token.write_redis_args(out);
        for number in args.numbers() {
            number.write_redis_args(out);
        }
        if let Some(tag) = args.tag() {
            tag.write_redis_args(out);
        }
        return;
    }
    form.for_each_arg(part, |arg| match arg {
        Arg::Bytes(bytes) => bytes.write_redis_args(out),
        Arg::Number(n) => n.write_redis_args(out),
        Arg::Channel(Keyspace::Standalone, key) => {
            Prefixed(RELEASED_CHANNEL_PREFIX, key).write_redis_args(out);
        }
        Arg::Channel(keyspace, key) => keyspace.released_channel(key).write_redis_args(out),
        Arg::Fence(keyspace, key) => keyspace.fence_key(key).write_redis_args(out),
    });
}

/// One argument made of a prefix and a key (a release channel), written straight into the
/// command: the same bytes as [`released_channel`](redlock_core::released_channel), without a
/// buffer of its own.
struct Prefixed<'a>(&'a [u8], &'a [u8]);

impl redis::ToRedisArgs for Prefixed<'_> {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        use std::io::Write;
        let mut arg = out.writer_for_next_arg();
        // Writes into a command's own buffer, which cannot fail.
        let _ = arg.write_all(self.0);
        let _ = arg.write_all(self.1);
    }
}

/// A script ready to run by `EVALSHA`, loading it on `NOSCRIPT` (after a `SCRIPT FLUSH`: each
/// connection loads the scripts as it is made).
struct Request(redis::ScriptInvocation<'static>);

impl Request {
    /// The script invocation of a script form (`None` for any other form).
    fn of(form: &RedisForm<'_>) -> Option<Self> {
        let RedisForm::Script { script, keys, args } = *form else {
            return None;
        };
        let mut invocation = compiled(script).prepare_invoke();
        keys.for_each(|key| {
            invocation.key(key);
        });
        invocation.arg(args.token);
        for number in args.numbers() {
            invocation.arg(number);
        }
        if let Some(tag) = args.tag() {
            invocation.arg(tag);
        }
        Some(Self(invocation))
    }

    #[cfg(any(feature = "tokio", feature = "smol"))]
    /// Runs the script on an async connection.
    async fn run_async<C: redis::aio::ConnectionLike>(
        &self,
        conn: &mut C,
    ) -> Result<redis::Value, redis::RedisError> {
        let mut result = self.0.invoke_async(conn).await;
        for _ in 1..SCRIPT_ATTEMPTS {
            if !is_noscript(&result) {
                break;
            }
            result = self.0.invoke_async(conn).await;
        }
        result
    }

    /// Runs the script on a blocking connection.
    #[cfg(feature = "blocking")]
    fn run(&self, conn: &mut dyn redis::ConnectionLike) -> Result<redis::Value, redis::RedisError> {
        let mut result = self.0.invoke(conn);
        for _ in 1..SCRIPT_ATTEMPTS {
            if !is_noscript(&result) {
                break;
            }
            result = self.0.invoke(conn);
        }
        result
    }
}

/// The answers to a batch: each request's id and reply, in order.
pub(crate) type Answers = smallvec::SmallVec<[(RequestId, Reply); 1]>;

/// The answers to a batch, one per request in order with its id, and whether the connection
/// must be dropped (its transport failed or timed out: a late reply would be read as the answer
/// to the next command).
pub(crate) struct BatchReplies {
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
    /// The requests (by index into the batch) a cluster master redirected with `ASK`, and to
    /// which master (`host:port` as announced); empty on every other node.
    pub asked: Vec<(usize, String)>,
}

impl BatchReplies {
    /// Every request of `batch` failed with `err`.
    pub(crate) fn failed(batch: &[Transmit], err: &redis::RedisError) -> Self {
        let mut replies = Self::all(batch, Reply::Error(map_error(err)), is_broken(err));
        replies.rebuild = needs_new_connection(err);
        replies
    }

    /// Every request of `batch` refused without sending it, as `kind` says; the connection
    /// stays.
    pub(crate) fn refused(batch: &[Transmit], kind: NodeErrorKind) -> Self {
        Self::all(batch, Reply::Error(kind), false)
    }

    /// Answers gathered elsewhere (a cluster node's masters), on connections of their own.
    pub(crate) fn answered(answers: Answers) -> Self {
        Self {
            answers,
            reconnect: false,
            rebuild: false,
            asked: Vec::new(),
        }
    }

    /// Every request of `batch` failed because running it panicked.
    #[cfg(feature = "blocking")]
    pub(crate) fn panicked(batch: &[Transmit]) -> Self {
        let mut replies = Self::all(batch, Reply::Error(NodeErrorKind::Protocol), true);
        replies.rebuild = true;
        replies
    }

    /// Takes `more`, the replies to a batch of this one's requests `indexes` (in that order),
    /// in their places: their answers, the connection's state, where they were asked to go.
    pub(crate) fn merge(&mut self, indexes: &[usize], more: BatchReplies) {
        for (&index, answer) in indexes.iter().zip(more.answers) {
            if let Some(slot) = self.answers.get_mut(index) {
                *slot = answer;
            }
        }
        self.reconnect |= more.reconnect;
        self.rebuild |= more.rebuild;
        let asked = more.asked.into_iter();
        self.asked
            .extend(asked.filter_map(|(at, host)| Some((*indexes.get(at)?, host))));
    }

    fn all(batch: &[Transmit], reply: Reply, reconnect: bool) -> Self {
        Self {
            answers: batch.iter().map(|t| (t.id, reply)).collect(),
            reconnect,
            rebuild: false,
            asked: Vec::new(),
        }
    }

    /// Traces and counts each answer as `node`'s after `latency` (if it was timed: see
    /// [`Stopwatch`](crate::telemetry::Stopwatch)).
    pub(crate) fn trace(&self, node: &str, latency: Option<std::time::Duration>) {
        for (_, reply) in &self.answers {
            // The target `Stopwatch::start` asks about.
            match latency {
                Some(latency) => {
                    tracing::debug!(target: "redlock_redis::request", node, ?reply, ?latency, "reply");
                }
                None => tracing::debug!(target: "redlock_redis::request", node, ?reply, "reply"),
            }
            if let Reply::Ineligible { for_ms, cause } = reply {
                tracing::info!(node, for_ms, cause = cause.word(), "node sits out: {cause}");
            }
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

/// A batch on its way: each request's form on this node (as the core's [`NodeBatch`] plans it),
/// and the answers of its parts so far. The one mapping of raw results to answers, for blocking
/// and async connections; every decision about the node's memory is the [`NodeBatch`]'s.
struct Reading<'a> {
    batch: &'a [Transmit],
    plan: NodeBatch,
    /// Each request's form on this node, as the plan gave it (planned once: the costly part of
    /// a batch on our side).
    forms: smallvec::SmallVec<[RedisForm<'a>; 1]>,
    /// The connection's watch over its node's memory, if it has one.
    tracking: Option<&'a Tracking>,
    /// Each request's part answers, in order.
    /// Inline up to two parts (a release and its notice) for a batch of one.
    parts: smallvec::SmallVec<[smallvec::SmallVec<[Reply; 2]>; 1]>,
    /// Requests whose script the node did not know: run again on their own (loading it).
    again: Vec<usize>,
    /// `(request, part)` of each compare-and-delete that answered 0: a `GET` tells absent from
    /// held by another, for the report only.
    lookups: Vec<(usize, usize)>,
    reconnect: bool,
    rebuild: bool,
    /// Whether every command goes after an `ASKING` (see [`crate::asking`]).
    asking: bool,
    /// Requests answered `ASK`, and the master each was sent to.
    asked: Vec<(usize, String)>,
}

/// What a batch sends ([`Reading::outgoing`]).
enum Outgoing<'a> {
    /// Nothing (every request was deferred).
    Nothing,
    /// One command on its own: a batch of one request whose form is one command, with nothing
    /// to read beside it.
    Single(RedisForm<'a>),
    /// The requests' parts alone, as [`parts_pipeline`] builds them from the forms (nothing to
    /// read beside them, no seal, no `ASKING`), and how many replies come back: the same for
    /// every node sent the same forms, so built once for the round's nodes
    /// ([`crate::encoded`]).
    Parts(usize),
    /// A pipeline of every read and part.
    Pipeline(Wire),
}

impl Outgoing<'_> {
    /// The write, packed, and how many replies come back; `None` when nothing is to be sent.
    /// One command, or a pipeline of parts alone, is packed once for the round's nodes (see
    /// [`crate::encoded`]).
    #[cfg(feature = "blocking")]
    fn packed(
        &self,
        forms: &[RedisForm<'_>],
        last: &crate::encoded::LastPacked,
    ) -> Option<(PackedWrite, usize)> {
        match self {
            Outgoing::Nothing => None,
            Outgoing::Single(form) => Some((PackedWrite::Shared(last.packed(form, 0)), 1)),
            Outgoing::Parts(len) => Some((PackedWrite::Shared(last.packed_parts(forms)), *len)),
            Outgoing::Pipeline(wire) => Some((
                PackedWrite::Own(wire.pipe.get_packed_pipeline()),
                wire.len(),
            )),
        }
    }
}

/// The bytes a blocking connection writes: one command or a pipeline of parts alone, packed
/// for the round's nodes, or a pipeline of this node's own.
#[cfg(feature = "blocking")]
enum PackedWrite {
    Shared(std::sync::Arc<crate::encoded::Packed>),
    Own(Vec<u8>),
}

#[cfg(feature = "blocking")]
impl PackedWrite {
    fn bytes(&self) -> &[u8] {
        match self {
            PackedWrite::Shared(packed) => packed.bytes(),
            PackedWrite::Own(bytes) => bytes,
        }
    }
}

impl<'a> Reading<'a> {
    fn new(
        batch: &'a [Transmit],
        dialect: &Dialect,
        tracking: Option<&'a Tracking>,
        asking: bool,
    ) -> Self {
        // Every push read so far reaches the watch first: a connection that already heard of
        // a flush proves now instead of sending a vouched `SET` bound to be refused. A batch
        // after `ASK` neither proves nor vouches (its restart checks keep their script): an
        // `ASKING` between `CLIENT CACHING YES` and the epoch's `GET` would leave the epoch
        // untracked, and the slot is on its way to this master.
        let plan = {
            let watch = tracking.map(|tracking| {
                tracking.drain();
                tracking.lock()
            });
            let watch = watch.filter(|_| !asking);
            let mut plan =
                NodeBatch::new(batch, dialect, watch.as_deref(), std::time::Instant::now());
            // A proof's marker needs a name no other proof ever had: fresh entropy, once per
            // proving batch (without it, the seals read the epoch and its stamp).
            if !plan.reads().is_empty()
                && let Ok(nonce) = getrandom::u64()
            {
                plan.mark(nonce);
            }
            plan
        };
        // One by one, as `finish` fills its answers.
        let mut parts = smallvec::SmallVec::new();
        let mut forms = smallvec::SmallVec::new();
        for (index, transmit) in batch.iter().enumerate() {
            parts.push(smallvec::SmallVec::new());
            forms.push(plan.form(index, &transmit.command));
        }
        Self {
            batch,
            plan,
            forms,
            tracking,
            parts,
            again: Vec::new(),
            lookups: Vec::new(),
            reconnect: false,
            rebuild: false,
            asking,
            asked: Vec::new(),
        }
    }

    /// Request `index`'s form on this node.
    fn form(&self, index: usize) -> RedisForm<'a> {
        self.forms[index]
    }

    /// What the batch sends: its pipeline, its one command, or nothing. Decided once per
    /// batch (planning each request's form is the costly part of a batch on our side).
    fn outgoing(&self) -> Outgoing<'a> {
        let wire_len = self.plan.wire_len_of(self.forms.iter().copied());
        if wire_len == 0 {
            return Outgoing::Nothing;
        }
        // One command, sent as is: never after `ASKING` (that is two commands).
        if !self.asking && wire_len == 1 && self.batch.len() == 1 && self.plan.reads().is_empty() {
            return Outgoing::Single(self.form(0));
        }
        let sealed = (0..self.batch.len()).any(|index| !self.plan.seal_reads(index).is_empty());
        if !self.asking && self.plan.reads().is_empty() && !sealed {
            return Outgoing::Parts(wire_len);
        }
        Outgoing::Pipeline(self.wire(self.pipeline()))
    }

    /// `pipe` as it goes to this node: after `ASKING`s when the batch follows an `ASK`.
    fn wire(&self, pipe: redis::Pipeline) -> Wire {
        match self.asking {
            true => Wire::asking(&pipe),
            false => Wire::plain(pipe),
        }
    }

    /// Notes where request `index` was redirected, if `result` is an `ASK`.
    fn note_ask(&mut self, index: usize, result: &Result<redis::Value, redis::RedisError>) {
        if let Some(to) = ask_target(result)
            && self.asked.iter().all(|(asked, _)| *asked != index)
        {
            self.asked.push((index, to.to_owned()));
        }
    }

    fn pipeline(&self) -> redis::Pipeline {
        let mut pipe = each_answered();
        // Embedded requests go inside the proof's transaction, right before its `EXEC`.
        let embeds = self.plan.embeds();
        for read in self.plan.reads() {
            if embeds && *read == ProofRead::Exec {
                self.push_requests(&mut pipe);
            }
            let mut cmd = redis::Cmd::new();
            for arg in self.plan.read_args(*read) {
                cmd.arg(arg);
            }
            pipe.add_command(cmd);
        }
        if !embeds {
            self.push_requests(&mut pipe);
        }
        pipe
    }

    /// Every request's parts, a sealed request or a transaction form in its own `MULTI`.
    fn push_requests(&self, pipe: &mut redis::Pipeline) {
        for index in 0..self.batch.len() {
            let seals = self.plan.seal_reads(index).iter().map(|read| {
                let mut cmd = redis::Cmd::new();
                for arg in self.plan.seal_args(index, *read) {
                    cmd.arg(arg);
                }
                cmd
            });
            push_request(pipe, &self.form(index), seals.collect());
        }
    }

    /// Takes the replies of every part, in the order they were sent.
    fn read(&mut self, results: impl IntoIterator<Item = Result<redis::Value, redis::RedisError>>) {
        let mut results = results.into_iter();
        let reads = self.plan.reads();
        let mut at = 0;
        while let Some(&read) = reads.get(at) {
            let Some(result) = results.next() else { return };
            note_failure(&result, &mut self.reconnect, &mut self.rebuild);
            at += 1;
            if read != ProofRead::Multi {
                self.handle_read(read, &result);
                continue;
            }
            // A transaction: each read's `QUEUED`, then its reply in the `EXEC`'s array.
            // Embedded requests' parts come after the reads, before the `EXEC`.
            let queued = reads[at..]
                .iter()
                .take_while(|read| **read != ProofRead::Exec);
            let queued: smallvec::SmallVec<[ProofRead; 8]> = queued.copied().collect();
            at += queued.len() + 1;
            let embedded: usize = match self.plan.embeds() {
                true => (0..self.batch.len()).map(|i| self.form(i).parts()).sum(),
                false => 0,
            };
            let (reconnect, rebuild) = (&mut self.reconnect, &mut self.rebuild);
            let seen = |result: &_| note_failure(result, reconnect, rebuild);
            let count = queued.len() + embedded;
            let Some(ran) = read_transaction(Some(result), &mut results, count, seen) else {
                return;
            };
            match ran {
                Ok(items) => {
                    let mut items = items.into_iter();
                    for (read, item) in queued.into_iter().zip(items.by_ref()) {
                        self.handle_read(read, &Ok(item));
                    }
                    self.embedded_parts(items.map(|item| map_result(Ok(item))));
                }
                // Each read fails with its own refusal, or with what the node refused of the
                // proof (`OOM`, `READONLY`, not `EXECABORT`); the marker's write only with its
                // own, so a refusal of another read never turns markers off. No embedded part
                // ran: each fails with its own refusal (a key outside the user's ACL, say) or
                // the proof's.
                Err(aborted) => {
                    let cause = aborted.cause(queued.len());
                    let mut refused = aborted.refused.iter().copied();
                    for (read, refused) in queued.into_iter().zip(refused.by_ref()) {
                        let failed = match (refused, read) {
                            (Some(refused), _) => refused,
                            (None, ProofRead::Marker) => aborted.exec,
                            (None, _) => cause,
                        };
                        self.plan.handle_failed(read, failed);
                    }
                    self.embedded_parts(refused.map(|own| Reply::Error(own.unwrap_or(cause))));
                }
            }
        }
        if self.plan.embeds() {
            return;
        }
        for index in 0..self.batch.len() {
            let form = self.form(index);
            let seal = self.plan.seal_reads(index);
            if !seal.is_empty() || form.is_transaction() {
                if !self.read_sealed(index, &form, seal, &mut results) {
                    return;
                }
                continue;
            }
            for part in 0..form.parts() {
                let Some(result) = results.next() else { return };
                if is_noscript(&result) {
                    self.again.push(index);
                    continue;
                }
                self.note_ask(index, &result);
                note_failure(&result, &mut self.reconnect, &mut self.rebuild);
                let reply = match (form.reads(part), &result) {
                    (Some(read), Ok(value)) => {
                        let token = self.batch[index].command.spec().token().as_bytes();
                        read_part(read, value, token)
                    }
                    _ => map_result(result),
                };
                let decisive = part < form.decisive_parts();
                if matches!(form, RedisForm::DeleteEach { .. })
                    && decisive
                    && reply == Reply::Int(0)
                {
                    self.lookups.push((index, part));
                }
                self.parts[index].push(reply);
            }
        }
    }

    /// The answers of the requests' parts that went inside the proof's transaction
    /// ([`NodeBatch::embeds`]), in order.
    fn embedded_parts(&mut self, mut answers: impl Iterator<Item = Reply>) {
        for index in 0..self.batch.len() {
            for _ in 0..self.form(index).parts() {
                if let Some(answer) = answers.next() {
                    self.parts[index].push(answer);
                }
            }
        }
    }

    /// Hands the reply to the proof read `read` to the plan.
    fn handle_read(&mut self, read: ProofRead, result: &Result<redis::Value, redis::RedisError>) {
        match read {
            ProofRead::Caching => self.plan.handle_caching(acknowledged(result)),
            ProofRead::Epoch => self.plan.handle_epoch(epoch_value(result)),
            ProofRead::Pttl => self.plan.handle_pttl(integer(result)),
            ProofRead::Claim => self.plan.handle_claim(acknowledged(result).is_ok()),
            ProofRead::Time => self.plan.handle_time(node_time(result)),
            ProofRead::Stamped => self.plan.handle_stamped(epoch_value(result)),
            ProofRead::Info => self.plan.handle_info(text(result)),
            ProofRead::Notifications => self.plan.handle_notifications(setting(result)),
            // `SET … XX` of a key that is never there: nil, unless refused.
            ProofRead::Markable => self.plan.handle_markable(match result {
                Ok(redis::Value::Nil) => Ok(()),
                result => acknowledged(result),
            }),
            ProofRead::Marker => self.plan.handle_marker(acknowledged(result)),
            // Their replies decide nothing: the transaction's reads carry what it did.
            ProofRead::Multi | ProofRead::Exec => {}
        }
    }

    /// The replies of request `index` sent as a transaction — sealed, or a form that is one
    /// ([`RedisForm::is_transaction`]) — (`MULTI`, its parts and seal reads `QUEUED`, then
    /// `EXEC`): the parts' answers from the `EXEC` (a value-reading part's as
    /// [`PartRead::reply`](redlock_core::PartRead::reply)), and its seal reads to the plan. A
    /// transaction that failed (a command refused while queued, `EXEC` without an array) fails
    /// each part with what the node said. `false` when the replies ran out.
    fn read_sealed(
        &mut self,
        index: usize,
        form: &RedisForm<'a>,
        seal: &[SealRead],
        results: &mut impl Iterator<Item = Result<redis::Value, redis::RedisError>>,
    ) -> bool {
        // A server may queue every command and redirect the transaction at `EXEC` (Valkey 9).
        let seen = |result: &Result<redis::Value, redis::RedisError>| {
            self.note_ask(index, result);
            note_failure(result, &mut self.reconnect, &mut self.rebuild);
        };
        let Some(ran) = read_transaction(None, results, form.parts() + seal.len(), seen) else {
            return false;
        };
        match ran {
            Ok(items) => {
                let (parts, reads) = items.split_at(form.parts());
                let token = self.batch[index].command.spec().token().as_bytes();
                for (at, part) in parts.iter().enumerate() {
                    self.parts[index].push(match form.reads(at) {
                        Some(read) => read_part(read, part, token),
                        None => map_result(Ok(part.clone())),
                    });
                }
                if seal.is_empty() {
                    return true;
                }
                let read = |which: SealRead| {
                    let at = seal.iter().position(|read| *read == which)?;
                    reads.get(at)
                };
                let (epoch, stamped) = match read(SealRead::Stamps) {
                    Some(redis::Value::Array(values)) => (
                        values.first().and_then(bytes),
                        values.get(1).and_then(bytes),
                    ),
                    _ => (None, None),
                };
                let claim_ttl = match read(SealRead::ClaimTtl) {
                    Some(redis::Value::Int(pttl)) => Some(*pttl),
                    _ => None,
                };
                let replies = SealReplies {
                    marker: match read(SealRead::Marker) {
                        Some(redis::Value::Int(found)) => Some(*found == 1),
                        _ => None,
                    },
                    epoch,
                    stamped,
                    claim_ttl,
                    evictions: read(SealRead::Evictions).and_then(bytes),
                };
                self.plan.handle_seal(index, replies);
            }
            Err(aborted) => {
                let reply = Reply::Error(aborted.cause(aborted.refused.len()));
                self.parts[index].extend((0..form.parts()).map(|_| reply));
            }
        }
        true
    }

    /// Request `index`'s script, to run again on its own (loading it on `NOSCRIPT`); `None`
    /// after an `ASK` (see [`Reading::asked_rerun`]).
    fn rerun_request(&self, index: usize) -> Option<Request> {
        match self.asking {
            true => None,
            false => Request::of(&self.form(index)),
        }
    }

    /// Whether request `index`, whose script the node did not know, runs again: only where a
    /// run behind what the connection carried meanwhile is harmless
    /// ([`Script::runs_late_safely`]; an async connection is shared, and a blocking one is held
    /// to the same rule, so that every adapter behaves alike). When not, the scripts are loaded
    /// ([`Reading::scripts_load`]) and its answer is `NOSCRIPT` ([`Reading::lost`]).
    fn reruns(&self, index: usize) -> bool {
        matches!(self.form(index), RedisForm::Script { script, .. } if script.runs_late_safely())
    }

    /// `SCRIPT LOAD` of every script of the engine ([`SCRIPTS`]), as one pipeline: the node's
    /// cache was flushed, and each script that meets `NOSCRIPT` without running again loses
    /// its request. Sent once per batch that met it, so the requests after it find them.
    fn scripts_load(&self) -> redis::Pipeline {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for script in SCRIPTS {
            pipe.cmd("SCRIPT").arg("LOAD").arg(script.source());
        }
        pipe
    }

    /// Request `index` met `NOSCRIPT` and is not run again: its answer is the node's
    /// `NOSCRIPT` (a vote lost, as to a node that failed).
    fn lost(&mut self, index: usize) {
        self.parts[index] = smallvec::smallvec![Reply::Error(NodeErrorKind::NoScript)];
    }

    /// Request `index`'s script to run again on its own after an `ASK`: `SCRIPT LOAD`, then
    /// the call after `ASKING` (the script loader of the `redis` crate sends no `ASKING`);
    /// its answer is the last reply ([`last`]).
    fn asked_rerun(&self, index: usize) -> Option<Wire> {
        let form = self.form(index);
        let RedisForm::Script { script, .. } = form else {
            return None;
        };
        if !self.asking {
            return None;
        }
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        pipe.cmd("SCRIPT").arg("LOAD").arg(script.source());
        pipe.add_command(part_cmd(&form, 0));
        Some(Wire::asking(&pipe))
    }

    /// The answer of request `index`, run again on its own.
    fn rerun(&mut self, index: usize, result: Result<redis::Value, redis::RedisError>) {
        self.note_ask(index, &result);
        note_failure(&result, &mut self.reconnect, &mut self.rebuild);
        self.parts[index] = smallvec::smallvec![map_result(result)];
    }

    /// The writes a native proof's replies call for ([`NodeBatch::stamps`]), as one pipeline
    /// to send right away (`None`: none).
    fn stamp_pipeline(&self) -> Option<redis::Pipeline> {
        let stamps = self.plan.stamps();
        if stamps.is_empty() {
            return None;
        }
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for stamp in &stamps {
            let mut cmd = redis::Cmd::new();
            for arg in stamp.args() {
                cmd.arg(arg);
            }
            pipe.add_command(cmd);
        }
        Some(pipe)
    }

    /// What a pipeline sent beside the batch's requests answered (the stamps a native proof
    /// calls for, or the scripts' reload after `NOSCRIPT`): nothing but a broken connection
    /// matters (the next proof reads what the stamps left; a request that meets `NOSCRIPT`
    /// again is answered so again).
    fn ran_aside(&mut self, values: Result<Vec<redis::Value>, redis::RedisError>) {
        if let Err(err) = values {
            note_failure(&Err(err), &mut self.reconnect, &mut self.rebuild);
        }
    }

    /// The `PUBLISH`es of every release that counted its listeners first and found another
    /// connection listening beside the client's own subscriber
    /// ([`RedisForm::announcement`]), as one pipeline (`None`: none to send). Their answers
    /// decide nothing ([`Reading::ran_aside`]).
    fn announce_pipeline(&self) -> Option<redis::Pipeline> {
        let mut pipe: Option<redis::Pipeline> = None;
        for (index, parts) in self.parts.iter().enumerate() {
            let Some(form) = self.form(index).announcement(parts) else {
                continue;
            };
            let pipe = pipe.get_or_insert_with(|| {
                let mut pipe = redis::pipe();
                pipe.ignore_errors();
                pipe
            });
            for part in form.decisive_parts()..form.parts() {
                pipe.add_command(part_cmd(&form, part));
            }
        }
        pipe
    }

    /// `GET key` for every missed compare-and-delete, as one pipeline (`None`: none missed).
    fn lookup_pipeline(&self) -> Option<redis::Pipeline> {
        if self.lookups.is_empty() {
            return None;
        }
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for &(index, part) in &self.lookups {
            let key = self.batch[index].command.spec().keys().nth(part);
            pipe.cmd("GET").arg(key.unwrap_or_default());
        }
        Some(pipe)
    }

    /// What the `GET`s read: each missed delete becomes absent or held by another. A failed
    /// lookup leaves the node's answer unknown (an error), never a guess.
    fn looked_up(&mut self, values: Result<Vec<redis::Value>, redis::RedisError>) {
        let lookups = std::mem::take(&mut self.lookups);
        let values = match values {
            Ok(values) if values.len() == lookups.len() => values,
            Ok(_) => vec![redis::Value::Nil; 0],
            Err(err) => {
                note_failure(&Err(err), &mut self.reconnect, &mut self.rebuild);
                Vec::new()
            }
        };
        for (i, (index, part)) in lookups.into_iter().enumerate() {
            let token = self.batch[index].command.spec().token().as_bytes();
            let reply = match values.get(i) {
                Some(redis::Value::BulkString(held)) => RedisForm::missed_delete(Some(held), token),
                Some(redis::Value::Nil) => RedisForm::missed_delete(None, token),
                Some(other) => match map_result(Ok(other.clone())) {
                    failed @ Reply::Error(_) => failed,
                    _ => Reply::Error(NodeErrorKind::Protocol),
                },
                None => Reply::Error(NodeErrorKind::Protocol),
            };
            if let Some(slot) = self.parts[index].get_mut(part) {
                *slot = reply;
            }
        }
    }

    /// Each request's answer, as its form makes it of its parts and as the [`NodeBatch`] counts
    /// it under the connection's watch (every push read so far handed to the watch first).
    fn finish(self) -> BatchReplies {
        // Pushed one by one, not collected: `SmallVec`'s `collect` costs more than the rest of
        // a batch of one's answer.
        let mut replies: smallvec::SmallVec<[Reply; 1]> = smallvec::SmallVec::new();
        for (index, parts) in self.parts.iter().enumerate() {
            replies.push(self.form(index).answer(parts));
        }
        {
            let mut watch = self.tracking.map(|tracking| {
                tracking.drain();
                tracking.lock()
            });
            self.plan.finish(watch.as_deref_mut(), &mut replies);
        }
        let mut answers = Answers::new();
        for (transmit, reply) in self.batch.iter().zip(replies) {
            answers.push((transmit.id, reply));
        }
        BatchReplies {
            answers,
            reconnect: self.reconnect,
            rebuild: self.rebuild,
            asked: self.asked,
        }
    }
}

/// A transaction that did not run.
struct Aborted {
    /// The `MULTI`'s own refusal, if it was refused.
    multi: Option<NodeErrorKind>,
    /// Per queued command, its own refusal (`None`: queued).
    refused: smallvec::SmallVec<[Option<NodeErrorKind>; 8]>,
    /// What the `EXEC` itself said (`EXECABORT`, or a protocol error for another shape).
    exec: NodeErrorKind,
}

impl Aborted {
    /// What failed it, as the first `first` queued commands tell: the `MULTI`'s refusal or the
    /// first of theirs, else what the `EXEC` said.
    fn cause(&self, first: usize) -> NodeErrorKind {
        let queued = self.refused.iter().take(first).flatten().next().copied();
        self.multi.or(queued).unwrap_or(self.exec)
    }
}

/// One transaction's replies, as they come: `MULTI`'s (`multi`, when already read; else the
/// next of `results`), one `QUEUED` per `queued` command, then `EXEC`'s; `seen` sees each
/// reply as it is read (redirects, broken connections). `Ok`: the `EXEC`'s array, one item per
/// queued command. `None`: the replies ran out.
fn read_transaction(
    multi: Option<Result<redis::Value, redis::RedisError>>,
    results: &mut impl Iterator<Item = Result<redis::Value, redis::RedisError>>,
    queued: usize,
    mut seen: impl FnMut(&Result<redis::Value, redis::RedisError>),
) -> Option<Result<Vec<redis::Value>, Aborted>> {
    let multi = match multi {
        Some(multi) => multi,
        None => {
            let multi = results.next()?;
            seen(&multi);
            multi
        }
    };
    let refusal = |result: Result<redis::Value, redis::RedisError>| match map_result(result) {
        Reply::Error(kind) => Some(kind),
        _ => None,
    };
    let multi = refusal(multi);
    let mut refused: smallvec::SmallVec<[Option<NodeErrorKind>; 8]> = smallvec::SmallVec::new();
    for _ in 0..queued {
        let result = results.next()?;
        seen(&result);
        refused.push(refusal(result));
    }
    let exec = results.next()?;
    seen(&exec);
    let ran = multi.is_none() && refused.iter().all(Option::is_none);
    Some(match exec {
        Ok(redis::Value::Array(items)) if ran && items.len() == queued => Ok(items),
        other => Err(Aborted {
            multi,
            refused,
            exec: refusal(other).unwrap_or(NodeErrorKind::Protocol),
        }),
    })
}

/// Whether a command answered `OK`, for [`NodeBatch::handle_caching`].
fn acknowledged(result: &Result<redis::Value, redis::RedisError>) -> Result<(), NodeErrorKind> {
    match result {
        Ok(redis::Value::Okay) => Ok(()),
        Ok(redis::Value::SimpleString(s)) if s == "OK" => Ok(()),
        Ok(redis::Value::ServerError(err)) => Err(NodeErrorKind::from_code(err.code())),
        Ok(_) => Err(NodeErrorKind::Protocol),
        Err(err) => Err(map_error(err)),
    }
}

/// An integer reply (`None`: another shape), for [`NodeBatch::handle_pttl`].
fn integer(result: &Result<redis::Value, redis::RedisError>) -> Result<Option<i64>, NodeErrorKind> {
    match result {
        Ok(redis::Value::Int(n)) => Ok(Some(*n)),
        Ok(redis::Value::ServerError(err)) => Err(NodeErrorKind::from_code(err.code())),
        Ok(_) => Ok(None),
        Err(err) => Err(map_error(err)),
    }
}

/// A text reply (`INFO`: a bulk string, or a verbatim string over RESP3), for
/// [`NodeBatch::handle_info`]; `None` for an error or another shape.
fn text(result: &Result<redis::Value, redis::RedisError>) -> Option<&[u8]> {
    result.as_ref().ok().and_then(bytes)
}

/// The engine's reply for a part that reads `value` ([`RedisForm::reads`]), of a lock whose
/// token is `token`: the node's refusal as any refusal, else [`PartRead::reply`].
fn read_part(read: PartRead, value: &redis::Value, token: &[u8]) -> Reply {
    match value {
        redis::Value::ServerError(_) => map_result(Ok(value.clone())),
        value => read.reply(part_value(value), token),
    }
}

/// A value a part read, in the shapes [`redlock_core::PartRead`] knows.
fn part_value(value: &redis::Value) -> PartValue<'_> {
    match value {
        redis::Value::Nil => PartValue::Nil,
        redis::Value::Int(n) => PartValue::Int(*n),
        redis::Value::Double(x) => PartValue::Double(*x),
        redis::Value::Array(items) => match items.as_slice() {
            [a, redis::Value::Int(n)] => {
                bytes(a).map_or(PartValue::Other, |a| PartValue::Counted(a, *n))
            }
            [a, b] => bytes(a)
                .zip(bytes(b))
                .map_or(PartValue::Other, |(a, b)| PartValue::Pair(a, b)),
            _ => PartValue::Other,
        },
        value => bytes(value).map_or(PartValue::Other, PartValue::Bytes),
    }
}

/// The bytes of a bulk string, or of a verbatim string over RESP3 (`INFO`); `None` for any
/// other shape. Borrowed: a sealed acquisition's reads are never copied.
fn bytes(value: &redis::Value) -> Option<&[u8]> {
    match value {
        redis::Value::BulkString(bytes) => Some(bytes),
        redis::Value::VerbatimString { text, .. } => Some(text.as_bytes()),
        _ => None,
    }
}

/// What `GET` of the epoch key (or of its identity) read, for [`NodeBatch::handle_epoch`] and
/// [`NodeBatch::handle_stamped`].
fn epoch_value(
    result: &Result<redis::Value, redis::RedisError>,
) -> Result<Option<&[u8]>, NodeErrorKind> {
    match result {
        Ok(redis::Value::BulkString(bytes)) => Ok(Some(bytes)),
        Ok(redis::Value::ServerError(err)) => Err(NodeErrorKind::from_code(err.code())),
        Ok(_) => Ok(None),
        Err(err) => Err(map_error(err)),
    }
}

/// The value `CONFIG GET` of one setting read (a map over RESP3, `[name, value]` over RESP2),
/// for [`NodeBatch::handle_notifications`]; `Ok(None)` for another shape.
fn setting(
    result: &Result<redis::Value, redis::RedisError>,
) -> Result<Option<&[u8]>, NodeErrorKind> {
    match result {
        Ok(redis::Value::Map(pairs)) => Ok(pairs.first().and_then(|(_, value)| bytes(value))),
        Ok(redis::Value::Array(items)) => Ok(items.get(1).and_then(bytes)),
        Ok(redis::Value::ServerError(err)) => Err(NodeErrorKind::from_code(err.code())),
        Ok(_) => Ok(None),
        Err(err) => Err(map_error(err)),
    }
}

/// What `TIME` said, as `[seconds, microseconds]`, for [`NodeBatch::handle_time`].
fn node_time(
    result: &Result<redis::Value, redis::RedisError>,
) -> Result<Option<(u64, u64)>, NodeErrorKind> {
    let number = |v: &redis::Value| match v {
        redis::Value::BulkString(bytes) => std::str::from_utf8(bytes).ok()?.parse::<u64>().ok(),
        redis::Value::Int(n) => u64::try_from(*n).ok(),
        _ => None,
    };
    match result {
        Ok(redis::Value::Array(parts)) => Ok(match &parts[..] {
            [secs, micros] => number(secs).zip(number(micros)),
            _ => None,
        }),
        Ok(redis::Value::ServerError(err)) => Err(NodeErrorKind::from_code(err.code())),
        Ok(_) => Ok(None),
        Err(err) => Err(map_error(err)),
    }
}

/// Marks the connection for dropping or rebuilding when `result` says so.
fn note_failure(
    result: &Result<redis::Value, redis::RedisError>,
    reconnect: &mut bool,
    rebuild: &mut bool,
) {
    if let Err(err) = result {
        *reconnect |= is_broken(err);
        *rebuild |= needs_new_connection(err);
    }
}

/// Runs `batch` on a blocking connection to a node of `dialect` as one write (one round trip,
/// in order), each request in its form there; then runs again on its own each release,
/// extension or fence commit whose script the node did not know (any other such request
/// answers `NOSCRIPT`, and every script is loaded again: [`Reading::reruns`]), and reads the
/// holder of each key a compare-and-delete missed (one more round trip, only when one did).
///
/// # Implementation note
/// A reply that does not come within the connection's read timeout (`read_timeout`) fails its
/// request, and the connection is **kept**: the `redis` crate counts each reply it gave up on
/// and skips it when it comes, so a late reply is never read as another request's answer, and
/// everything sent later on this connection still runs after what was sent before — a release
/// can never overtake its own `SET` through a new connection. Once one reply of a batch timed
/// out, the rest are given up on with a 1 ms wait each instead of a full timeout each. A write
/// that failed, or any other broken transport, drops the connection ([`BatchReplies::reconnect`]).
#[cfg(feature = "blocking")]
pub(crate) fn run_batch(
    conn: &mut redis::Connection,
    batch: &[Transmit],
    dialect: &Dialect,
    tracking: Option<&Tracking>,
    read_timeout: std::time::Duration,
    asking: bool,
    last: &crate::encoded::LastPacked,
) -> BatchReplies {
    let run = |conn: &mut redis::Connection, batch: &[Transmit]| {
        run_batch_once(conn, batch, dialect, tracking, (read_timeout, asking), last)
    };
    let (mut replies, mut deferred) = run(conn, batch);
    while !deferred.is_empty() && !replies.reconnect && !replies.rebuild {
        let again: Vec<Transmit> = deferred.iter().map(|&at| batch[at].clone()).collect();
        let (more, still) = run(conn, &again);
        replies.merge(&deferred, more);
        deferred = still.into_iter().map(|at| deferred[at]).collect();
    }
    replies
}

/// One pass of [`run_batch`]: the batch's replies, and the requests it deferred
/// ([`redlock_core::NodeBatch::deferred`]).
#[cfg(feature = "blocking")]
fn run_batch_once(
    conn: &mut redis::Connection,
    batch: &[Transmit],
    dialect: &Dialect,
    tracking: Option<&Tracking>,
    (read_timeout, asking): (std::time::Duration, bool),
    packed_last: &crate::encoded::LastPacked,
) -> (BatchReplies, Vec<usize>) {
    let mut reading = Reading::new(batch, dialect, tracking, asking);
    let deferred = reading.plan.deferred().to_vec();
    let outgoing = reading.outgoing();
    if let Some((packed, wire_len)) = outgoing.packed(&reading.forms, packed_last) {
        if let Err(err) = conn.send_packed_command(packed.bytes()) {
            // Part of the write may have gone out: the stream is not to be trusted.
            let mut replies = BatchReplies::failed(batch, &err);
            replies.reconnect = true;
            return (replies, Vec::new());
        }
        let mut gave_up = false;
        // Inline for the common batch (one command, or a release and its notice): no
        // allocation per batch.
        let mut results = smallvec::SmallVec::<[_; 2]>::with_capacity(wire_len);
        for _ in 0..wire_len {
            let result = recv_reply(conn);
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
        match &outgoing {
            Outgoing::Pipeline(wire) => reading.read(wire.own(results)),
            _ => reading.read(results),
        }
    }
    if let Some(pipe) = reading.announce_pipeline() {
        let wire = reading.wire(pipe);
        reading.ran_aside(wire.own_values(wire.pipe.query(conn)));
    }
    if let Some(pipe) = reading.stamp_pipeline() {
        let wire = reading.wire(pipe);
        reading.ran_aside(wire.own_values(wire.pipe.query(conn)));
    }
    let mut reloaded = false;
    for index in std::mem::take(&mut reading.again) {
        if !reading.reruns(index) {
            if !reloaded {
                reloaded = true;
                let values = reading.scripts_load().query(conn);
                reading.ran_aside(values);
            }
            reading.lost(index);
        } else if let Some(request) = reading.rerun_request(index) {
            let result = request.run(conn);
            reading.rerun(index, result);
        } else if let Some(wire) = reading.asked_rerun(index) {
            reading.rerun(index, last(wire.own_values(wire.pipe.query(conn))));
        }
    }
    if let Some(pipe) = reading.lookup_pipeline() {
        let wire = reading.wire(pipe);
        reading.looked_up(wire.own_values(wire.pipe.query(conn)));
    }
    (reading.finish(), deferred)
}

/// The last reply of a pipeline run for it (an asked rerun's call), or its error.
fn last(values: redis::RedisResult<Vec<redis::Value>>) -> redis::RedisResult<redis::Value> {
    values.map(|values| values.into_iter().last().unwrap_or(redis::Value::Nil))
}

/// The next reply on a blocking connection, past any push (a RESP3 connection may carry them
/// between replies).
#[cfg(feature = "blocking")]
fn recv_reply(conn: &mut redis::Connection) -> Result<redis::Value, redis::RedisError> {
    loop {
        match conn.recv_response() {
            Ok(redis::Value::Push { .. }) => continue,
            result => return result,
        }
    }
}

/// [`run_batch`] on an async connection.
#[cfg(any(feature = "tokio", feature = "smol"))]
pub(crate) async fn run_batch_async(
    conn: &mut MultiplexedConnection,
    batch: &[Transmit],
    dialect: &Dialect,
    tracking: Option<&Tracking>,
    asking: bool,
) -> BatchReplies {
    let (mut replies, mut deferred) =
        run_batch_once_async(conn, batch, dialect, tracking, asking).await;
    while !deferred.is_empty() && !replies.reconnect && !replies.rebuild {
        let again: Vec<Transmit> = deferred.iter().map(|&at| batch[at].clone()).collect();
        // Boxed: a deferred pass is rare (a cluster's slot moving), and the future of every
        // batch would hold its room.
        let (more, still) = Box::pin(run_batch_once_async(
            conn, &again, dialect, tracking, asking,
        ))
        .await;
        replies.merge(&deferred, more);
        deferred = still.into_iter().map(|at| deferred[at]).collect();
    }
    replies
}

/// Reads a pipeline's `values` (`len` of them on the wire; `own` leaves the batch's own);
/// `Some`: the batch ended with these replies (the pipeline failed, or did not answer once per
/// command, and the connection cannot be trusted any more).
#[cfg(any(feature = "tokio", feature = "smol"))]
fn read_values<I: IntoIterator<Item = redis::Value>>(
    reading: &mut Reading<'_>,
    values: redis::RedisResult<Vec<redis::Value>>,
    len: usize,
    own: impl FnOnce(Vec<redis::Value>) -> I,
) -> Option<BatchReplies> {
    match values {
        Ok(values) if values.len() == len => {
            reading.read(own(values).into_iter().map(Ok));
            None
        }
        Ok(_) => {
            let mut replies =
                BatchReplies::all(reading.batch, Reply::Error(NodeErrorKind::Protocol), true);
            replies.rebuild = true;
            Some(replies)
        }
        Err(err) => Some(BatchReplies::failed(reading.batch, &err)),
    }
}

/// `cmd`'s reply on `conn`, as `Cmd::query_async` reads it (an error reply is an `Err`),
/// without the boxed future the `redis` crate's `ConnectionLike` makes for every request: one
/// allocation per batch less.
#[cfg(any(feature = "tokio", feature = "smol"))]
async fn send_one(
    conn: &mut MultiplexedConnection,
    cmd: &redis::Cmd,
) -> redis::RedisResult<redis::Value> {
    conn.send_packed_command(cmd).await?.extract_error()
}

/// `pipe`'s replies on `conn`, one per command, as `Pipeline::query_async` reads them for a
/// pipeline of ours ([`each_answered`]: an error reply stays in its place; never a transaction
/// of the `redis` crate's, nothing ignored), without its boxed future.
#[cfg(any(feature = "tokio", feature = "smol"))]
async fn send_pipeline(
    conn: &mut MultiplexedConnection,
    pipe: &redis::Pipeline,
) -> redis::RedisResult<Vec<redis::Value>> {
    debug_assert!(!pipe.is_transaction());
    conn.send_packed_commands(pipe, 0, pipe.len()).await
}

/// One pass of [`run_batch_async`]: the batch's replies, and the requests it deferred.
#[cfg(any(feature = "tokio", feature = "smol"))]
async fn run_batch_once_async(
    conn: &mut MultiplexedConnection,
    batch: &[Transmit],
    dialect: &Dialect,
    tracking: Option<&Tracking>,
    asking: bool,
) -> (BatchReplies, Vec<usize>) {
    let mut reading = Reading::new(batch, dialect, tracking, asking);
    let deferred = reading.plan.deferred().to_vec();
    match reading.outgoing() {
        Outgoing::Nothing => {}
        Outgoing::Single(form) => {
            // The round's other nodes were likely sent the same: encoded once for them all.
            let cmd = crate::encoded::part_cmd_shared(&form, 0);
            let result = send_one(conn, &cmd).await;
            reading.read([result]);
        }
        Outgoing::Parts(len) => {
            // Likely the same pipeline as the round's other nodes': built once for them all.
            let pipe = crate::encoded::parts_pipeline_shared(&reading.forms);
            let values = send_pipeline(conn, &pipe).await;
            if let Some(ended) = read_values(&mut reading, values, len, |values| values) {
                return (ended, Vec::new());
            }
        }
        Outgoing::Pipeline(wire) => {
            let values = send_pipeline(conn, &wire.pipe).await;
            if let Some(ended) = read_values(&mut reading, values, wire.len(), |v| wire.own(v)) {
                return (ended, Vec::new());
            }
        }
    }
    if let Some(pipe) = reading.announce_pipeline() {
        let wire = reading.wire(pipe);
        reading.ran_aside(wire.own_values(wire.pipe.query_async(conn).await));
    }
    if let Some(pipe) = reading.stamp_pipeline() {
        let wire = reading.wire(pipe);
        reading.ran_aside(wire.own_values(wire.pipe.query_async(conn).await));
    }
    let mut reloaded = false;
    for index in std::mem::take(&mut reading.again) {
        // Other batches went out on this shared connection since: an acquisition run now
        // could land behind its own lock's release (a key left for its TTL on this node).
        if !reading.reruns(index) {
            if !reloaded {
                reloaded = true;
                let values = reading.scripts_load().query_async(conn).await;
                reading.ran_aside(values);
            }
            reading.lost(index);
        } else if let Some(request) = reading.rerun_request(index) {
            // Boxed: a rerun is rare (a node without the script), and large.
            let result = Box::pin(request.run_async(conn)).await;
            reading.rerun(index, result);
        } else if let Some(wire) = reading.asked_rerun(index) {
            reading.rerun(
                index,
                last(wire.own_values(wire.pipe.query_async(conn).await)),
            );
        }
    }
    if let Some(pipe) = reading.lookup_pipeline() {
        let wire = reading.wire(pipe);
        reading.looked_up(wire.own_values(wire.pipe.query_async(conn).await));
    }
    (reading.finish(), deferred)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_script_is_listed_once_in_the_enums_order() {
        // Each script listed once, in the enum's order: this match has no wildcard, so a new
        // variant does not compile here until it has a place (nothing makes it listed).
        let place = |script: Script| match script {
            Script::Acquire => 0,
            Script::Release => 1,
            Script::Extend => 2,
            Script::AcquireChecked => 3,
            Script::Trust => 4,
            Script::AcquireFenced => 5,
            Script::CommitFence => 6,
        };
        for (at, script) in SCRIPTS.into_iter().enumerate() {
            assert_eq!(place(script), at, "{script:?} out of place in SCRIPTS");
        }
    }

    #[test]
    fn a_deferred_pass_lands_its_answers_in_their_places() {
        let batch = crate::cluster::tests::acquisitions(&["a", "b", "c", "d"]);
        let mut replies = BatchReplies::all(&batch, Reply::Error(NodeErrorKind::NoSafeForm), false);
        // Requests 1 and 3 went again: 3 was asked elsewhere, and the pass broke the transport.
        let again = [batch[1].clone(), batch[3].clone()];
        let mut more = BatchReplies::all(&again, Reply::Ok, true);
        more.asked.push((1, "127.0.0.1:7001".to_owned()));
        replies.merge(&[1, 3], more);
        let answers: Vec<_> = replies
            .answers
            .iter()
            .map(|(id, reply)| (*id, *reply))
            .collect();
        let expected: Vec<_> = batch
            .iter()
            .enumerate()
            .map(|(at, transmit)| match at {
                1 | 3 => (transmit.id, Reply::Ok),
                _ => (transmit.id, Reply::Error(NodeErrorKind::NoSafeForm)),
            })
            .collect();
        assert_eq!(answers, expected);
        assert!(replies.reconnect && !replies.rebuild);
        assert_eq!(replies.asked, [(3, "127.0.0.1:7001".to_owned())]);
    }

    #[test]
    fn a_prefixed_argument_is_the_release_channel_in_one_argument() {
        let mut written = redis::cmd("PUBLISH");
        written
            .arg(Prefixed(RELEASED_CHANNEL_PREFIX, b"locks:a"))
            .arg(b"locks:a");
        let mut expected = redis::cmd("PUBLISH");
        expected
            .arg(redlock_core::released_channel(b"locks:a"))
            .arg(b"locks:a");
        assert_eq!(written.get_packed_command(), expected.get_packed_command());
        assert_eq!(written.args_iter().count(), 3);
    }
}
