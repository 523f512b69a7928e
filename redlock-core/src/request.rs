//! What a caller asks for: resources, TTL, and the options of one lock.

use std::time::Duration;

use crate::retry::RetryPolicy;

/// What to lock: resources, TTL, and optionally a token, retry policy or deadline of its own.
#[derive(Debug, Clone)]
#[must_use]
pub struct LockRequest {
    pub(crate) resources: Vec<Vec<u8>>,
    pub(crate) ttl: Duration,
    pub(crate) token: Option<Vec<u8>>,
    pub(crate) retry: Option<RetryPolicy>,
    pub(crate) deadline: Option<Duration>,
    pub(crate) auto_extend: bool,
    pub(crate) fenced: bool,
}

impl LockRequest {
    /// A lock on one resource for `ttl`.
    pub fn new(resource: impl Into<Vec<u8>>, ttl: Duration) -> Self {
        Self {
            resources: vec![resource.into()],
            ttl,
            token: None,
            retry: None,
            deadline: None,
            auto_extend: false,
            fenced: false,
        }
    }

    /// Adds a resource: the lock is taken on all of them at once on each node, or on none.
    pub fn resource(mut self, resource: impl Into<Vec<u8>>) -> Self {
        self.resources.push(resource.into());
        self
    }

    /// Uses this token instead of a random one (1 to 512 bytes; it must be unique to the holder).
    ///
    /// A generated token changes with each round (`<random>.<round>`), so a late clean-up release
    /// of one round can never delete the key a later round set. A caller's token is the same in
    /// every round: that relies on the transport keeping each node's requests in order, as every
    /// adapter of this project does.
    pub fn token(mut self, token: impl Into<Vec<u8>>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Retries with this policy instead of the client's.
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = Some(retry);
        self
    }

    /// Gives up once `deadline` has passed since the first round (overrides the policy's).
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// Keeps the lock extended once it is held, for as long as it is not released: the
    /// [`Lifecycle`](crate::Lifecycle) extends it (with its TTL) when half of the validity left
    /// has passed, retries a failed extension while one can still finish in time, and reports
    /// [`LockEvent::Lost`](crate::LockEvent::Lost) — before the validity ends — when it cannot
    /// keep it. Off by default.
    pub fn auto_extend(mut self) -> Self {
        self.auto_extend = true;
        self
    }

    /// Mints a fencing token for the lock from a quorum ([`Lease::fence`](crate::Lease::fence)):
    /// a number that strictly increases across successive holders of the same resources, for a
    /// protected resource that rejects writes carrying a smaller one. Costs one more round trip
    /// (the fence is committed on the nodes that granted, inside the validity) and one counter
    /// key per resource per node, kept an hour after the last fenced acquisition. The ordering
    /// holds with restart-aware voting on and the nodes' wall clocks within the longest TTL in
    /// use of each other. Off by default.
    pub fn fenced(mut self) -> Self {
        self.fenced = true;
        self
    }

    /// The TTL asked for.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }
}
