//! RESP for embedders: encode the engine's commands to bytes and parse the replies back,
//! incrementally, from whatever arrived so far. With this, a custom network stack needs nothing
//! but the core (see the `tcp_lock` example).
//!
//! Never allocates while parsing, never reads past what it was given, and never trusts a length
//! prefix beyond its limits: a malformed or hostile stream is an error, not a hang or a panic.

use crate::command::{Arg, Command, RedisForm};
use crate::reply::{NodeErrorKind, Reply};
use crate::sit_out::SitOutCause;

/// The longest status, error or integer line accepted (bytes, without CRLF).
pub const MAX_LINE: usize = 64 * 1024;
/// The largest bulk string accepted (Redis's own limit, 512 MiB).
pub const MAX_BULK: usize = 512 * 1024 * 1024;
/// The deepest nesting of arrays accepted.
pub const MAX_DEPTH: usize = 8;

/// A byte stream that is not a RESP reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RespError {
    /// A reply starts with a byte that is not a RESP type marker.
    #[error("RESP: unknown type byte 0x{0:02x}")]
    UnknownType(u8),
    /// A line has no CRLF within [`MAX_LINE`] bytes.
    #[error("RESP: line longer than {MAX_LINE} bytes")]
    LineTooLong,
    /// A length or integer is not a number, or is out of range.
    #[error("RESP: bad number")]
    BadNumber,
    /// A bulk string is not followed by CRLF.
    #[error("RESP: bulk string without CRLF")]
    MissingCrlf,
    /// Arrays nest deeper than [`MAX_DEPTH`].
    #[error("RESP: arrays nested deeper than {MAX_DEPTH}")]
    TooDeep,
}

/// Appends `command` to `out` as a RESP array (`SET … NX PX …`, or `EVAL` of the script), as a
/// node that runs scripts and nothing native takes it ([`Command::redis_form`]).
pub fn encode(command: &Command, out: &mut Vec<u8>) {
    encode_form(&command.redis_form(), out);
}

/// Appends every part of `form` to `out`, one RESP array each ([`RedisForm::parts`]; a node
/// answers each in order, and [`RedisForm::answer`] makes the engine's reply of them). A
/// [transaction](RedisForm::is_transaction) goes between `MULTI` and `EXEC`: its parts are
/// then answered by the `EXEC`'s items, and a part that [reads a value](RedisForm::reads)
/// by [`PartRead::reply`](crate::PartRead::reply) of it.
pub fn encode_form(form: &RedisForm<'_>, out: &mut Vec<u8>) {
    if let RedisForm::Script { script, keys, args } = *form {
        array_header(out, 3 + keys.len() + args.len());
        bulk(out, b"EVAL");
        bulk(out, script.source().as_bytes());
        bulk(out, itoa(keys.len() as u64, &mut [0; 20]));
        keys.for_each(|key| bulk(out, key));
        bulk(out, args.token);
        for number in args.numbers() {
            bulk(out, itoa(number, &mut [0; 20]));
        }
        if let Some(tag) = args.tag() {
            bulk(out, tag.as_bytes());
        }
        return;
    }
    let transaction = form.is_transaction();
    if transaction {
        array_header(out, 1);
        bulk(out, b"MULTI");
    }
    for part in 0..form.parts() {
        let mut count = 0;
        form.for_each_arg(part, |_| count += 1);
        array_header(out, count);
        form.for_each_arg(part, |arg| match arg {
            Arg::Bytes(bytes) => bulk(out, bytes),
            Arg::Number(n) => bulk(out, itoa(n, &mut [0; 20])),
            Arg::Channel(keyspace, key) => bulk(out, &keyspace.released_channel(key)),
            Arg::Fence(keyspace, key) => bulk(out, &keyspace.fence_key(key)),
        });
    }
    if transaction {
        array_header(out, 1);
        bulk(out, b"EXEC");
    }
}

/// Parses one reply from the front of `buf`: `Ok(None)` if more bytes are needed, otherwise the
/// reply and how many bytes it took. Replies the algorithm never expects (bulk strings, arrays,
/// other statuses) come back as [`Reply::Other`], fully consumed so the stream stays in step.
pub fn parse_reply(buf: &[u8]) -> Result<Option<(Reply, usize)>, RespError> {
    parse_at(buf, 0)
}

fn parse_at(buf: &[u8], depth: usize) -> Result<Option<(Reply, usize)>, RespError> {
    let Some(&marker) = buf.first() else {
        return Ok(None);
    };
    let Some((line, after_line)) = line(&buf[1..])? else {
        return Ok(None);
    };
    let after_line = after_line + 1;
    let reply = match marker {
        b'+' => {
            if line == b"OK" {
                Reply::Ok
            } else {
                Reply::Other
            }
        }
        b'-' => {
            let text = std::str::from_utf8(line).unwrap_or("");
            Reply::Error(NodeErrorKind::from_message(text))
        }
        b':' => Reply::Int(number(line)?),
        b'_' => Reply::Nil,
        b'$' => {
            let len = number(line)?;
            if len == -1 {
                return Ok(Some((Reply::Nil, after_line)));
            }
            let len = usize::try_from(len)
                .ok()
                .filter(|l| *l <= MAX_BULK)
                .ok_or(RespError::BadNumber)?;
            let end = after_line + len;
            if buf.len() < end + 2 {
                return Ok(None);
            }
            if &buf[end..end + 2] != b"\r\n" {
                return Err(RespError::MissingCrlf);
            }
            return Ok(Some((Reply::Other, end + 2)));
        }
        b'*' => {
            let count = number(line)?;
            if count == -1 {
                return Ok(Some((Reply::Nil, after_line)));
            }
            if depth == MAX_DEPTH {
                return Err(RespError::TooDeep);
            }
            let count = u64::try_from(count).map_err(|_| RespError::BadNumber)?;
            let mut used = after_line;
            let mut first = None;
            for _ in 0..count {
                match parse_at(&buf[used..], depth + 1)? {
                    Some((reply, n)) => {
                        first.get_or_insert(reply);
                        used += n;
                    }
                    None => return Ok(None),
                }
            }
            // A checked script's refusal: `{-ms, why}`.
            let reply = match first {
                Some(Reply::Int(ms)) if count == 2 && ms < 0 => Reply::Ineligible {
                    for_ms: ms.unsigned_abs(),
                    cause: SitOutCause::from_word(string_at(&buf[after_line..used]).unwrap_or(b"")),
                },
                _ => Reply::Other,
            };
            return Ok(Some((reply, used)));
        }
        other => return Err(RespError::UnknownType(other)),
    };
    Ok(Some((reply, after_line)))
}

/// The text of the second of two replies in `pair` (a checked script's `{-ms, why}`), when it
/// is a bulk or simple string. `pair` was parsed whole already.
fn string_at(pair: &[u8]) -> Option<&[u8]> {
    let (_, first) = line(pair).ok()??;
    let second = pair.get(first..)?;
    let (head, body) = line(second.get(1..)?).ok()??;
    match second.first()? {
        b'+' => Some(head),
        b'$' => second
            .get(1 + body..)
            .map(|rest| rest.strip_suffix(b"\r\n").unwrap_or(rest)),
        _ => None,
    }
}

/// The line at the front of `buf` and the offset just past its CRLF.
fn line(buf: &[u8]) -> Result<Option<(&[u8], usize)>, RespError> {
    let window = &buf[..buf.len().min(MAX_LINE + 2)];
    match window.windows(2).position(|w| w == b"\r\n") {
        Some(end) => Ok(Some((&buf[..end], end + 2))),
        None if buf.len() >= MAX_LINE + 2 => Err(RespError::LineTooLong),
        None => Ok(None),
    }
}

fn number(line: &[u8]) -> Result<i64, RespError> {
    std::str::from_utf8(line)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(RespError::BadNumber)
}

fn array_header(out: &mut Vec<u8>, len: usize) {
    out.push(b'*');
    out.extend_from_slice(itoa(len as u64, &mut [0; 20]));
    out.extend_from_slice(b"\r\n");
}

fn bulk(out: &mut Vec<u8>, bytes: &[u8]) {
    out.push(b'$');
    out.extend_from_slice(itoa(bytes.len() as u64, &mut [0; 20]));
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

/// Formats `n` in decimal into `buf`, without allocating.
fn itoa(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[at..];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{Command, Op};
    use crate::spec::LockSpec;
    use crate::token::Token;

    fn spec(resources: &[&[u8]]) -> LockSpec {
        LockSpec::new(
            b"p:",
            resources,
            Token::new(b"tok".to_vec()).expect("valid"),
        )
        .expect("valid")
    }

    #[test]
    fn encodes_a_single_key_acquire_as_set_nx_px() {
        let mut out = Vec::new();
        encode(
            &Command::new(Op::SetIfAbsent, spec(&[b"r"]), 1500, Default::default()),
            &mut out,
        );
        assert_eq!(
            out,
            b"*6\r\n$3\r\nSET\r\n$3\r\np:r\r\n$3\r\ntok\r\n$2\r\nNX\r\n$2\r\nPX\r\n$4\r\n1500\r\n"
        );
    }

    #[test]
    fn encodes_scripts_as_eval_with_keys_and_args() {
        let mut out = Vec::new();
        encode(
            &Command::new(
                Op::DeleteIfEquals,
                spec(&[b"a", b"b"]),
                0,
                Default::default(),
            ),
            &mut out,
        );
        let text = String::from_utf8(out).expect("ascii");
        assert!(text.starts_with("*7\r\n$4\r\nEVAL\r\n"));
        // Keys, token, then the notify flag (0: a clean-up release announces nothing).
        assert!(
            text.ends_with("$1\r\n2\r\n$3\r\np:a\r\n$3\r\np:b\r\n$3\r\ntok\r\n$1\r\n0\r\n"),
            "{text}"
        );
    }

    #[test]
    fn parses_every_reply_shape_and_waits_for_more() {
        let refusal = |cause| Reply::Ineligible {
            for_ms: 5_000,
            cause,
        };
        let cases: [(&[u8], Reply); 11] = [
            (b"+OK\r\n", Reply::Ok),
            (b"+QUEUED\r\n", Reply::Other),
            (b"$-1\r\n", Reply::Nil),
            (b"_\r\n", Reply::Nil),
            (b":-1\r\n", Reply::Int(-1)),
            (
                b"-WRONGTYPE Operation against a key\r\n",
                Reply::Error(NodeErrorKind::WrongType),
            ),
            (b"*2\r\n$3\r\nabc\r\n*1\r\n:1\r\n", Reply::Other),
            (
                b"*2\r\n:-5000\r\n$7\r\nrestart\r\n",
                refusal(SitOutCause::Restart),
            ),
            (
                b"*2\r\n:-5000\r\n$0\r\n\r\n",
                refusal(SitOutCause::Unrecorded),
            ),
            (
                b"*2\r\n:-5000\r\n+eviction\r\n",
                refusal(SitOutCause::Eviction),
            ),
            (b"*2\r\n:5000\r\n$7\r\nrestart\r\n", Reply::Other),
        ];
        for (bytes, want) in cases {
            assert_eq!(
                parse_reply(bytes),
                Ok(Some((want, bytes.len()))),
                "{:?}",
                String::from_utf8_lossy(bytes)
            );
            for cut in 0..bytes.len() {
                assert_eq!(parse_reply(&bytes[..cut]), Ok(None), "prefix of {cut}");
            }
        }
    }

    #[test]
    fn rejects_malformed_streams() {
        assert_eq!(parse_reply(b"?x\r\n"), Err(RespError::UnknownType(b'?')));
        assert_eq!(parse_reply(b":abc\r\n"), Err(RespError::BadNumber));
        assert_eq!(parse_reply(b"$99999999999\r\n"), Err(RespError::BadNumber));
        assert_eq!(parse_reply(b"$-7\r\n"), Err(RespError::BadNumber));
        assert_eq!(parse_reply(b"$1\r\nabc"), Err(RespError::MissingCrlf));
        let long = vec![b'+'; MAX_LINE + 10];
        assert_eq!(parse_reply(&long), Err(RespError::LineTooLong));
        let deep = "*1\r\n".repeat(MAX_DEPTH + 1);
        assert_eq!(parse_reply(deep.as_bytes()), Err(RespError::TooDeep));
    }

    #[test]
    fn itoa_formats_the_extremes() {
        assert_eq!(itoa(0, &mut [0; 20]), b"0");
        assert_eq!(itoa(u64::MAX, &mut [0; 20]), b"18446744073709551615");
    }
}
