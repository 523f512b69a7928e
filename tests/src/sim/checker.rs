//! The safety checker: at every instant of true time, at most one client is inside the validity
//! it was given for a resource.
//!
//! Each critical section becomes a [`Claim`]: the true-time interval `[start, end)` during which
//! its client believed it held the lock on its resources. `start` is the instant the client got
//! the lease; `end` is the instant it stopped using the lock — for a correct client never later
//! than `valid_until` mapped from the client's own clock to true time, for a buggy one whenever
//! it happened to stop. Two claims of different leases that share a resource and overlap are a
//! [`Violation`].
//!
//! With fenced locks it also checks the fences: claims on a resource, in the order they started,
//! carry strictly increasing fences; and a fenced store (which accepts a write whose fence is at
//! least the largest it accepted) never accepts the writes of two holders under one fence.

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
    /// The lease's fence, for a fenced lock.
    pub fence: Option<u64>,
}

/// What went wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ViolationKind {
    /// Two clients inside their validity for the same resource at once.
    Overlap,
    /// A holder that started later got a fence no larger than an earlier holder's.
    FenceNotIncreasing,
    /// The fenced store accepted two holders' writes under the same fence.
    FenceReused,
}

/// Two claims that break safety: held at once, or fenced out of order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Which property broke.
    pub kind: ViolationKind,
    /// The resource both held.
    pub resource: Vec<u8>,
    /// The claim that started first.
    pub first: Claim,
    /// The claim that started while the first was still held.
    pub second: Claim,
}

impl Violation {
    /// The true-time interval during which both held the resource (for a fence violation, the
    /// instant the second claim started).
    pub fn overlap(&self) -> (Nanos, Nanos) {
        match self.kind {
            ViolationKind::Overlap => (self.second.start, self.first.end.min(self.second.end)),
            ViolationKind::FenceNotIncreasing | ViolationKind::FenceReused => {
                (self.second.start, self.second.start)
            }
        }
    }
}

pub(crate) fn ms(t: Nanos) -> String {
    format!("{}.{:03}ms", t / 1_000_000, t / 1_000 % 1_000)
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.kind != ViolationKind::Overlap {
            return write!(
                f,
                "resource {:?}: {} (client {}, started {}) has fence {:?}, {} (client {}, started \
                 {}) has fence {:?}: {}",
                String::from_utf8_lossy(&self.resource),
                self.first.label,
                self.first.client,
                ms(self.first.start),
                self.first.fence,
                self.second.label,
                self.second.client,
                ms(self.second.start),
                self.second.fence,
                match self.kind {
                    ViolationKind::FenceNotIncreasing => "the later holder's fence is not larger",
                    _ => "the fenced store accepted both holders' writes under one fence",
                }
            );
        }
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
    /// Writes to the fenced store: the claim that wrote, and when (true time).
    writes: Vec<(ClaimId, Nanos)>,
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
            fence: None,
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

    /// The claim's lease carries `fence`.
    pub(crate) fn set_fence(&mut self, id: ClaimId, fence: Option<u64>) {
        self.claims[id.0].fence = fence;
    }

    /// The claim's holder writes its fence to the fenced store at true time `t`.
    pub(crate) fn write(&mut self, id: ClaimId, t: Nanos) {
        self.writes.push((id, t));
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

    /// The first violation: an overlap (the one that starts first), else a fence out of order,
    /// else a fence the store accepted from two holders.
    pub(crate) fn violation(&self) -> Option<Violation> {
        self.overlap_violation()
            .or_else(|| self.fence_order_violation())
            .or_else(|| self.store_violation())
    }

    /// Fenced claims on a resource, in start order, must carry strictly increasing fences.
    fn fence_order_violation(&self) -> Option<Violation> {
        let mut by_resource: std::collections::BTreeMap<&[u8], Vec<&Claim>> = Default::default();
        for claim in self.claims.iter().filter(|c| c.fence.is_some()) {
            for resource in &claim.resources {
                by_resource.entry(resource).or_default().push(claim);
            }
        }
        for (resource, mut claims) in by_resource {
            claims.sort_by_key(|c| (c.start, c.fence));
            for pair in claims.windows(2) {
                if pair[1].fence <= pair[0].fence {
                    return Some(Violation {
                        kind: ViolationKind::FenceNotIncreasing,
                        resource: resource.to_vec(),
                        first: pair[0].clone(),
                        second: pair[1].clone(),
                    });
                }
            }
        }
        None
    }

    /// Replays the writes through a fenced store (accept a fence at least the largest accepted)
    /// and finds two holders accepted under one fence.
    fn store_violation(&self) -> Option<Violation> {
        let mut writes = self.writes.clone();
        writes.sort_by_key(|(id, t)| (*t, id.0));
        let mut last: std::collections::BTreeMap<&[u8], (u64, ClaimId)> = Default::default();
        for (id, _) in writes {
            let claim = &self.claims[id.0];
            let Some(fence) = claim.fence else { continue };
            for resource in &claim.resources {
                match last.get(&resource[..]) {
                    Some(&(accepted, _)) if fence < accepted => {} // rejected
                    Some(&(accepted, by)) if fence == accepted && by != id => {
                        return Some(Violation {
                            kind: ViolationKind::FenceReused,
                            resource: resource.clone(),
                            first: self.claims[by.0].clone(),
                            second: claim.clone(),
                        });
                    }
                    _ => {
                        last.insert(resource, (fence, id));
                    }
                }
            }
        }
        None
    }

    /// The overlap that starts first, if any.
    fn overlap_violation(&self) -> Option<Violation> {
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
                if let Some(prev) = furthest
                    && claim.start < prev.end
                {
                    let v = Violation {
                        kind: ViolationKind::Overlap,
                        resource: resource.to_vec(),
                        first: prev.clone(),
                        second: claim.clone(),
                    };
                    if found.as_ref().is_none_or(|f| v.overlap().0 < f.overlap().0) {
                        found = Some(v);
                    }
                    break;
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

    #[test]
    fn fences_must_increase_and_the_store_must_not_accept_one_fence_twice() {
        let r = || vec![b"r".to_vec()];
        let mut checker = Checker::default();
        let a = checker.open(0, "c0#1".into(), r(), 10);
        checker.set_fence(a, Some(5));
        checker.write(a, 15);
        checker.close(a, 20);
        let b = checker.open(1, "c1#1".into(), r(), 20);
        checker.set_fence(b, Some(6));
        checker.write(b, 25);
        checker.close(b, 30);
        // A stale write of `a` after `b`'s is rejected by the store: no violation.
        checker.write(a, 35);
        assert_eq!(checker.violation(), None);
        // A third holder with a fence no larger than b's is caught.
        let c = checker.open(2, "c2#1".into(), r(), 30);
        checker.set_fence(c, Some(6));
        checker.write(c, 35);
        checker.close(c, 40);
        let v = checker.violation().expect("fence not increasing");
        assert_eq!(v.kind, ViolationKind::FenceNotIncreasing);
        assert_eq!(
            (v.first.label.as_str(), v.second.label.as_str()),
            ("c1#1", "c2#1")
        );
    }

    #[test]
    fn the_store_check_alone_catches_a_reused_fence() {
        let r = || vec![b"r".to_vec()];
        let mut checker = Checker::default();
        // Out-of-order starts are the order check's business; give both one fence and
        // compare only the store's view.
        let a = checker.open(0, "c0#1".into(), r(), 10);
        checker.set_fence(a, Some(7));
        checker.close(a, 20);
        let b = checker.open(1, "c1#1".into(), r(), 20);
        checker.set_fence(b, Some(7));
        checker.close(b, 30);
        checker.write(a, 15);
        checker.write(b, 25);
        let v = checker.store_violation().expect("one fence accepted twice");
        assert_eq!(v.kind, ViolationKind::FenceReused);
    }
}
