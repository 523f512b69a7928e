//! What the process holds in memory: its resident set size (`/proc/self/statm`) and the
//! counters of the counting global allocator (`stats_alloc` around `std::alloc::System`,
//! installed in `main.rs`).
//!
//! It only reads; it never allocates on purpose, never frees, and never resets a counter (so
//! every measurement is a difference of two snapshots). The counters cover every thread of the
//! process, not only the one that reads them.

use std::fs;

use nix::unistd::{SysconfVar, sysconf};

/// The allocator's counters at one instant.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HeapSnapshot {
    allocations: usize,
    reallocations: usize,
    bytes_allocated: usize,
    bytes_deallocated: usize,
}

/// What happened on the heap between two snapshots.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct HeapDelta {
    /// `alloc` and `alloc_zeroed` calls.
    pub(crate) allocations: u64,
    /// `realloc` calls.
    pub(crate) reallocations: u64,
    /// Bytes requested (growing reallocations included).
    pub(crate) bytes_allocated: u64,
    /// Bytes requested minus bytes freed: the growth of the live heap (negative if it shrank).
    pub(crate) live_bytes: i64,
}

/// The allocator's counters now.
pub(crate) fn heap() -> HeapSnapshot {
    let stats = crate::ALLOCATOR.stats();
    HeapSnapshot {
        allocations: stats.allocations,
        reallocations: stats.reallocations,
        bytes_allocated: stats.bytes_allocated,
        bytes_deallocated: stats.bytes_deallocated,
    }
}

impl HeapSnapshot {
    /// What happened on the heap from `self` until `later`.
    pub(crate) fn until(self, later: Self) -> HeapDelta {
        let count = |a: usize, b: usize| u64::try_from(b.wrapping_sub(a)).unwrap_or(u64::MAX);
        let allocated = later.bytes_allocated.wrapping_sub(self.bytes_allocated);
        let freed = later.bytes_deallocated.wrapping_sub(self.bytes_deallocated);
        let signed = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        HeapDelta {
            allocations: count(self.allocations, later.allocations),
            reallocations: count(self.reallocations, later.reallocations),
            bytes_allocated: count(self.bytes_allocated, later.bytes_allocated),
            live_bytes: signed(allocated) - signed(freed),
        }
    }
}

/// The process's resident set size in bytes, from `/proc/self/statm` (Linux); `None` where
/// that file or the page size cannot be read.
pub(crate) fn rss_bytes() -> Option<u64> {
    let statm = fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    let page_size = u64::try_from(sysconf(SysconfVar::PAGE_SIZE).ok()??).ok()?;
    pages.checked_mul(page_size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_an_allocation_of_this_thread() {
        let before = heap();
        let buffer: Vec<u8> = std::hint::black_box(Vec::with_capacity(4096));
        let after = heap();
        drop(buffer);
        let delta = before.until(after);
        assert!(delta.allocations >= 1);
        assert!(delta.bytes_allocated >= 4096);
    }

    #[test]
    fn reads_a_resident_set() {
        assert!(rss_bytes().is_some_and(|rss| rss > 0));
    }
}
