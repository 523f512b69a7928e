//! What a part of a transaction form reads, and the [`Reply`] the engine makes of the value.
//!
//! A [`Reply`] carries no bytes, so a transport that runs a transaction form
//! ([`RedisForm::is_transaction`](crate::RedisForm::is_transaction)) hands each part that
//! [reads a value](crate::RedisForm::reads) in as [`PartRead::reply`] of what the node answered.
//! Parsing lives here, once, for every transport and the simulator.

use crate::reply::Reply;

/// The largest integer a double holds exactly (2^53): a score at or above it is refused.
const EXACT_BELOW: f64 = 9_007_199_254_740_992.0;

/// What a part reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PartRead {
    /// `GET` of a lock key: whether the lock's token holds it.
    Held,
    /// `ZSCORE` of a fence counter: its value, or nil when there is none.
    Score,
    /// `TIME`: the node's clock in milliseconds.
    Time,
    /// `PUBSUB NUMSUB` of one channel: how many connections listen on it.
    Listeners,
}

/// A value as the node answered it, in the shapes these reads take.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PartValue<'a> {
    /// Nil (a missing key or member).
    Nil,
    /// A bulk string.
    Bytes(&'a [u8]),
    /// An integer.
    Int(i64),
    /// A RESP3 double (`ZSCORE` on a RESP3 connection).
    Double(f64),
    /// An array of two bulk strings (`TIME`: seconds, microseconds).
    Pair(&'a [u8], &'a [u8]),
    /// An array of a bulk string and an integer (`PUBSUB NUMSUB` of one channel: the channel,
    /// its listeners).
    Counted(&'a [u8], i64),
    /// Anything else.
    Other,
}

impl PartRead {
    /// The engine's reply for this read of `value`, for a lock whose token is `token`:
    /// - `Held`: `Int(1)` when the key holds `token`, `Int(0)` when it is absent or holds
    ///   another value;
    /// - `Score`: the counter as `Int`, `Nil` when there is none;
    /// - `Time`: the node's time in ms as `Int`;
    /// - `Listeners`: the channel's listeners as `Int`.
    ///
    /// Any other shape, and a score that is negative, fractional or not exact as a double
    /// (2^53 and above), is [`Reply::Other`]: a protocol error, never a guess.
    pub fn reply(self, value: PartValue<'_>, token: &[u8]) -> Reply {
        match (self, value) {
            (Self::Held, PartValue::Nil) => Reply::Int(0),
            (Self::Held, PartValue::Bytes(held)) => Reply::Int(i64::from(held == token)),
            (Self::Score, PartValue::Nil) => Reply::Nil,
            (Self::Score, PartValue::Int(n)) if n >= 0 => Reply::Int(n),
            (Self::Score, PartValue::Double(score)) => exact(score),
            (Self::Score, PartValue::Bytes(text)) => std::str::from_utf8(text)
                .ok()
                .and_then(|text| text.parse::<f64>().ok())
                .map_or(Reply::Other, exact),
            (Self::Time, PartValue::Pair(secs, micros)) => {
                let number = |text: &[u8]| std::str::from_utf8(text).ok()?.parse::<u64>().ok();
                number(secs)
                    .zip(number(micros))
                    .and_then(|(s, us)| s.checked_mul(1000)?.checked_add(us / 1000))
                    .and_then(|ms| i64::try_from(ms).ok())
                    .map_or(Reply::Other, Reply::Int)
            }
            (Self::Listeners, PartValue::Counted(_, n)) if n >= 0 => Reply::Int(n),
            _ => Reply::Other,
        }
    }
}

/// A score as an integer, if it is one exactly.
fn exact(score: f64) -> Reply {
    if (0.0..EXACT_BELOW).contains(&score) && score.fract() == 0.0 {
        // In range and whole: the cast is exact.
        #[allow(clippy::cast_possible_truncation)]
        Reply::Int(score as i64)
    } else {
        Reply::Other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_get_says_whether_the_token_holds_the_key() {
        assert_eq!(
            PartRead::Held.reply(PartValue::Bytes(b"tok"), b"tok"),
            Reply::Int(1)
        );
        assert_eq!(
            PartRead::Held.reply(PartValue::Bytes(b"else"), b"tok"),
            Reply::Int(0)
        );
        assert_eq!(PartRead::Held.reply(PartValue::Nil, b"tok"), Reply::Int(0));
        assert_eq!(
            PartRead::Held.reply(PartValue::Int(1), b"tok"),
            Reply::Other
        );
    }

    #[test]
    fn a_score_is_read_only_when_exact() {
        let score = |value| PartRead::Score.reply(value, b"");
        assert_eq!(score(PartValue::Nil), Reply::Nil);
        assert_eq!(
            score(PartValue::Bytes(b"1732700000001")),
            Reply::Int(1_732_700_000_001)
        );
        assert_eq!(
            score(PartValue::Bytes(b"1.7327e12")),
            Reply::Int(1_732_700_000_000)
        );
        assert_eq!(score(PartValue::Double(42.0)), Reply::Int(42));
        assert_eq!(score(PartValue::Int(7)), Reply::Int(7));
        for bad in [
            PartValue::Double(1.5),
            PartValue::Double(-1.0),
            PartValue::Double(f64::INFINITY),
            PartValue::Double(EXACT_BELOW),
            PartValue::Bytes(b"inf"),
            PartValue::Bytes(b"x"),
            PartValue::Int(-3),
            PartValue::Pair(b"1", b"2"),
        ] {
            assert_eq!(score(bad), Reply::Other, "{bad:?}");
        }
    }

    #[test]
    fn time_is_in_milliseconds() {
        let time = |value| PartRead::Time.reply(value, b"");
        assert_eq!(
            time(PartValue::Pair(b"1732700000", b"123456")),
            Reply::Int(1_732_700_000_123)
        );
        assert_eq!(time(PartValue::Pair(b"x", b"1")), Reply::Other);
        assert_eq!(
            time(PartValue::Pair(b"18446744073709551615", b"0")),
            Reply::Other
        );
        assert_eq!(time(PartValue::Nil), Reply::Other);
    }

    #[test]
    fn a_count_is_the_channels_listeners() {
        let count = |value| PartRead::Listeners.reply(value, b"");
        assert_eq!(count(PartValue::Counted(b"ch", 2)), Reply::Int(2));
        assert_eq!(count(PartValue::Counted(b"ch", 0)), Reply::Int(0));
        for bad in [
            PartValue::Counted(b"ch", -1),
            PartValue::Int(2),
            PartValue::Pair(b"ch", b"2"),
            PartValue::Nil,
        ] {
            assert_eq!(count(bad), Reply::Other, "{bad:?}");
        }
    }
}
