//! Counting votes: when a round is won, when it can no longer be won, and why.

/// The smallest majority of `nodes`: any two sets of this size share a node.
pub fn majority(nodes: usize) -> usize {
    nodes / 2 + 1
}

/// How the votes of a round stand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Tally {
    pub(crate) granted: usize,
    pub(crate) refused: usize,
    pub(crate) failed: usize,
    pub(crate) pending: usize,
}

/// Why a round was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailureReason {
    /// Enough nodes answered to form a quorum, but some are held by another token.
    Contended,
    /// Too few nodes answered (errors or timeouts) to form a quorum.
    Unavailable,
    /// A quorum agreed, but too late: less validity was left than the configured minimum.
    TooSlow,
    /// Resuming a lock by its token: too few nodes hold the lock under that token (a wrong
    /// token, or a lock that expired or was released). Nothing was changed on any node.
    NotHeld,
}

/// Where a round stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// A quorum granted.
    Won,
    /// A quorum can no longer grant.
    Lost(FailureReason),
    /// Neither yet.
    Open,
}

impl Tally {
    /// Decides as early as the outcome is certain, in either direction (step 3 of the Redlock
    /// description, without waiting for stragglers).
    pub(crate) fn decide(&self, quorum: usize) -> Decision {
        if self.granted >= quorum {
            Decision::Won
        } else if self.granted + self.pending < quorum {
            // The nodes that did answer could have formed a quorum: another holder is the cause.
            if self.granted + self.refused >= quorum {
                Decision::Lost(FailureReason::Contended)
            } else {
                Decision::Lost(FailureReason::Unavailable)
            }
        } else {
            Decision::Open
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(granted: usize, refused: usize, failed: usize, pending: usize) -> Tally {
        Tally {
            granted,
            refused,
            failed,
            pending,
        }
    }

    #[test]
    fn decides_early_in_both_directions() {
        assert_eq!(tally(3, 0, 0, 2).decide(3), Decision::Won);
        assert_eq!(tally(2, 0, 0, 3).decide(3), Decision::Open);
        assert_eq!(
            tally(0, 3, 0, 2).decide(3),
            Decision::Lost(FailureReason::Contended)
        );
        assert_eq!(
            tally(0, 0, 3, 2).decide(3),
            Decision::Lost(FailureReason::Unavailable)
        );
        assert_eq!(
            tally(2, 1, 2, 0).decide(3),
            Decision::Lost(FailureReason::Contended)
        );
        assert_eq!(tally(1, 1, 1, 2).decide(3), Decision::Open);
        assert_eq!(
            tally(1, 1, 2, 1).decide(3),
            Decision::Lost(FailureReason::Unavailable)
        );
        assert_eq!(tally(1, 0, 2, 0).decide(1), Decision::Won);
    }

    #[test]
    fn two_majorities_always_share_a_node() {
        for n in 1..=64 {
            assert!(2 * majority(n) > n, "n = {n}");
            assert!(majority(n) <= n);
        }
    }
}
