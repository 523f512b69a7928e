//! The entry points both clients share word for word but for waiting: written once, expanded
//! into `aio::Redlock` (async) and `blocking::Redlock`.

/// Expands, inside an `impl` of a client with fields `inner.deployment` and methods `acquire`
/// and `resume_request`, into the getters and the entry points that only build a request.
/// `$($async)?` marks the async client's methods; `$finish` turns the call they delegate to
/// into the method's value (`awaited!`: `.await`; `returned!`: as it is).
macro_rules! entry_points {
    ({$($async:tt)?} $lock:ty, $finish:ident) => {
        /// The checked settings.
        pub fn config(&self) -> &redlock_core::Config {
            self.inner.deployment.config()
        }

        /// The nodes, as `host:port` (never with credentials), in the order given.
        pub fn nodes(&self) -> &[std::sync::Arc<str>] {
            self.inner.deployment.nodes()
        }

        /// Locks `resource` for `ttl`, retrying as the client's retry policy says. On fresh
        /// nodes (a first deployment) every node refuses to vote for `max_ttl` (restart-aware
        /// voting); when such refusals outlast the retry budget, no later round could win, and
        /// the call fails after its first round with [`Error::Unavailable`] naming each refusal,
        /// its cause and the remedy (`redlock nodes trust`, or `trust_nodes()`, when no lock can
        /// be live).
        pub $($async)? fn lock(
            &self,
            resource: impl Into<Vec<u8>>,
            ttl: std::time::Duration,
        ) -> Result<$lock, Error> {
            $finish!(self.acquire(redlock_core::LockRequest::new(resource, ttl)))
        }

        /// Locks `resource` for `ttl` in a single round: no retry.
        pub $($async)? fn try_lock(
            &self,
            resource: impl Into<Vec<u8>>,
            ttl: std::time::Duration,
        ) -> Result<$lock, Error> {
            let request = redlock_core::LockRequest::new(resource, ttl)
                .retry(redlock_core::RetryPolicy::once());
            $finish!(self.acquire(request))
        }

        /// Resumes a lock that another client (or an earlier process) acquired, from its
        /// resource and token: one compare-and-extend round to `ttl` proves the token holds it
        /// on a quorum, and the returned lock is valid from that round's start. A wrong or stale
        /// token is [`Error::NotHeld`], and no key is changed. An async call dropped midway
        /// changes nothing either, even once the proof is in: the lock is then left as it was
        /// handed over, never released.
        pub $($async)? fn resume(
            &self,
            resource: impl Into<Vec<u8>>,
            token: impl Into<Vec<u8>>,
            ttl: std::time::Duration,
        ) -> Result<$lock, Error> {
            $finish!(self.resume_request(redlock_core::LockRequest::new(resource, ttl).token(token)))
        }
    };
}

/// `entry_points!`'s finish for the async client.
#[cfg(any(feature = "tokio", feature = "smol"))]
macro_rules! awaited {
    ($call:expr) => {
        $call.await
    };
}

/// `entry_points!`'s finish for the blocking client.
#[cfg(feature = "blocking")]
macro_rules! returned {
    ($call:expr) => {
        $call
    };
}
