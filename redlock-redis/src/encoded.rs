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
//! - A blocking client's node workers each run on a thread of their own: the command, and its
//!   packed bytes, are the client's ([`LastPacked`]).
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

use crate::request::{Step, part_cmd, parts_pipeline, request_steps, write_part};

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

/// A command or a pipeline, and its packed bytes, as a blocking connection sends them.
#[cfg(feature = "blocking")]
pub(crate) struct Packed<E> {
    encoded: E,
    bytes: Vec<u8>,
}

#[cfg(feature = "blocking")]
impl<E> Packed<E> {
    /// The bytes to write.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// The last command, and the last pipeline of parts, a blocking client's node workers packed,
/// each while a worker holds it, shared by them all (cheap to clone: the clones share them).
#[cfg(feature = "blocking")]
#[derive(Clone, Default)]
pub(crate) struct LastPacked(Arc<Slots>);

#[cfg(feature = "blocking")]
#[derive(Default)]
struct Slots {
    single: std::sync::Mutex<Weak<Packed<redis::Cmd>>>,
    parts: std::sync::Mutex<Weak<Packed<redis::Pipeline>>>,
}

#[cfg(feature = "blocking")]
impl LastPacked {
    /// Part `part` of `form`, packed: the client's last when a worker still holds it and it
    /// encodes the same, else packed anew (the client's last from then on). The lock is held
    /// only to take or put the last, never while comparing or encoding: workers never wait on
    /// one another's work.
    pub(crate) fn packed(&self, form: &RedisForm<'_>, part: usize) -> Arc<Packed<redis::Cmd>> {
        shared_by_workers(
            &self.0.single,
            |cmd| encodes_to(form, part, cmd),
            || {
                let cmd = part_cmd(form, part);
                (cmd.get_packed_command(), cmd)
            },
        )
    }

    /// The pipeline of `forms`' parts, packed: as [`packed`](Self::packed), in a slot of its
    /// own.
    pub(crate) fn packed_parts(&self, forms: &[RedisForm<'_>]) -> Arc<Packed<redis::Pipeline>> {
        shared_by_workers(
            &self.0.parts,
            |pipe| parts_encode_to(forms, pipe),
            || {
                let pipe = parts_pipeline(forms);
                (pipe.get_packed_pipeline(), pipe)
            },
        )
    }
}

/// The last in `slot` when a worker still holds it and it is `same`, else `pack`'s (the slot's
/// from then on); the lock held only to take or put.
#[cfg(feature = "blocking")]
fn shared_by_workers<E>(
    slot: &std::sync::Mutex<Weak<Packed<E>>>,
    same: impl FnOnce(&E) -> bool,
    pack: impl FnOnce() -> (Vec<u8>, E),
) -> Arc<Packed<E>> {
    let lock = || {
        slot.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    };
    let last = lock().upgrade();
    if let Some(last) = last
        && same(&last.encoded)
    {
        return last;
    }
    let (bytes, encoded) = pack();
    let packed = Arc::new(Packed { encoded, bytes });
    *lock() = Arc::downgrade(&packed);
    packed
}

/// Whether `pipe` is exactly the pipeline of `forms`' parts: command by command in the steps
/// [`parts_pipeline`] builds it from ([`request_steps`]), each `MULTI` and `EXEC` a command of
/// that one word, each part encoding to its command, and no command left over. (Only
/// [`parts_pipeline`] builds what is compared here, so its other settings, such as ignoring
/// errors, are the same.)
fn parts_encode_to(forms: &[RedisForm<'_>], pipe: &redis::Pipeline) -> bool {
    let mut cmds = pipe.cmd_iter();
    let one_word = |cmd: &redis::Cmd, word: &str| {
        let mut args = cmd.args_iter();
        matches!(args.next(), Some(redis::Arg::Simple(arg)) if arg == word.as_bytes())
            && args.next().is_none()
    };
    let mut steps = forms.iter().flat_map(|form| request_steps(form, 0));
    let same = steps.all(|step| {
        cmds.next().is_some_and(|cmd| match step {
            Step::Marker(word) => one_word(cmd, word),
            Step::Part(form, part) => encodes_to(form, part, cmd),
            // A pipeline of parts alone reads no seal.
            Step::Seal => false,
        })
    });
    same && cmds.next().is_none()
}

/// Whether part `part` of `form` encodes to exactly the arguments of `cmd`.
fn encodes_to(form: &RedisForm<'_>, part: usize, cmd: &redis::Cmd) -> bool {
    let mut same = Same {
        expected: cmd.args_iter(),
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

#[cfg(test)]
mod tests;
