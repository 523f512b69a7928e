//! Numbers from samples: percentiles of one run, and the median with min–max over the
//! repetitions of a scenario.
//!
//! Pure arithmetic: it never reads a clock, never prints, and never panics on an empty input
//! (there is simply no number).

use std::time::Duration;

use serde::Serialize;

/// Percentiles kept of every latency run, for the chart and the JSON.
pub(crate) const CURVE: [f64; 11] = [
    0.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 100.0,
];

/// The `p`-th percentile (0–100, nearest rank) of `sorted`, which must be sorted ascending.
pub(crate) fn percentile(sorted: &[Duration], p: f64) -> Option<Duration> {
    let last = sorted.len().checked_sub(1)?;
    let rank = (p.clamp(0.0, 100.0) / 100.0 * sorted.len() as f64).ceil();
    // `rank` is in 0..=len, so it fits; `as` saturates anyway.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let index = (rank as usize).saturating_sub(1).min(last);
    sorted.get(index).copied()
}

/// A duration in microseconds.
pub(crate) fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

/// `count` per second of `elapsed` (0 for an empty interval).
pub(crate) fn per_second(count: u64, elapsed: Duration) -> f64 {
    let seconds = elapsed.as_secs_f64();
    if seconds > 0.0 {
        count as f64 / seconds
    } else {
        0.0
    }
}

/// One metric over the repetitions of a scenario.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Spread {
    /// The median repetition's value (mean of the middle two for an even count).
    pub(crate) median: f64,
    /// The smallest value.
    pub(crate) min: f64,
    /// The largest value.
    pub(crate) max: f64,
    /// How many repetitions had a value.
    pub(crate) count: usize,
}

impl Spread {
    /// The spread of `values`, ignoring NaN; `None` if nothing is left.
    pub(crate) fn of(values: impl IntoIterator<Item = f64>) -> Option<Self> {
        let mut values: Vec<f64> = values.into_iter().filter(|v| !v.is_nan()).collect();
        values.sort_by(f64::total_cmp);
        let (first, last) = (*values.first()?, *values.last()?);
        let mid = values.len() / 2;
        let median = if values.len() % 2 == 1 {
            values[mid]
        } else {
            (values[mid - 1] + values[mid]) / 2.0
        };
        Some(Self {
            median,
            min: first,
            max: last,
            count: values.len(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(values: &[u64]) -> Vec<Duration> {
        values.iter().map(|v| Duration::from_millis(*v)).collect()
    }

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let sorted = ms(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
        assert_eq!(percentile(&sorted, 0.0), Some(Duration::from_millis(1)));
        assert_eq!(percentile(&sorted, 50.0), Some(Duration::from_millis(5)));
        assert_eq!(percentile(&sorted, 99.0), Some(Duration::from_millis(10)));
        assert_eq!(percentile(&sorted, 100.0), Some(Duration::from_millis(10)));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn spreads_take_the_median_and_the_range() {
        let spread = Spread::of([3.0, 1.0, 2.0]).expect("values");
        assert_eq!((spread.median, spread.min, spread.max), (2.0, 1.0, 3.0));
        let even = Spread::of([4.0, 1.0, 2.0, f64::NAN, 3.0]).expect("values");
        assert_eq!((even.median, even.count), (2.5, 4));
        assert_eq!(Spread::of([f64::NAN]), None);
    }

    #[test]
    fn rates_survive_an_empty_interval() {
        assert_eq!(per_second(10, Duration::ZERO), 0.0);
        assert_eq!(per_second(10, Duration::from_millis(500)), 20.0);
    }
}
