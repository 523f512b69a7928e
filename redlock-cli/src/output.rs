//! Where the command's own words go: reports on stdout (text or one JSON document, nothing with
//! `--quiet`), notes on stderr with `-v`. Never a password: nodes are printed as `host:port`.

use std::fmt::Display;
use std::io::Write;
use std::time::Duration;

use serde_json::Value;

use crate::cli::{Format, Global};

/// The output settings of one invocation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Out {
    format: Format,
    quiet: bool,
    verbose: bool,
}

impl Out {
    pub(crate) fn new(global: &Global) -> Self {
        Self {
            format: global.format(),
            quiet: global.quiet,
            verbose: global.verbose,
        }
    }

    /// Whether reports are JSON.
    pub(crate) fn json(self) -> bool {
        self.format == Format::Json
    }

    /// Prints a report, built only if it is printed: `text` for people, `json` for programs.
    /// A closed stdout (`| head`) is not an error worth dying for; nothing is printed then.
    pub(crate) fn report(self, text: impl FnOnce() -> String, json: impl FnOnce() -> Value) {
        if self.quiet {
            return;
        }
        let body = match self.format {
            Format::Text => text(),
            Format::Json => json().to_string(),
        };
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "{}", body.trim_end());
    }

    /// What a script needs on stdout whatever `--quiet` says (`acquire`'s token), as text or as
    /// JSON.
    pub(crate) fn data(self, text: &str, json: impl FnOnce() -> Value) {
        let body = match self.format {
            Format::Text => text.to_owned(),
            Format::Json => json().to_string(),
        };
        let _ = writeln!(std::io::stdout().lock(), "{body}");
    }

    /// A note on stderr with `-v`.
    pub(crate) fn note(self, message: impl Display) {
        if self.verbose {
            eprintln!("redlock: {message}");
        }
    }
}

/// A token as people see it: its first 8 characters (enough to tell holders apart, not enough
/// to release their lock).
pub(crate) fn short_token(token: &[u8]) -> String {
    let text = String::from_utf8_lossy(token);
    let short: String = text.chars().take(8).collect();
    if short.len() < text.len() {
        format!("{short}…")
    } else {
        short
    }
}

/// A duration in ms as people read it: `850ms`, `29.8s`, `12m05s`.
pub(crate) fn human_ms(ms: u64) -> String {
    human(Duration::from_millis(ms))
}

/// A duration as people read it, the one format of the command: `620µs`, `4.1ms`, `850ms`,
/// `29.8s`, `12m05s`.
pub(crate) fn human(duration: Duration) -> String {
    let us = duration.as_micros();
    match us {
        0..1_000 => format!("{us}µs"),
        1_000..10_000 => format!("{:.1}ms", us as f64 / 1000.0),
        10_000..1_000_000 => format!("{}ms", us / 1000),
        1_000_000..60_000_000 => format!("{:.1}s", duration.as_secs_f64()),
        _ => format!(
            "{}m{:02}s",
            duration.as_secs() / 60,
            duration.as_secs() % 60
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_shortened_and_durations_read_well() {
        assert_eq!(short_token(b"0123456789abcdef"), "01234567…");
        assert_eq!(short_token(b"abc"), "abc");
        assert_eq!(human_ms(850), "850ms");
        assert_eq!(human_ms(29_800), "29.8s");
        assert_eq!(human_ms(725_000), "12m05s");
        assert_eq!(human(Duration::from_micros(620)), "620µs");
        assert_eq!(human(Duration::from_micros(4_096)), "4.1ms");
    }
}
