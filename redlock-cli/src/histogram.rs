//! Latency samples: percentiles, and a histogram drawn with text bars for the terminal.

use std::fmt::Write as _;
use std::time::Duration;

/// Bar width of the widest bucket, in characters.
const BAR: usize = 40;

/// Recorded latencies, in µs.
#[derive(Debug, Default, Clone)]
pub(crate) struct Histogram {
    micros: Vec<u64>,
}

impl Histogram {
    pub(crate) fn record(&mut self, latency: Duration) {
        self.micros
            .push(u64::try_from(latency.as_micros()).unwrap_or(u64::MAX));
    }

    pub(crate) fn len(&self) -> usize {
        self.micros.len()
    }

    /// The `q`-quantile (0.5 = median) in µs; 0 when empty.
    pub(crate) fn quantile(&self, q: f64) -> u64 {
        let mut sorted = self.micros.clone();
        sorted.sort_unstable();
        let Some(last) = sorted.len().checked_sub(1) else {
            return 0;
        };
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "q is in 0..=1, so the index is in 0..=last"
        )]
        let index = ((last as f64) * q.clamp(0.0, 1.0)).round() as usize;
        sorted[index.min(last)]
    }

    /// Buckets doubling in width from the smallest sample, one line each:
    /// `  128µs–256µs  ████████ 412`.
    pub(crate) fn render(&self, unicode: bool) -> String {
        let (Some(&min), Some(&max)) = (self.micros.iter().min(), self.micros.iter().max()) else {
            return "  (no samples)\n".to_owned();
        };
        let mut lower = min.max(1).next_power_of_two() / 2;
        lower = lower.max(1);
        let mut buckets = Vec::new();
        while lower <= max {
            let upper = lower.saturating_mul(2);
            let count = self
                .micros
                .iter()
                .filter(|&&m| m >= lower && m < upper)
                .count();
            buckets.push((lower, upper, count));
            lower = upper;
        }
        let widest = buckets.iter().map(|b| b.2).max().unwrap_or(1).max(1);
        let mut text = String::new();
        for (lower, upper, count) in buckets {
            let width = count * BAR / widest;
            let bar = if unicode { "█" } else { "#" }.repeat(width.max(usize::from(count > 0)));
            let range = format!("{}–{}", micros(lower), micros(upper));
            let _ = writeln!(text, "  {range:>15}  {bar:<BAR$} {count}");
        }
        text
    }
}

/// µs as people read them ([`crate::output::human`]).
pub(crate) fn micros(us: u64) -> String {
    crate::output::human(Duration::from_micros(us))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_and_buckets() {
        let mut histogram = Histogram::default();
        assert_eq!(histogram.quantile(0.5), 0);
        for us in [100, 200, 300, 400, 5_000] {
            histogram.record(Duration::from_micros(us));
        }
        assert_eq!(histogram.quantile(0.5), 300);
        assert_eq!(histogram.quantile(1.0), 5_000);
        let text = histogram.render(false);
        let counted: usize = text
            .lines()
            .filter_map(|line| line.split_whitespace().last()?.parse::<usize>().ok())
            .sum();
        assert_eq!(counted, 5, "{text}");
        assert!(text.contains("4.1ms–8.2ms"), "{text}");
    }
}
