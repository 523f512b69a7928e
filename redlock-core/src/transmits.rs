//! The requests of one [`Batch`](crate::Batch), in order: [`Transmits`].

use std::ops::Deref;

use smallvec::SmallVec;

use crate::output::Transmit;

/// The requests of one batch, in the order they must run. A batch of one request (every batch
/// of an uncontended client) holds it inline, without allocating; it reads as a slice of
/// [`Transmit`]s.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Transmits(SmallVec<[Transmit; 1]>);

impl Transmits {
    /// No request yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `transmit` after the others.
    pub fn push(&mut self, transmit: Transmit) {
        self.0.push(transmit);
    }
}

impl Deref for Transmits {
    type Target = [Transmit];

    fn deref(&self) -> &[Transmit] {
        &self.0
    }
}

impl From<Vec<Transmit>> for Transmits {
    fn from(transmits: Vec<Transmit>) -> Self {
        Self(SmallVec::from_vec(transmits))
    }
}

impl FromIterator<Transmit> for Transmits {
    fn from_iter<I: IntoIterator<Item = Transmit>>(iter: I) -> Self {
        Self(iter.into_iter().collect())
    }
}

impl Extend<Transmit> for Transmits {
    fn extend<I: IntoIterator<Item = Transmit>>(&mut self, iter: I) {
        self.0.extend(iter);
    }
}

impl<'a> IntoIterator for &'a Transmits {
    type Item = &'a Transmit;
    type IntoIter = std::slice::Iter<'a, Transmit>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl IntoIterator for Transmits {
    type Item = Transmit;
    type IntoIter = IntoIter;

    fn into_iter(self) -> IntoIter {
        IntoIter(self.0.into_iter())
    }
}

/// The requests of a [`Transmits`], taken in order.
#[derive(Debug)]
pub struct IntoIter(smallvec::IntoIter<[Transmit; 1]>);

impl Iterator for IntoIter {
    type Item = Transmit;

    fn next(&mut self) -> Option<Transmit> {
        self.0.next()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl ExactSizeIterator for IntoIter {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::{Origin, RequestId};

    fn transmit(batch: u32) -> Transmit {
        let token = crate::Token::new(b"token".to_vec()).expect("a token");
        let spec = crate::LockSpec::new(b"", [b"k".to_vec()], token).expect("a spec");
        Transmit {
            id: RequestId::new(Origin::new(0, 0), batch, 0),
            command: crate::Command::new(
                crate::Op::SetIfAbsent,
                spec,
                1000,
                crate::command::Extras::default(),
            ),
        }
    }

    #[test]
    fn requests_keep_their_order_through_every_way_in_and_out() {
        let mut transmits = Transmits::new();
        transmits.push(transmit(1));
        transmits.extend([transmit(2), transmit(3)]);
        let batches = |t: &Transmits| t.iter().map(|t| t.id.batch()).collect::<Vec<_>>();
        assert_eq!(batches(&transmits), [1, 2, 3]);
        assert_eq!(transmits.len(), 3);
        let from_vec = Transmits::from(vec![transmit(1), transmit(2), transmit(3)]);
        assert_eq!(from_vec, transmits);
        let owned: Vec<u32> = transmits.into_iter().map(|t| t.id.batch()).collect();
        assert_eq!(owned, [1, 2, 3]);
    }
}
