//! Which node has a live release-notice subscriber, and what a change of channels asks of each:
//! the part of an adapter's notices that does not depend on its transport.

use redlock_core::Change;

/// One release-notice subscriber per node (a task or a thread of the adapter), by the link the
/// driver reaches it through. A node has none until a lock first waits, and none again after its
/// subscriber ended (its connection failed), until the next subscription.
#[derive(Debug)]
pub(crate) struct Subscribers<L> {
    links: Vec<Option<L>>,
}

impl<L> Subscribers<L> {
    /// No subscriber on any of `nodes` nodes yet.
    pub(crate) fn new(nodes: usize) -> Self {
        Self {
            links: (0..nodes).map(|_| None).collect(),
        }
    }

    /// Applies `change` on every node: `send` passes it to a live subscriber (`false` if it has
    /// ended); a node without one, when the change subscribes, gets one from `start(node,
    /// channels())`, which subscribes to every channel in use (the change's included).
    pub(crate) fn apply(
        &mut self,
        change: &Change,
        channels: impl Fn() -> Vec<Vec<u8>>,
        send: impl Fn(&L, Change) -> bool,
        mut start: impl FnMut(usize, Vec<Vec<u8>>) -> Option<L>,
    ) {
        for (node, link) in self.links.iter_mut().enumerate() {
            if link.as_ref().is_some_and(|l| send(l, change.clone())) {
                continue;
            }
            *link = match change {
                Change::Subscribe(_) => start(node, channels()),
                Change::Unsubscribe(_) => None,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    #[test]
    fn a_node_without_a_live_subscriber_gets_one_on_the_next_subscription() {
        let started = RefCell::new(Vec::new());
        let mut subscribers = Subscribers::new(2);
        let alive = |l: &(usize, bool), _| l.1;
        let start = |node, channels: Vec<Vec<u8>>| {
            started.borrow_mut().push((node, channels));
            Some((node, node == 0))
        };
        let all = || vec![b"a".to_vec()];
        subscribers.apply(&Change::Subscribe(b"a".to_vec()), all, alive, start);
        assert_eq!(started.borrow().len(), 2, "one per node");
        // Node 1's subscriber has ended: an unsubscription starts nothing, a subscription does.
        subscribers.apply(&Change::Unsubscribe(b"a".to_vec()), all, alive, start);
        assert_eq!(started.borrow().len(), 2);
        subscribers.apply(&Change::Subscribe(b"b".to_vec()), all, alive, start);
        assert_eq!(started.borrow().last().map(|(node, _)| *node), Some(1));
        assert_eq!(started.borrow().len(), 3);
    }
}
