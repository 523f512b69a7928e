//! A node's epoch for restart-aware voting ([`EPOCH_KEY`](crate::EPOCH_KEY)), and the rule that
//! decides from it whether the node may vote: the one [`ACQUIRE_CHECKED_SCRIPT`] runs on the
//! node, written once here for everything that reads an epoch outside a script (the in-memory
//! nodes of the tests, `redlock status`).
//!
//! [`ACQUIRE_CHECKED_SCRIPT`]: crate::ACQUIRE_CHECKED_SCRIPT

/// What a node's epoch key says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Epoch {
    /// An operator trusted the node (the key holds `0`).
    Trusted,
    /// The node's memory began at this time (ms, by its clock).
    Began(u64),
}

impl Epoch {
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
