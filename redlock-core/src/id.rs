//! Request ids: which lock, which of its operations, which batch and which node a request is for.

/// Names one operation of one lock: the lock's id (drawn from the injected RNG when its
/// [`Lifecycle`](crate::Lifecycle) is made) and the operation's number within that lock
/// (1 for the acquisition, then one more for each extension, the release, …).
///
/// The per-operation machines a lifecycle is built from use the zero origin when they run on
/// their own (tests, with the `testing` feature).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Origin {
    lock: u64,
    operation: u32,
}

impl Origin {
    pub(crate) fn new(lock: u64, operation: u32) -> Self {
        Self { lock, operation }
    }

    /// The lock's id.
    pub fn lock(&self) -> u64 {
        self.lock
    }

    /// The operation's number within its lock (increases by one per operation).
    pub fn operation(&self) -> u32 {
        self.operation
    }

    /// The origin of the lock's next operation.
    pub(crate) fn next(self) -> Self {
        Self::new(self.lock, self.operation.saturating_add(1))
    }
}

/// Names one request: its [`Origin`] (lock and operation), the batch within that operation, and
/// the node it goes to. Every reply is handed back with the id of its request; a reply whose id
/// is not from the batch in flight — an earlier operation of the same lock, another lock, an
/// earlier round — never counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId {
    origin: Origin,
    batch: u32,
    node: u16,
}

impl RequestId {
    pub(crate) fn new(origin: Origin, batch: u32, node: usize) -> Self {
        // Node indices are below MAX_NODES (64), so they fit.
        let node = u16::try_from(node).unwrap_or(u16::MAX);
        Self {
            origin,
            batch,
            node,
        }
    }

    /// Index of the node (into the node list the [`Config`](crate::Config) was built for).
    pub fn node(&self) -> usize {
        usize::from(self.node)
    }

    /// The batch of requests this one belongs to (increases within one operation).
    pub fn batch(&self) -> u32 {
        self.batch
    }

    /// The lock and operation that sent it.
    pub fn origin(&self) -> Origin {
        self.origin
    }

    /// The same request, in another batch (for tests that forge stale ids).
    #[cfg(any(test, feature = "proptest"))]
    pub(crate) fn with_batch(self, batch: u32) -> Self {
        Self { batch, ..self }
    }

    /// The same request, to another node (for tests that forge unknown ids).
    #[cfg(any(test, feature = "proptest"))]
    pub(crate) fn with_node(self, node: usize) -> Self {
        Self::new(self.origin, self.batch, node)
    }
}
