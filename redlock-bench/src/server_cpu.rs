//! The servers' CPU time, read from `INFO cpu` on every node (`used_cpu_sys` plus
//! `used_cpu_user`, seconds): the difference over a run, divided by the cycles the run made,
//! is what one lock+release cycle costs the servers, whatever the client's own speed.
//!
//! It never changes a node; a node it cannot read makes the reading `None` (no column, never a
//! guess).

/// The nodes' CPU seconds so far, summed; `None` if any node could not be read.
pub(crate) fn total_seconds(urls: &[String]) -> Option<f64> {
    urls.iter().map(|url| node_seconds(url)).sum()
}

fn node_seconds(url: &str) -> Option<f64> {
    parse(&info(url, "cpu")?)
}

/// `INFO section` of the node at `url`; `None` if it cannot be read.
fn info(url: &str, section: &str) -> Option<String> {
    let client = redis::Client::open(url).ok()?;
    let mut conn = client
        .get_connection_with_timeout(std::time::Duration::from_secs(5))
        .ok()?;
    redis::cmd("INFO").arg(section).query(&mut conn).ok()
}

/// The scripts the nodes ran so far (`EVALSHA` and `EVAL` calls in `INFO commandstats`),
/// summed; `None` if any node could not be read. Over a run of a cluster node, the checked
/// acquisitions and the releases by script: a vouched acquisition is a plain `SET`.
pub(crate) fn total_scripts(urls: &[String]) -> Option<u64> {
    urls.iter().map(|url| node_scripts(url)).sum()
}

fn node_scripts(url: &str) -> Option<u64> {
    Some(script_calls(&info(url, "commandstats")?))
}

/// `EVALSHA` plus `EVAL` calls of an `INFO commandstats` answer (0 for a command never called).
fn script_calls(stats: &str) -> u64 {
    ["cmdstat_evalsha:calls=", "cmdstat_eval:calls="]
        .iter()
        .filter_map(|prefix| {
            stats
                .lines()
                .find_map(|line| line.strip_prefix(prefix))
                .and_then(|rest| rest.split(',').next())
                .and_then(|calls| calls.parse::<u64>().ok())
        })
        .sum()
}

/// `used_cpu_sys + used_cpu_user` of an `INFO cpu` answer.
fn parse(info: &str) -> Option<f64> {
    let field = |name: &str| -> Option<f64> {
        info.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|value| value.trim().parse().ok())
    };
    Some(field("used_cpu_sys")? + field("used_cpu_user")?)
}

/// A run that can say what it cost the servers.
pub(crate) trait ServerCost {
    /// Records that the servers spent `seconds` of CPU on the run, `warmup` unmeasured cycles
    /// included.
    fn record_server_cpu(&mut self, seconds: f64, warmup: u32);
}

/// Microseconds of server CPU per cycle, over `cycles` measured and `warmup` unmeasured ones.
pub(crate) fn per_cycle_us(seconds: f64, cycles: u64, warmup: u32) -> Option<f64> {
    let all = cycles + u64::from(warmup);
    (all > 0 && seconds >= 0.0).then(|| seconds * 1e6 / all as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_cpu_fields() {
        let info = "# CPU\r\nused_cpu_sys:1.250000\r\nused_cpu_user:0.750000\r\n\
                    used_cpu_sys_children:9.0\r\n";
        assert_eq!(parse(info), Some(2.0));
        assert_eq!(parse("# CPU\r\nused_cpu_sys:1.0\r\n"), None);
        assert_eq!(per_cycle_us(0.5, 400_000, 100_000), Some(1.0));
        assert_eq!(per_cycle_us(0.5, 0, 0), None);
        let stats = "# Commandstats\r\ncmdstat_set:calls=9,usec=1\r\n\
                     cmdstat_evalsha:calls=40,usec=300,usec_per_call=7.5\r\n\
                     cmdstat_eval:calls=2,usec=30\r\n";
        assert_eq!(script_calls(stats), 42);
        assert_eq!(script_calls("# Commandstats\r\ncmdstat_set:calls=9\r\n"), 0);
    }
}
