//! A command encoded once for every node of a round.
//!
//! A round sends each node the same command (the same key, token and TTL). The command a write
//! of the round still holds is handed out again when another write's form would encode to
//! exactly its arguments, byte for byte (compared by the one encoding, [`write_part`], never by
//! a summary of the form); else the form is encoded, and becomes the one handed out. The nodes
//! after the first so compare a command instead of building one: no command built twice.
//! - An async driver starts the round's writes one after the other on one thread: the command
//!   is the thread's ([`part_cmd_shared`]).
//! - A blocking client's node workers each run on a thread of their own: the command, and its
//!   packed bytes, are the client's ([`LastPacked`]).
//!
//! # What it never does
//! It never hands out a command whose arguments differ in any byte from the form's own (a
//! node's proof, seal, marker or cluster channel that differs makes it encode its own), never
//! keeps a command alive once no write holds it (only a weak reference stays: the key and the
//! token go with the round), never holds the blocking client's lock while it encodes or
//! compares (the async path compares inside its own thread's slot, which no other thread
//! sees), and never panics where the thread's slot is taken or gone (it encodes the form then).

use std::io;
use std::sync::{Arc, Weak};

use redis::RedisWrite;
use redlock_core::RedisForm;

use crate::request::{part_cmd, write_part};

#[cfg(any(feature = "tokio", feature = "smol"))]
thread_local! {
    /// The last command encoded on this thread, while a write holds it.
    static LAST: std::cell::RefCell<Weak<redis::Cmd>> =
        const { std::cell::RefCell::new(Weak::new()) };
}

/// Part `part` of `form` as a command: the thread's last one when a write still holds it and
/// it encodes the same, else a new one (the thread's last from then on).
#[cfg(any(feature = "tokio", feature = "smol"))]
pub(crate) fn part_cmd_shared(form: &RedisForm<'_>, part: usize) -> Arc<redis::Cmd> {
    let shared = LAST.try_with(|last| {
        let mut last = last.try_borrow_mut().ok()?;
        if let Some(cmd) = last.upgrade()
            && encodes_to(form, part, &cmd)
        {
            return Some(cmd);
        }
        let cmd = Arc::new(part_cmd(form, part));
        *last = Arc::downgrade(&cmd);
        Some(cmd)
    });
    shared
        .ok()
        .flatten()
        .unwrap_or_else(|| Arc::new(part_cmd(form, part)))
}

/// A command and its packed bytes, as a blocking connection sends them.
#[cfg(feature = "blocking")]
pub(crate) struct Packed {
    cmd: redis::Cmd,
    bytes: Vec<u8>,
}

#[cfg(feature = "blocking")]
impl Packed {
    /// The bytes to write.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// The last command a blocking client's node workers packed, while a worker holds it, shared by
/// them all (cheap to clone: the clones share it).
#[cfg(feature = "blocking")]
#[derive(Clone, Default)]
pub(crate) struct LastPacked(Arc<std::sync::Mutex<Weak<Packed>>>);

#[cfg(feature = "blocking")]
impl LastPacked {
    /// Part `part` of `form`, packed: the client's last when a worker still holds it and it
    /// encodes the same, else packed anew (the client's last from then on). The lock is held
    /// only to take or put the last, never while comparing or encoding: workers never wait on
    /// one another's work.
    pub(crate) fn packed(&self, form: &RedisForm<'_>, part: usize) -> Arc<Packed> {
        let slot = || {
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        };
        let last = slot().upgrade();
        if let Some(last) = last
            && encodes_to(form, part, &last.cmd)
        {
            return last;
        }
        let cmd = part_cmd(form, part);
        let packed = Arc::new(Packed {
            bytes: cmd.get_packed_command(),
            cmd,
        });
        *slot() = Arc::downgrade(&packed);
        packed
    }
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
