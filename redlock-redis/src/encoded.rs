//! A command encoded once for every node of a round.
//!
//! A round sends each node the same command (the same key, token and TTL). The command a write
//! of the round still holds is handed out again when another write's form would encode to
//! exactly its arguments, byte for byte (compared by the one encoding, [`write_part`], never by
//! a summary of the form); else the form is encoded, and becomes the one handed out. The nodes
//! after the first so compare a command instead of building one: no command built twice.
//! A batch of several commands with nothing to read beside them (a release and its notice, or
//! several locks' requests) is a pipeline of the forms' parts alone ([`parts_pipeline`]):
//! handed out again so too, compared command by command, in a slot of its own.
//! - An async driver starts the round's writes one after the other on one thread: the command
//!   is the thread's ([`part_cmd_shared`]).
//! - A blocking client's node workers each run on a thread of their own: the packed bytes, and
//!   where each argument lies in them, are the client's ([`LastPacked`]); a form is packed
//!   straight into them, with no command built ([`resp`]).
//!
//! # What it never does
//! It never hands out a command whose arguments differ in any byte from the form's own (a
//! node's proof, seal, marker or cluster channel that differs makes it encode its own), nor a
//! pipeline with a command more, less or out of place (a batch that reads, seals or follows
//! an `ASK` never shares its pipeline), never
//! keeps a command alive once no write holds it (only a weak reference stays: the key and the
//! token go with the round), never holds the blocking client's lock while it encodes or
//! compares (the async path compares inside its own thread's slot, which no other thread
//! sees), and never panics where the thread's slot is taken or gone (it encodes the form then).

use std::io;
use std::sync::{Arc, Weak};

use redis::RedisWrite;
use redlock_core::RedisForm;

use crate::request::{Step, request_steps, write_part};
#[cfg(any(feature = "tokio", feature = "smol", test))]
use crate::request::{part_cmd, parts_pipeline};

#[cfg(any(feature = "tokio", feature = "smol"))]
thread_local! {
    /// The last command encoded on this thread, while a write holds it.
    static LAST: std::cell::RefCell<Weak<redis::Cmd>> =
        const { std::cell::RefCell::new(Weak::new()) };
    /// The last pipeline of parts built on this thread, while a write holds it (a slot of its
    /// own: a batch of one command and one of several, one after the other, never evict each
    /// other).
    static LAST_PARTS: std::cell::RefCell<Weak<redis::Pipeline>> =
        const { std::cell::RefCell::new(Weak::new()) };
}

/// Part `part` of `form` as a command: the thread's last one when a write still holds it and
/// it encodes the same, else a new one (the thread's last from then on).
#[cfg(any(feature = "tokio", feature = "smol"))]
pub(crate) fn part_cmd_shared(form: &RedisForm<'_>, part: usize) -> Arc<redis::Cmd> {
    shared_on_thread(
        &LAST,
        |cmd| encodes_to(form, part, cmd),
        || part_cmd(form, part),
    )
}

/// The pipeline of `forms`' parts ([`parts_pipeline`]): the thread's last one when a write
/// still holds it and it encodes the same, else a new one (the thread's last from then on).
#[cfg(any(feature = "tokio", feature = "smol"))]
pub(crate) fn parts_pipeline_shared(forms: &[RedisForm<'_>]) -> Arc<redis::Pipeline> {
    shared_on_thread(
        &LAST_PARTS,
        |pipe| parts_encode_to(forms, pipe),
        || parts_pipeline(forms),
    )
}

/// The thread's last in `slot` when it is still held and `same`, else `build`'s (the slot's
/// from then on); `build`'s too when the slot is taken or gone.
#[cfg(any(feature = "tokio", feature = "smol"))]
fn shared_on_thread<T>(
    slot: &'static std::thread::LocalKey<std::cell::RefCell<Weak<T>>>,
    same: impl FnOnce(&T) -> bool,
    build: impl Fn() -> T,
) -> Arc<T> {
    let shared = slot.try_with(|last| {
        let mut last = last.try_borrow_mut().ok()?;
        if let Some(encoded) = last.upgrade()
            && same(&encoded)
        {
            return Some(encoded);
        }
        let encoded = Arc::new(build());
        *last = Arc::downgrade(&encoded);
        Some(encoded)
    });
    shared.ok().flatten().unwrap_or_else(|| Arc::new(build()))
}

#[cfg(feature = "blocking")]
pub(crate) use resp::Packed;

/// The last command, and the last pipeline of parts, a blocking client's node workers packed,
/// each while a worker holds it, shared by them all (cheap to clone: the clones share them).
#[cfg(feature = "blocking")]
#[derive(Clone, Default)]
pub(crate) struct LastPacked(Arc<Slots>);

#[cfg(feature = "blocking")]
#[derive(Default)]
struct Slots {
    single: std::sync::Mutex<Weak<Packed>>,
    parts: std::sync::Mutex<Weak<Packed>>,
}

#[cfg(feature = "blocking")]
impl LastPacked {
    /// Part `part` of `form`, packed: the client's last when a worker still holds it and it
    /// encodes the same, else packed anew (the client's last from then on). The lock is held
    /// only to take or put the last, never while comparing or encoding: workers never wait on
    /// one another's work.
    pub(crate) fn packed(&self, form: &RedisForm<'_>, part: usize) -> Arc<Packed> {
        shared_by_workers(
            &self.0.single,
            |packed| encodes_to_packed(form, part, packed),
            || resp::pack(form, part),
        )
    }

    /// The pipeline of `forms`' parts, packed: as [`packed`](Self::packed), in a slot of its
    /// own.
    pub(crate) fn packed_parts(&self, forms: &[RedisForm<'_>]) -> Arc<Packed> {
        shared_by_workers(
            &self.0.parts,
            |packed| parts_encode_as(forms, packed.commands()),
            || resp::pack_parts(forms),
        )
    }
}

/// The last in `slot` when a worker still holds it and it is `same`, else `pack`'s (the slot's
/// from then on); the lock held only to take or put.
#[cfg(feature = "blocking")]
fn shared_by_workers(
    slot: &std::sync::Mutex<Weak<Packed>>,
    same: impl FnOnce(&Packed) -> bool,
    pack: impl FnOnce() -> Packed,
) -> Arc<Packed> {
    let lock = || {
        slot.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    };
    let last = lock().upgrade();
    if let Some(last) = last
        && same(&last)
    {
        return last;
    }
    let packed = Arc::new(pack());
    *lock() = Arc::downgrade(&packed);
    packed
}

/// Whether `pipe` is exactly the pipeline of `forms`' parts ([`parts_encode_as`]).
#[cfg(any(feature = "tokio", feature = "smol", test))]
fn parts_encode_to(forms: &[RedisForm<'_>], pipe: &redis::Pipeline) -> bool {
    parts_encode_as(forms, pipe.cmd_iter().map(redis::Cmd::args_iter))
}

/// Whether `cmds` (each command's arguments) are exactly the pipeline of `forms`' parts:
/// command by command in the steps [`parts_pipeline`] builds it from ([`request_steps`]), each
/// `MULTI` and `EXEC` a command of that one word, each part encoding to its command, and no
/// command left over. (Only [`parts_pipeline`], or [`resp::pack_parts`] from the same steps,
/// builds what is compared here, so its other settings, such as ignoring errors, are the same.)
fn parts_encode_as<'c, I>(forms: &[RedisForm<'_>], mut cmds: impl Iterator<Item = I>) -> bool
where
    I: Iterator<Item = redis::Arg<&'c [u8]>>,
{
    let one_word = |mut args: I, word: &str| {
        matches!(args.next(), Some(redis::Arg::Simple(arg)) if arg == word.as_bytes())
            && args.next().is_none()
    };
    let mut steps = forms.iter().flat_map(|form| request_steps(form, 0));
    let same = steps.all(|step| {
        cmds.next().is_some_and(|args| match step {
            Step::Marker(word) => one_word(args, word),
            Step::Part(form, part) => encodes_as(form, part, args),
            // A pipeline of parts alone reads no seal.
            Step::Seal => false,
        })
    });
    same && cmds.next().is_none()
}

/// Whether part `part` of `form` encodes to exactly the arguments of `cmd`.
#[cfg(any(feature = "tokio", feature = "smol", test))]
fn encodes_to(form: &RedisForm<'_>, part: usize, cmd: &redis::Cmd) -> bool {
    encodes_as(form, part, cmd.args_iter())
}

/// Whether part `part` of `form` packs to exactly `packed`: one command, its arguments.
#[cfg(feature = "blocking")]
fn encodes_to_packed(form: &RedisForm<'_>, part: usize, packed: &Packed) -> bool {
    let mut commands = packed.commands();
    let same = commands
        .next()
        .is_some_and(|args| encodes_as(form, part, args));
    same && commands.next().is_none()
}

/// Whether part `part` of `form` encodes to exactly the arguments `expected`, in order.
fn encodes_as<'c>(
    form: &RedisForm<'_>,
    part: usize,
    expected: impl Iterator<Item = redis::Arg<&'c [u8]>>,
) -> bool {
    let mut same = Same {
        expected,
        open: None,
        same: true,
    };
    write_part(form, part, &mut same);
    same.finish()
}

/// A [`RedisWrite`] that writes nothing: it compares each argument written to it with the next
/// of a command's.
struct Same<'c, I: Iterator<Item = redis::Arg<&'c [u8]>>> {
    expected: I,
    /// The argument a writer of [`RedisWrite::writer_for_next_arg`] fills, and how much of it
    /// was written so far.
    open: Option<(&'c [u8], usize)>,
    same: bool,
}

impl<'c, I: Iterator<Item = redis::Arg<&'c [u8]>>> Same<'c, I> {
    /// The next argument expected, once the one being written ended where it should.
    fn next_arg(&mut self) -> Option<&'c [u8]> {
        self.close();
        match self.expected.next() {
            Some(redis::Arg::Simple(arg)) => Some(arg),
            _ => {
                self.same = false;
                None
            }
        }
    }

    /// Ends the argument being written: all of it must have been.
    fn close(&mut self) {
        if let Some((arg, written)) = self.open.take()
            && written != arg.len()
        {
            self.same = false;
        }
    }

    /// Whether every argument was the same, and none is left over.
    fn finish(mut self) -> bool {
        self.close();
        self.same && self.expected.next().is_none()
    }
}

impl<'c, I: Iterator<Item = redis::Arg<&'c [u8]>>> RedisWrite for Same<'c, I> {
    fn write_arg(&mut self, arg: &[u8]) {
        if self.next_arg() != Some(arg) {
            self.same = false;
        }
    }

    fn writer_for_next_arg(&mut self) -> impl io::Write + '_ {
        self.open = Some((self.next_arg().unwrap_or_default(), 0));
        Piece(self)
    }
}

/// The writer of one argument of [`Same`]: compares each piece with what comes next of it.
struct Piece<'s, 'c, I: Iterator<Item = redis::Arg<&'c [u8]>>>(&'s mut Same<'c, I>);

impl<'c, I: Iterator<Item = redis::Arg<&'c [u8]>>> io::Write for Piece<'_, 'c, I> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let same = &mut *self.0;
        match &mut same.open {
            Some((arg, written))
                if written
                    .checked_add(buf.len())
                    .and_then(|end| arg.get(*written..end))
                    == Some(buf) =>
            {
                *written += buf.len();
            }
            _ => same.same = false,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(feature = "blocking")]
mod resp;
#[cfg(test)]
mod tests;
