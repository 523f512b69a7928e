//! A command encoded once for every node of a round.
//!
//! A round sends each node the same command (the same key, token and TTL), and an async
//! driver starts the round's writes one after the other on one thread. Each write asks
//! [`part_cmd_shared`] for its command: the last one encoded on the thread is handed out again
//! when the write's form would encode to exactly its arguments, byte for byte (compared by the
//! one encoding, [`write_part`], never by a summary of the form). Else the form is encoded, and
//! kept as the thread's last. The nodes after the first so compare a command instead of
//! building one: no allocation, no number formatted twice.
//!
//! # What it never does
//! It never hands out a command whose arguments differ in any byte from the form's own (a
//! node's proof, seal, marker or cluster channel that differs makes it encode its own), never
//! shares a command across threads other than through the `Arc` its writes hold, never keeps
//! more than one command per thread, and never panics where the thread's slot is taken or gone
//! (it encodes the form then).

use std::cell::RefCell;
use std::io;
use std::sync::Arc;

use redis::RedisWrite;
use redlock_core::RedisForm;

use crate::request::{part_cmd, write_part};

thread_local! {
    /// The last command encoded on this thread.
    static LAST: RefCell<Option<Arc<redis::Cmd>>> = const { RefCell::new(None) };
}

/// Part `part` of `form` as a command: the thread's last one when it encodes the same, else a
/// new one (kept as the last).
pub(crate) fn part_cmd_shared(form: &RedisForm<'_>, part: usize) -> Arc<redis::Cmd> {
    let shared = LAST.try_with(|last| {
        let mut last = last.try_borrow_mut().ok()?;
        if let Some(cmd) = last.as_ref()
            && encodes_to(form, part, cmd)
        {
            return Some(Arc::clone(cmd));
        }
        let cmd = Arc::new(part_cmd(form, part));
        *last = Some(Arc::clone(&cmd));
        Some(cmd)
    });
    shared
        .ok()
        .flatten()
        .unwrap_or_else(|| Arc::new(part_cmd(form, part)))
}

/// Whether part `part` of `form` encodes to exactly the arguments of `cmd`.
pub(crate) fn encodes_to(form: &RedisForm<'_>, part: usize, cmd: &redis::Cmd) -> bool {
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
