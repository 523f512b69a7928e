//! Which node has a live release-notice subscriber, and what a change of channels asks of each:
//! the part of an adapter's notices that does not depend on its transport.

use redlock_core::Change;

/// What a subscriber tells its driver: a notice, or how far its subscriptions are confirmed
/// ([`Multiplexer::handle_subscribed`](redlock_core::Multiplexer::handle_subscribed)). A
/// cluster node's subscriber only passes notices on (its releases announce to every
/// listener).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FromSubscriber {
    /// A release notice on this channel.
    Notice(Vec<u8>),
    /// The node confirmed every subscription through the change numbered `through`.
    Subscribed {
        /// Which node.
        node: usize,
        /// The number of the last change confirmed ([`Multiplexer::subscriptions_handed`]
        /// once it was handed out).
        ///
        /// [`Multiplexer::subscriptions_handed`]: redlock_core::Multiplexer::subscriptions_handed
        through: u64,
    },
    /// The node's subscriber connection is gone (said before its task or thread ends).
    Ended {
        /// Which node.
        node: usize,
    },
}

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

    /// Applies `change`, numbered `through` (the multiplexer's count of changes handed out,
    /// this one included), on every node: `send` passes both to a live subscriber (`false` if
    /// it has ended); a node without one, when the change subscribes, gets one from
    /// `start(node, channels(), through)`, which subscribes to every channel in use (the
    /// change's included).
    pub(crate) fn apply(
        &mut self,
        change: &Change,
        through: u64,
        channels: impl Fn() -> Vec<Vec<u8>>,
        send: impl Fn(&L, (Change, u64)) -> bool,
        mut start: impl FnMut(usize, Vec<Vec<u8>>, u64) -> Option<L>,
    ) {
        for (node, link) in self.links.iter_mut().enumerate() {
            if link
                .as_ref()
                .is_some_and(|l| send(l, (change.clone(), through)))
            {
                continue;
            }
            *link = match change {
                Change::Subscribe(_) => start(node, channels(), through),
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
        let start = |node, channels: Vec<Vec<u8>>, through| {
            started.borrow_mut().push((node, channels, through));
            Some((node, node == 0))
        };
        let all = || vec![b"a".to_vec()];
        subscribers.apply(&Change::Subscribe(b"a".to_vec()), 1, all, alive, start);
        assert_eq!(started.borrow().len(), 2, "one per node");
        // Node 1's subscriber has ended: an unsubscription starts nothing, a subscription does,
        // numbered as the change that started it.
        subscribers.apply(&Change::Unsubscribe(b"a".to_vec()), 2, all, alive, start);
        assert_eq!(started.borrow().len(), 2);
        subscribers.apply(&Change::Subscribe(b"b".to_vec()), 3, all, alive, start);
        assert_eq!(
            started
                .borrow()
                .last()
                .map(|(node, _, through)| (*node, *through)),
            Some((1, 3))
        );
        assert_eq!(started.borrow().len(), 3);
    }
}
