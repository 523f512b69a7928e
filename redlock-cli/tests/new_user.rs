//! A new user, following only the README: an empty crate with the documented dependency lines,
//! the first example copied verbatim (its node addresses mapped to local servers), against
//! fresh servers. Without the first-deployment step the program fails at once (one round) with
//! an error whose `Display` and `Debug` both name the remedy; after `redlock nodes trust` it
//! locks. The only deviation: the git dependency becomes a path to this checkout (no network
//! to the repository here).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::{stderr, stdout};
use redlock_tests::Servers;

const README: &str = include_str!("../../README.md");

/// The text of the first fenced block of `kind` after `heading` in the README.
fn block(heading: &str, kind: &str) -> String {
    let section = &README[README.find(heading).expect("the section")..];
    let start = section.find(&format!("```{kind}\n")).expect("its block") + kind.len() + 4;
    let body = &section[start..];
    body[..body.find("```").expect("the block's end")].to_owned()
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

fn cargo(dir: &Path, args: &[&str]) -> Output {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    Command::new(cargo)
        .args(args)
        .current_dir(dir)
        // Its own target dir: the one `cargo test` builds in is locked meanwhile.
        .env(
            "CARGO_TARGET_DIR",
            workspace().join("target").join("new-user"),
        )
        .env_remove("REDLOCK_NODES")
        .stdin(Stdio::null())
        .output()
        .expect("run cargo")
}

#[test]
fn a_new_user_gets_from_cargo_new_to_a_first_lock_following_the_readme() {
    let nodes = Servers::start(3);
    // Fresh servers: no epoch (the harness trusts the servers it starts).
    for server in nodes.servers() {
        let _: () = redis::cmd("DEL")
            .arg(redlock_core::EPOCH_KEY)
            .arg(redlock_core::EPOCH_ID_KEY)
            .query(&mut server.client())
            .expect("DEL");
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let output = cargo(dir.path(), &["new", "--quiet", "app"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let app = dir.path().join("app");

    // The documented dependency lines, the git dependency pointed at this checkout.
    let lines = block("## Use", "toml");
    let git = "{ git = \"https://github.com/redlock-rs/redlock-rs\" }";
    let path = format!("{{ path = {:?} }}", workspace().join("redlock-tokio"));
    let deps: Vec<String> = lines
        .lines()
        .filter(|line| !line.starts_with('#') && !line.starts_with('[') && !line.is_empty())
        .map(|line| {
            line.split("   #")
                .next()
                .unwrap_or(line)
                .trim_end()
                .replace(git, &path)
        })
        .collect();
    assert_eq!(deps.len(), 2, "redlock-tokio and tokio: {lines}");
    let manifest = std::fs::read_to_string(app.join("Cargo.toml")).expect("manifest");
    std::fs::write(
        app.join("Cargo.toml"),
        format!("{manifest}{}\n", deps.join("\n")),
    )
    .expect("manifest");
    // The same versions as this workspace.
    std::fs::copy(workspace().join("Cargo.lock"), app.join("Cargo.lock")).expect("lock file");

    // The first example, verbatim but for the node addresses.
    let mut example = block("## Use", "rust,no_run");
    for (index, addr) in nodes.addrs().iter().enumerate() {
        example = example.replace(&format!("10.0.0.{}:6379", index + 1), &addr.to_string());
    }
    assert!(!example.contains("10.0.0."), "{example}");
    std::fs::write(app.join("src").join("main.rs"), &example).expect("main.rs");

    // Fresh nodes: it fails at once (one round), and says what to do.
    let first = cargo(&app, &["run", "--quiet"]);
    let text = stderr(&first);
    assert!(!first.status.success(), "{text}");
    assert!(
        text.contains("Error: too few nodes could vote: 1 round;"),
        "Display first, one round: {text}"
    );
    assert!(text.contains("`redlock nodes trust`"), "{text}");
    assert!(text.contains("attempts: 1"), "Debug after it: {text}");
    assert_eq!(nodes.count_with_key("invoice:42"), 0);

    // The first-deployment step, as the README shows it.
    let trust = Command::new(env!("CARGO_BIN_EXE_redlock"))
        .env("REDLOCK_NODES", nodes.urls().join(","))
        .args(["nodes", "trust"])
        .output()
        .expect("run redlock");
    assert!(trust.status.success(), "{}", stderr(&trust));
    assert_eq!(
        stdout(&trust).matches(": trusted").count(),
        3,
        "{}",
        stdout(&trust)
    );

    let second = cargo(&app, &["run", "--quiet"]);
    assert!(second.status.success(), "{}", stderr(&second));
    for key in ["invoice:42", "nightly-report"] {
        assert_eq!(nodes.count_with_key(key), 0, "{key} released");
    }
}
