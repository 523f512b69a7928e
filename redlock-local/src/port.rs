//! Free loopback ports for `redis-server` processes.

use std::env;
use std::net::{Ipv4Addr, TcpListener};
use std::process;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::error::HarnessError;

/// The environment variable that sets the ports handed out, `FIRST-LAST` (inclusive), for a
/// machine where other servers use the default range.
pub const PORTS_ENV: &str = "REDLOCK_LOCAL_PORTS";

/// Ports handed out by default: below Linux's default ephemeral range (32768–60999), so an
/// outgoing connection never holds one by accident.
const FIRST: u32 = 20_000;
const LAST: u32 = 31_999;

/// Next candidate offset into the range; `u32::MAX` means "not seeded yet".
static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);

/// The range, read from [`PORTS_ENV`] once per process.
static RANGE: OnceLock<Result<(u32, u32), String>> = OnceLock::new();

/// Returns a loopback port that is free right now and that this process has never handed out
/// before, from [`PORTS_ENV`]'s range or the default one (20000–31999).
///
/// # Implementation note
/// `redis-server` binds the port itself, so there is a window between our check and its bind. The
/// harness closes it by retrying with a new port when the server reports "Address already in use".
/// Never reusing a port inside one process means a server that was killed and is about to be
/// restarted on its port cannot lose that port to another test of the same binary. The starting
/// point depends on the process id, so test binaries running side by side start far apart.
pub(crate) fn free_port() -> Result<u16, HarnessError> {
    let (first, last) = RANGE
        .get_or_init(|| range(env::var(PORTS_ENV).ok().as_deref()))
        .clone()
        .map_err(HarnessError::Ports)?;
    let span = last - first + 1;
    // Seeding races are harmless: every thread picks the same seed.
    let seed = process::id().wrapping_mul(7_919) % span;
    let _ = NEXT.compare_exchange(u32::MAX, seed, Ordering::Relaxed, Ordering::Relaxed);
    for _ in 0..span {
        let offset = NEXT.fetch_add(1, Ordering::Relaxed) % span;
        let Ok(port) = u16::try_from(first + offset) else {
            continue;
        };
        if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
            return Ok(port);
        }
    }
    Err(HarnessError::Ports(format!(
        "no free loopback port in {first}-{last} (set {PORTS_ENV}=FIRST-LAST for another range)"
    )))
}

/// The range `value` names (`FIRST-LAST`, 1024 ≤ FIRST ≤ LAST ≤ 65535), or the default one.
fn range(value: Option<&str>) -> Result<(u32, u32), String> {
    let Some(value) = value.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok((FIRST, LAST));
    };
    let parsed = value
        .split_once('-')
        .and_then(|(a, b)| Some((a.trim().parse::<u16>().ok()?, b.trim().parse::<u16>().ok()?)));
    match parsed {
        Some((first, last)) if 1024 <= first && first <= last => {
            Ok((u32::from(first), u32::from(last)))
        }
        _ => Err(format!(
            "{PORTS_ENV}={value:?} is not a port range: write FIRST-LAST, with \
             1024 <= FIRST <= LAST <= 65535 (e.g. 40000-40999)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_is_first_dash_last_or_the_default() {
        assert_eq!(range(None), Ok((FIRST, LAST)));
        assert_eq!(range(Some(" ")), Ok((FIRST, LAST)));
        assert_eq!(range(Some("40000-40999")), Ok((40_000, 40_999)));
        assert_eq!(range(Some("40000-40000")), Ok((40_000, 40_000)));
        for bad in [
            "40000",
            "a-b",
            "500-600",
            "41000-40000",
            "40000-70000",
            "-1-5",
        ] {
            let err = range(Some(bad)).expect_err(bad);
            assert!(
                err.contains(PORTS_ENV) && err.contains("FIRST-LAST"),
                "{err}"
            );
        }
    }
}
