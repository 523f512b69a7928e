//! A form's command written straight as the bytes a blocking connection sends (RESP: an array
//! of bulk strings per command), with where each argument lies in them, so that a form can be
//! compared with them argument by argument. No `redis::Cmd` in between: a command built and
//! then packed took three allocations and two passes over its arguments, where this takes one
//! buffer and one pass.
//!
//! # What it never does
//! It never writes other bytes than the redis crate packs for the same arguments
//! (`Cmd::get_packed_command`, `Pipeline::get_packed_pipeline`: the tests hold every form to
//! it), and never names an argument other than the one its bytes carry.

use std::io;
use std::ops::Range;

use redis::RedisWrite;
use redlock_core::RedisForm;
use smallvec::SmallVec;

use crate::request::{Step, request_steps, write_part};

/// The most bytes a header takes: `*` or `$`, a `usize` in decimal, `\r\n`.
const HEADER_ROOM: usize = 1 + 20 + 2;

/// Commands packed as a blocking connection writes them, and where each argument lies.
pub(crate) struct Packed {
    bytes: Vec<u8>,
    /// Each argument's bytes, command after command.
    args: SmallVec<[Range<usize>; 8]>,
    /// How many of [`args`](Self::args) each command has, in order.
    commands: SmallVec<[usize; 2]>,
}

impl Packed {
    /// The bytes to write.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Each command's arguments, in order.
    pub(super) fn commands(&self) -> impl Iterator<Item = impl Iterator<Item = redis::Arg<&[u8]>>> {
        let mut args = &self.args[..];
        self.commands.iter().map(move |count| {
            let (these, rest) = args.split_at(*count);
            args = rest;
            these
                .iter()
                .map(|range| redis::Arg::Simple(&self.bytes[range.clone()]))
        })
    }
}

/// Part `part` of `form`, packed as one command.
pub(super) fn pack(form: &RedisForm<'_>, part: usize) -> Packed {
    let mut out = with_room(1);
    command(&mut out, |out| write_part(form, part, out));
    out
}

/// The pipeline of `forms`' parts alone ([`crate::request::request_steps`] with no seal: each
/// part a command, each transaction form's between a `MULTI` and an `EXEC`), packed.
pub(super) fn pack_parts(forms: &[RedisForm<'_>]) -> Packed {
    let mut out = with_room(forms.len());
    for step in forms.iter().flat_map(|form| request_steps(form, 0)) {
        match step {
            Step::Marker(word) => command(&mut out, |out| out.write_arg(word.as_bytes())),
            Step::Part(form, part) => command(&mut out, |out| write_part(form, part, out)),
            // A pipeline of parts alone reads no seal (`request_steps` with none yields none).
            Step::Seal => {}
        }
    }
    out
}

/// An empty pack with room for `parts` commands of the usual size (a key and a token of a few
/// dozen bytes each; a longer one grows it).
fn with_room(parts: usize) -> Packed {
    const USUAL: usize = 192;
    Packed {
        bytes: Vec::with_capacity(USUAL * parts.max(1)),
        args: SmallVec::new(),
        commands: SmallVec::new(),
    }
}

/// Writes one command whose arguments `write` writes: its header, counted once they are
/// written, goes in front of them.
fn command(out: &mut Packed, write: impl FnOnce(&mut Packed)) {
    let start = out.open();
    let first = out.args.len();
    write(out);
    let count = out.args.len() - first;
    let shift = out.close(start, b'*', count);
    for arg in &mut out.args[first..] {
        *arg = arg.start - shift..arg.end - shift;
    }
    out.commands.push(count);
}

impl Packed {
    /// Leaves room for a header at the end; where it starts.
    fn open(&mut self) -> usize {
        let start = self.bytes.len();
        self.bytes.resize(start + HEADER_ROOM, 0);
        start
    }

    /// Writes the header `kind` `number` (a command's `*` and count of arguments, or an
    /// argument's `$` and length) in the room opened at `start`, right before what was written
    /// since, and closes the room left over; by how much what was written since moved.
    fn close(&mut self, start: usize, kind: u8, number: usize) -> usize {
        let mut header = [0; HEADER_ROOM];
        let len = write_header(&mut header, kind, number);
        let body = start + HEADER_ROOM;
        let at = body - len;
        self.bytes[at..body].copy_from_slice(&header[..len]);
        self.bytes.copy_within(at.., start);
        let shift = at - start;
        self.bytes.truncate(self.bytes.len() - shift);
        shift
    }
}

/// Writes the header `kind` `number` (`$5\r\n`, `*3\r\n`) at the start of `out`; its length.
fn write_header(out: &mut [u8; HEADER_ROOM], kind: u8, number: usize) -> usize {
    out[0] = kind;
    let len = match number {
        // Most numbers are short: a few stores, not a formatter's copy.
        0..10 => {
            out[1] = digit(number);
            2
        }
        10..100 => {
            out[1] = digit(number / 10);
            out[2] = digit(number % 10);
            3
        }
        _ => {
            let mut digits = itoa::Buffer::new();
            let digits = digits.format(number).as_bytes();
            out[1..1 + digits.len()].copy_from_slice(digits);
            1 + digits.len()
        }
    };
    out[len..len + 2].copy_from_slice(b"\r\n");
    len + 2
}

impl RedisWrite for Packed {
    fn write_arg(&mut self, arg: &[u8]) {
        let mut header = [0; HEADER_ROOM];
        let len = write_header(&mut header, b'$', arg.len());
        let bytes = &mut self.bytes;
        bytes.extend_from_slice(&header[..len]);
        let start = bytes.len();
        bytes.extend_from_slice(arg);
        bytes.extend_from_slice(b"\r\n");
        self.args.push(start..start + arg.len());
    }

    fn writer_for_next_arg(&mut self) -> impl io::Write + '_ {
        let start = self.open();
        Piece { out: self, start }
    }
}

/// The writer of one argument written in pieces: its header goes in front of them once it is
/// dropped (their length is known only then).
struct Piece<'p> {
    out: &'p mut Packed,
    start: usize,
}

impl io::Write for Piece<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.out.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for Piece<'_> {
    fn drop(&mut self) {
        let out = &mut *self.out;
        let len = out.bytes.len() - (self.start + HEADER_ROOM);
        out.close(self.start, b'$', len);
        let end = out.bytes.len();
        out.args.push(end - len..end);
        out.bytes.extend_from_slice(b"\r\n");
    }
}

/// The ASCII digit of `n`, which is below 10.
fn digit(n: usize) -> u8 {
    // `n % 10` is `n` here; the remainder keeps the index in range for any input.
    b"0123456789"[n % 10]
}

/// A command of `args` alone, packed (tests only: commands that are no form's).
#[cfg(test)]
pub(super) fn pack_args(args: &[&[u8]]) -> Packed {
    let mut out = with_room(1);
    command(&mut out, |out| {
        args.iter().for_each(|arg| out.write_arg(arg))
    });
    out
}
