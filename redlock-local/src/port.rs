//! Free loopback ports for `redis-server` processes.

use std::net::{Ipv4Addr, TcpListener};
use std::process;
use std::sync::atomic::{AtomicU32, Ordering};

/// Ports handed out come from here: below Linux's default ephemeral range (32768–60999), so an
/// outgoing connection never holds one by accident.
const FIRST: u32 = 20_000;
const LAST: u32 = 32_000;

/// Next candidate offset into `FIRST..LAST`; `u32::MAX` means "not seeded yet".
static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);

/// Returns a loopback port that is free right now and that this process has never handed out
/// before.
///
/// # Implementation note
/// `redis-server` binds the port itself, so there is a window between our check and its bind. The
/// harness closes it by retrying with a new port when the server reports "Address already in use".
/// Never reusing a port inside one process means a server that was killed and is about to be
/// restarted on its port cannot lose that port to another test of the same binary. The starting
/// point depends on the process id, so test binaries running side by side start far apart.
pub(crate) fn free_port() -> u16 {
    let span = LAST - FIRST;
    // Seeding races are harmless: every thread picks the same seed.
    let seed = process::id().wrapping_mul(7_919) % span;
    let _ = NEXT.compare_exchange(u32::MAX, seed, Ordering::Relaxed, Ordering::Relaxed);
    for _ in 0..span {
        let offset = NEXT.fetch_add(1, Ordering::Relaxed) % span;
        let Ok(port) = u16::try_from(FIRST + offset) else {
            continue;
        };
        if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port in {FIRST}..{LAST}");
}
