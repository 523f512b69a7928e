//! The report as Markdown tables: readable on a terminal, and pasted as-is into BENCHMARKS.md.
//!
//! It only formats what the [`Report`] holds; it never computes a statistic of its own.

use std::fmt::Write;

use crate::report::{Better, Measured, Report, Section, Shown};
use crate::scenarios::memory::MemoryRun;
use crate::stats::Spread;

/// Every table of `report`, with a heading each.
pub(crate) fn render(report: &Report) -> String {
    let meta = &report.meta;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Each cell: median (min–max) over {} run(s). ×raw = median ÷ the median of the raw \
         floor on tokio multi-thread; ×own floor = median ÷ the median of the raw floor on the \
         same runtime or threads, from the same run (raw floor (async-std) for redlock-async-std, \
         raw floor (threads) for redlock-blocking; for the tokio rows ×raw is that ratio). \
         Nodes: {}.\n",
        meta.reps, meta.node_config
    );
    out += &section("(a) Sequential latency", &report.latency);
    out += &section("(b) Throughput, own keys", &report.throughput);
    out += &section("(c) Contention on one key", &report.contention);
    out += &memory(&report.memory);
    if let Some(section) = &report.cluster {
        out += &cluster(section);
    }
    let _ = writeln!(
        out,
        "\nMutual exclusion: {} violation(s) over every contention run (must be 0).",
        report.violations
    );
    out
}

/// One scenario's table.
fn section<R: Measured>(title: &str, section: &Section<R>) -> String {
    let mut out = format!("### {title}\n\n{}\n\n", section.what);
    let mut header = String::from("| contender |");
    let mut rule = String::from("|---|");
    for metric in R::METRICS {
        let arrow = match metric.better {
            Better::Lower => "↓",
            Better::Higher => "↑",
        };
        let _ = write!(header, " {} {arrow} |", metric.header);
        rule += "---:|";
        if metric.shown == Shown::Spread {
            header += " ×raw | ×own floor |";
            rule += "---:|---:|";
        }
    }
    let _ = writeln!(out, "{header}\n{rule}");
    for entry in &section.results {
        let mut row = format!("| {} |", entry.label);
        for metric in R::METRICS {
            let stat = entry.summary.get(metric.key);
            match metric.shown {
                Shown::Spread => {
                    let cell = stat.map_or_else(|| "–".to_owned(), |s| spread(&s.spread));
                    let ratio =
                        |r: Option<f64>| r.map_or_else(|| "–".to_owned(), |r| format!("{r:.2}"));
                    let vs_raw = ratio(stat.and_then(|s| s.vs_raw));
                    let vs_own = ratio(stat.and_then(|s| s.vs_own_floor));
                    let _ = write!(row, " {cell} | {vs_raw} | {vs_own} |");
                }
                Shown::Total => {
                    let total = stat.map_or(0.0, |s| s.total);
                    let _ = write!(row, " {total:.0} |");
                }
            }
        }
        let _ = writeln!(out, "{row}");
    }
    out + "\n"
}

/// The memory scenario's table.
fn memory(run: &MemoryRun) -> String {
    let kib =
        |value: Option<u64>| value.map_or_else(|| "unknown".to_owned(), |v| format!("{v} KiB"));
    let mut out = format!(
        "### (d) Memory, redlock-tokio multi-thread\n\n{} tasks on their own keys, {} cycles in \
         {:.1} s ({:.0} cycles/s), {} failed, in a process of its own.\n\n",
        run.tasks, run.total_cycles, run.seconds, run.cycles_per_sec, run.failures
    );
    out += "| after | RSS | live heap growth since warm-up |\n|---|---:|---:|\n";
    let _ = writeln!(out, "| warm-up | {} | 0 B |", kib(run.rss_start_kib));
    let _ = writeln!(
        out,
        "| {} cycles | {} | {} B |",
        run.first_cycles,
        kib(run.rss_first_kib),
        run.heap_growth_first_bytes
    );
    let _ = writeln!(
        out,
        "| {} cycles | {} | {} B |",
        run.total_cycles,
        kib(run.rss_total_kib),
        run.heap_growth_total_bytes
    );
    let _ = writeln!(
        out,
        "\nHeap allocations per cycle (whole process): {:.1} ({:.0} bytes requested).",
        run.allocs_per_cycle, run.bytes_per_cycle
    );
    out
}

/// Scenario (e)'s table: per deployment, latency and throughput with the servers' CPU.
fn cluster(section: &crate::cluster::ClusterSection) -> String {
    let mut out = format!("\n### (e) A cluster node\n\n{}\n\n", section.what);
    out += "| deployment | cycle p50 µs ↓ | ×standalone | server µs/cycle ↓ | per master | \
            scripts/cycle | cycles/s ↑ | ×standalone | server µs/cycle ↓ | per master |\n";
    out += "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    let masters = crate::cluster::MASTERS as f64;
    let cells = |summary: &[(&'static str, Spread, Option<f64>)], first: &str| {
        let find = |key: &str| summary.iter().find(|(k, _, _)| *k == key);
        let first = find(first);
        let cpu = find("server_cpu_us_per_cycle");
        let dash = || "–".to_owned();
        [
            first.map_or_else(dash, |(_, s, _)| spread(s)),
            first
                .and_then(|(_, _, ratio)| *ratio)
                .map_or_else(dash, |r| format!("{r:.2}")),
            cpu.map_or_else(dash, |(_, s, _)| spread(s)),
            cpu.map_or_else(dash, |(_, s, _)| number(s.median / masters)),
        ]
        .join(" | ")
    };
    for (latency, throughput) in section.latency.iter().zip(&section.throughput) {
        let scripts = section
            .scripts_per_cycle
            .iter()
            .find(|(id, _)| *id == latency.deployment)
            .and_then(|(_, spread)| spread.as_ref())
            .map_or_else(|| "–".to_owned(), spread);
        let _ = writeln!(
            out,
            "| {} | {} | {scripts} | {} |",
            latency.label,
            cells(&latency.summary, "cycle_p50_us"),
            cells(&throughput.summary, "cycles_per_sec")
        );
    }
    out += "\nscripts/cycle: `EVALSHA` and `EVAL` calls on the masters per sequential \
            lock+release cycle. A checked acquisition is one script per vote, a vouched one a \
            plain `SET`; a release is one script per vote where the server has no \
            `DELIFEQ` (Redis 7), none where it has (Valkey 9).\n";
    out
}

/// `median (min–max)`, or just the value for a single run.
fn spread(spread: &Spread) -> String {
    if spread.count > 1 {
        format!(
            "{} ({}–{})",
            number(spread.median),
            number(spread.min),
            number(spread.max)
        )
    } else {
        number(spread.median)
    }
}

/// Three significant digits or so, never scientific notation.
fn number(value: f64) -> String {
    match value.abs() {
        v if v >= 100.0 => format!("{value:.0}"),
        v if v >= 10.0 => format!("{value:.1}"),
        _ => format!("{value:.2}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_keep_about_three_digits() {
        assert_eq!(number(1234.56), "1235");
        assert_eq!(number(45.67), "45.7");
        assert_eq!(number(0.123), "0.12");
    }

    #[test]
    fn a_single_run_has_no_range() {
        let one = Spread::of([5.0]).expect("a value");
        assert_eq!(spread(&one), "5.00");
        let three = Spread::of([5.0, 7.0, 6.0]).expect("values");
        assert_eq!(spread(&three), "6.00 (5.00–7.00)");
    }
}
