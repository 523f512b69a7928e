//! The mutual-exclusion checker: every critical section is recorded as a window on the one
//! monotonic clock of the test process, and windows of one resource must never overlap.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// One critical section as its client lived it.
///
/// The window during which the client was entitled to act as the holder is
/// `[acquired_at, min(valid_until, ended_at))`: from the moment the lock call returned (a bit
/// after the lock was really won, which only makes the window shorter) until the validity the
/// library reported ran out or the client stopped using the lock (started its release, or
/// dropped the lock), whichever came first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Which client held it.
    pub client: usize,
    /// Which resource.
    pub resource: usize,
    /// How the lock was taken (`lock`, `try_lock`, `with_lock`, ...), for messages.
    pub how: &'static str,
    /// When the lock call returned the lock (or `with_lock` started the work).
    pub acquired_at: Instant,
    /// The validity the library reported last (after any extension).
    pub valid_until: Instant,
    /// When the client stopped using the lock.
    pub ended_at: Instant,
}

impl Window {
    /// The end of the window: `min(valid_until, ended_at)`.
    pub fn end(&self) -> Instant {
        self.valid_until.min(self.ended_at)
    }

    /// Whether the window has any length.
    pub fn is_empty(&self) -> bool {
        self.end() <= self.acquired_at
    }
}

/// Two windows of one resource that overlap: two clients held it at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overlap {
    /// The window that started first.
    pub first: Window,
    /// The window that started inside `first`.
    pub second: Window,
    /// For how long both were open.
    pub length: Duration,
}

/// Collects windows from every client (any thread, any runtime) and checks them.
#[derive(Debug)]
pub struct Recorder {
    origin: Instant,
    windows: Mutex<Vec<Window>>,
}

impl Default for Recorder {
    fn default() -> Self {
        Self::new()
    }
}

impl Recorder {
    /// An empty recorder; times in its messages count from now.
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
            windows: Mutex::default(),
        }
    }

    /// Records one critical section.
    pub fn record(&self, window: Window) {
        self.lock().push(window);
    }

    /// Every window recorded so far.
    pub fn windows(&self) -> Vec<Window> {
        self.lock().clone()
    }

    /// Every pair of overlapping windows of one resource (each late window is reported against
    /// the earlier window reaching furthest into it). Empty windows never overlap anything.
    pub fn overlaps(&self) -> Vec<Overlap> {
        let mut by_resource: BTreeMap<usize, Vec<Window>> = BTreeMap::new();
        for window in self.windows().into_iter().filter(|w| !w.is_empty()) {
            by_resource.entry(window.resource).or_default().push(window);
        }
        let mut found = Vec::new();
        for mut windows in by_resource.into_values() {
            windows.sort_by_key(|w| (w.acquired_at, w.end()));
            let mut reaching: Option<Window> = None;
            for window in windows {
                if let Some(earlier) = reaching
                    && window.acquired_at < earlier.end()
                {
                    found.push(Overlap {
                        first: earlier,
                        second: window,
                        length: earlier.end().min(window.end()) - window.acquired_at,
                    });
                }
                if reaching.is_none_or(|r| window.end() > r.end()) {
                    reaching = Some(window);
                }
            }
        }
        found
    }

    /// Describes `overlap` with times in milliseconds since the recorder was made.
    pub fn describe(&self, overlap: &Overlap) -> String {
        format!(
            "resource {}: client {} ({}) held it {} and client {} ({}) held it {}: both for {:?}",
            overlap.first.resource,
            overlap.first.client,
            overlap.first.how,
            self.span(&overlap.first),
            overlap.second.client,
            overlap.second.how,
            self.span(&overlap.second),
            overlap.length,
        )
    }

    /// Describes `window` with times in milliseconds since the recorder was made.
    pub fn describe_window(&self, window: &Window) -> String {
        format!(
            "client {} ({}) on resource {}: {}",
            window.client,
            window.how,
            window.resource,
            self.span(window)
        )
    }

    fn span(&self, window: &Window) -> String {
        let ms = |t: Instant| t.saturating_duration_since(self.origin).as_secs_f64() * 1e3;
        format!(
            "[{:.1} ms, {:.1} ms) (valid until {:.1} ms, ended {:.1} ms)",
            ms(window.acquired_at),
            ms(window.end()),
            ms(window.valid_until),
            ms(window.ended_at),
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Window>> {
        self.windows.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Display for Overlap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "resource {}: clients {} ({}) and {} ({}) both held it for {:?}",
            self.first.resource,
            self.first.client,
            self.first.how,
            self.second.client,
            self.second.how,
            self.length
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(client: usize, resource: usize, start: u64, end: u64, base: Instant) -> Window {
        Window {
            client,
            resource,
            how: "test",
            acquired_at: base + Duration::from_millis(start),
            valid_until: base + Duration::from_millis(end),
            ended_at: base + Duration::from_millis(end + 100),
        }
    }

    #[test]
    fn touching_windows_do_not_overlap_and_nested_ones_do() {
        let recorder = Recorder::new();
        let base = Instant::now();
        recorder.record(window(0, 0, 0, 100, base));
        recorder.record(window(1, 0, 100, 200, base));
        recorder.record(window(2, 1, 50, 150, base));
        assert!(recorder.overlaps().is_empty());
        // Inside client 0's long window, after a short one ended: still caught.
        recorder.record(window(3, 0, 1000, 5000, base));
        recorder.record(window(4, 0, 1100, 1200, base));
        recorder.record(window(5, 0, 3000, 3100, base));
        let overlaps = recorder.overlaps();
        assert_eq!(overlaps.len(), 2, "{overlaps:?}");
        assert!(overlaps.iter().all(|o| o.first.client == 3));
        assert_eq!(overlaps[0].length, Duration::from_millis(100));
    }
}
