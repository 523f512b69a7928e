//! The safety checker: at every instant of true time, at most one client is inside the validity
//! it was given for a resource.
//!
//! Each critical section becomes a [`Claim`]: the true-time interval `[start, end)` during which
//! its client believed it held the lock on its resources. `start` is the instant the client got
//! the lease; `end` is the instant it stopped using the lock — for a correct client never later
//! than `valid_until` mapped from the client's own clock to true time, for a buggy one whenever
//! it happened to stop. Two claims of different leases that share a resource and overlap are a
//! [`Violation`].

use std::fmt;

use super::clock::Nanos;

/// Identifies an open claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct ClaimId(usize);

/// One critical section: who, on what, and when (true time).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The client that held the lock.
    pub client: usize,
    /// The lease: `c<client>#<n>` for the client's `n`-th lock.
    pub label: String,
    /// The resources the lease covered.
    pub resources: Vec<Vec<u8>>,
    /// True time the client got the lease (ns since the start of the run).
    pub start: Nanos,
    /// True time the client stopped using it.
    pub end: Nanos,
}

/// Two clients inside their validity for the same resource at the same true instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The resource both held.
    pub resource: Vec<u8>,
    /// The claim that started first.
    pub first: Claim,
    /// The claim that started while the first was still held.
    pub second: Claim,
}

impl Violation {
    /// The true-time interval during which both held the resource.
    pub fn overlap(&self) -> (Nanos, Nanos) {
        (self.second.start, self.first.end.min(self.second.end))
    }
}

pub(crate) fn ms(t: Nanos) -> String {
    format!("{}.{:03}ms", t / 1_000_000, t / 1_000 % 1_000)
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (from, until) = self.overlap();
        write!(
            f,
            "resource {:?} held by {} (client {}, true time [{}, {})) and {} (client {}, [{}, {})) \
             at once during [{}, {})",
            String::from_utf8_lossy(&self.resource),
            self.first.label,
            self.first.client,
            ms(self.first.start),
            ms(self.first.end),
            self.second.label,
            self.second.client,
            ms(self.second.start),
            ms(self.second.end),
            ms(from),
            ms(until),
        )
    }
}

/// Collects the claims of one run and finds the first overlap.
#[derive(Debug, Default)]
pub(crate) struct Checker {
    claims: Vec<Claim>,
    open: Vec<bool>,
}

impl Checker {
    /// A claim starts at true time `start`.
    pub(crate) fn open(
        &mut self,
        client: usize,
        label: String,
        resources: Vec<Vec<u8>>,
        start: Nanos,
    ) -> ClaimId {
        self.claims.push(Claim {
            client,
            label,
            resources,
            start,
            end: start,
        });
        self.open.push(true);
        ClaimId(self.claims.len() - 1)
    }

    /// The claim ends at true time `end`.
    pub(crate) fn close(&mut self, id: ClaimId, end: Nanos) {
        let claim = &mut self.claims[id.0];
        debug_assert!(self.open[id.0], "closed twice");
        claim.end = end.max(claim.start);
        self.open[id.0] = false;
    }

    /// The claim's lease label.
    pub(crate) fn label(&self, id: ClaimId) -> &str {
        &self.claims[id.0].label
    }

    /// Critical sections of positive length so far.
    pub(crate) fn sections(&self) -> usize {
        self.claims.iter().filter(|c| c.end > c.start).count()
    }

    /// Whether any claim was left open (a run must end with every client done).
    pub(crate) fn any_open(&self) -> bool {
        self.open.iter().any(|&o| o)
    }

    /// The overlap that starts first, if any.
    pub(crate) fn violation(&self) -> Option<Violation> {
        let mut by_resource: std::collections::BTreeMap<&[u8], Vec<&Claim>> = Default::default();
        for claim in self.claims.iter().filter(|c| c.end > c.start) {
            for resource in &claim.resources {
                by_resource.entry(resource).or_default().push(claim);
            }
        }
        let mut found: Option<Violation> = None;
        for (resource, mut claims) in by_resource {
            claims.sort_by_key(|c| (c.start, c.end));
            // Sweep in start order, remembering the claim that reaches furthest.
            let mut furthest: Option<&Claim> = None;
            for claim in claims {
                if let Some(prev) = furthest {
                    if claim.start < prev.end {
                        let v = Violation {
                            resource: resource.to_vec(),
                            first: prev.clone(),
                            second: claim.clone(),
                        };
                        if found.as_ref().is_none_or(|f| v.overlap().0 < f.overlap().0) {
                            found = Some(v);
                        }
                        break;
                    }
                }
                if furthest.is_none_or(|p| claim.end > p.end) {
                    furthest = Some(claim);
                }
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn touching_claims_are_fine_overlapping_ones_are_not() {
        let mut checker = Checker::default();
        let a = checker.open(0, "c0#1".into(), vec![b"r".to_vec()], 10);
        checker.close(a, 20);
        let b = checker.open(1, "c1#1".into(), vec![b"r".to_vec()], 20);
        checker.close(b, 30);
        let c = checker.open(2, "c2#1".into(), vec![b"other".to_vec()], 5);
        checker.close(c, 50);
        assert_eq!(checker.violation(), None);
        let d = checker.open(3, "c3#1".into(), vec![b"x".to_vec(), b"r".to_vec()], 29);
        checker.close(d, 40);
        let v = checker.violation().expect("overlap");
        assert_eq!(
            (v.first.label.as_str(), v.second.label.as_str()),
            ("c1#1", "c3#1")
        );
        assert_eq!(v.overlap(), (29, 30));
    }
}
