//! A node's epoch for restart-aware voting ([`EPOCH_KEY`](crate::EPOCH_KEY)), and the rule that
//! decides from it whether the node may vote: the one [`ACQUIRE_CHECKED_SCRIPT`] runs on the
//! node, written once here for everything that reads an epoch outside a script (the in-memory
//! nodes of the tests, `redlock status`).
//!
//! [`ACQUIRE_CHECKED_SCRIPT`]: crate::ACQUIRE_CHECKED_SCRIPT

/// What a connection to a node that runs no script sets on a missing epoch key, `NX`, with a
/// TTL of [`EPOCH_CLAIM_TTL_MS`]: the node stores when the claim was made (its expiry, by the
/// node's own clock), so the memory's beginning needs no time of the client's. The previous
/// releases' scripts read it as no number, as a missing epoch, and stamp the key with the
/// node's `TIME` (which only makes the node wait longer).
pub const EPOCH_CLAIM: &[u8] = b"claimed";

/// The TTL of an [`EPOCH_CLAIM`], in ms (2^40 ms, about 35 years): the claim's age is this
/// minus its `PTTL`.
pub const EPOCH_CLAIM_TTL_MS: u64 = 1 << 40;

/// What a node's epoch key says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Epoch {
    /// An operator trusted the node (the key holds `0`).
    Trusted,
    /// The node's memory began at this time (ms, by its clock).
    Began(u64),
}

impl Epoch {
    /// What an epoch key holding `value` says, given its `PTTL` (`pttl_ms`, when it was read
    /// before `now_ms`, the node's `TIME`): a number as [`from_value`](Self::from_value); an
    /// [`EPOCH_CLAIM`] the time it was made; `None` for anything else, or a claim without its
    /// TTL (read as missing: the node waits).
    pub fn read(value: &[u8], pttl_ms: Option<i64>, now_ms: u64) -> Option<Self> {
        if value == EPOCH_CLAIM {
            let left = u64::try_from(pttl_ms?)
                .ok()
                .filter(|&left| left <= EPOCH_CLAIM_TTL_MS)?;
            // Read before TIME: the age is at most this, so the memory began no earlier.
            let age = EPOCH_CLAIM_TTL_MS - left;
            return Some(Self::Began(now_ms.saturating_sub(age).max(1)));
        }
        let ms = std::str::from_utf8(value).ok()?.trim().parse().ok()?;
        Some(Self::from_value(ms))
    }

    /// The epoch a key value means: `0` is trusted, anything else the ms its memory began.
    pub fn from_value(ms: u64) -> Self {
        if ms == 0 {
            Self::Trusted
        } else {
            Self::Began(ms)
        }
    }

    /// How much longer, in ms, the node refuses to vote when its clock reads `now_ms` and the
    /// longest TTL in use is `max_ttl_ms`; `None` once it may vote. Never overflows.
    pub fn refuses_for_ms(self, now_ms: u64, max_ttl_ms: u64) -> Option<u64> {
        match self {
            Self::Trusted => None,
            Self::Began(began) => {
                // As the script computes it: a clock behind the epoch lengthens the wait.
                let left = i128::from(max_ttl_ms) - (i128::from(now_ms) - i128::from(began));
                (left > 0).then(|| u64::try_from(left).unwrap_or(u64::MAX))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_began_when_it_was_made_by_the_nodes_clock() {
        let ttl = i64::try_from(EPOCH_CLAIM_TTL_MS).expect("fits");
        assert_eq!(
            Epoch::read(EPOCH_CLAIM, Some(ttl - 5_000), 100_000),
            Some(Epoch::Began(95_000))
        );
        assert_eq!(
            Epoch::read(EPOCH_CLAIM, Some(ttl), 7),
            Some(Epoch::Began(7))
        );
        // No TTL (-1), gone (-2), unread, or more than it was set with: as missing.
        for pttl in [Some(-1), Some(-2), None, Some(ttl + 1)] {
            assert_eq!(Epoch::read(EPOCH_CLAIM, pttl, 100_000), None, "{pttl:?}");
        }
        assert_eq!(Epoch::read(b"0", None, 5), Some(Epoch::Trusted));
        assert_eq!(Epoch::read(b" 1200 ", None, 5), Some(Epoch::Began(1_200)));
        assert_eq!(Epoch::read(b"x", Some(5), 5), None);
    }

    #[test]
    fn a_young_memory_refuses_until_the_longest_ttl_has_passed() {
        assert_eq!(Epoch::from_value(0), Epoch::Trusted);
        assert_eq!(Epoch::Trusted.refuses_for_ms(5, 60_000), None);
        let began = Epoch::from_value(1_000);
        assert_eq!(began.refuses_for_ms(1_000, 60_000), Some(60_000));
        assert_eq!(began.refuses_for_ms(31_000, 60_000), Some(30_000));
        assert_eq!(began.refuses_for_ms(61_000, 60_000), None);
        assert_eq!(
            began.refuses_for_ms(500, 60_000),
            Some(60_500),
            "a clock behind the epoch"
        );
        assert_eq!(began.refuses_for_ms(u64::MAX, u64::MAX), Some(1_000));
        assert_eq!(
            Epoch::Began(u64::MAX).refuses_for_ms(0, u64::MAX),
            Some(u64::MAX)
        );
    }
}
