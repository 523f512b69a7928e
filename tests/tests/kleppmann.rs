//! Kleppmann's case with real processes: a fenced lock holder (its own process) is stopped with
//! SIGSTOP past its validity; a second client takes the lock and writes through a fenced store;
//! the first is resumed and writes with its old fence: the store rejects it.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use redlock_blocking::{LockRequest, Redlock};
use redlock_tests::{FencedStore, RedisServer, Servers};

#[test]
fn a_holder_stopped_past_its_validity_has_its_write_fenced_off() {
    let nodes = Servers::start(5);
    let store_server = RedisServer::start();
    let store = FencedStore::new(&store_server.url(), "kleppmann:data");
    let mut child = Command::new(env!("CARGO_BIN_EXE_fenced_holder"))
        .arg(store_server.url())
        .args(nodes.urls())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the holder process");
    let pid = Pid::from_raw(i32::try_from(child.id()).expect("a pid"));
    let mut out = BufReader::new(child.stdout.take().expect("its stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("the holder's fence");
    let old_fence: u64 = line
        .trim()
        .strip_prefix("fence ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the holder said {line:?}"));

    // The holder stops (a GC pause, swap, SIGSTOP) for longer than its 500 ms validity.
    kill(pid, Signal::SIGSTOP).expect("stop the holder");
    let stopped = Instant::now();
    let redlock = Redlock::new(nodes.urls()).expect("client");
    let request = || LockRequest::new("kleppmann", Duration::from_secs(10)).fenced();
    let lock = loop {
        match redlock.acquire(request()) {
            Ok(lock) => break lock,
            Err(err) if stopped.elapsed() < Duration::from_secs(10) => {
                let _ = err;
                thread::sleep(Duration::from_millis(50));
            }
            Err(err) => panic!("the second client never got the lock: {err}"),
        }
    };
    let new_fence = lock.fence().expect("a fence");
    assert!(new_fence > old_fence, "{new_fence} after {old_fence}");
    assert!(store.write(new_fence, "from the new holder"));

    // The stopped holder wakes up and writes, unaware that its lock passed on.
    kill(pid, Signal::SIGCONT).expect("resume the holder");
    let mut stdin = child.stdin.take().expect("its stdin");
    writeln!(stdin, "write").expect("tell the holder to write");
    line.clear();
    out.read_line(&mut line).expect("the holder's answer");
    assert_eq!(
        line.trim(),
        "rejected",
        "the paused holder's write got through"
    );
    assert_eq!(store.value().as_deref(), Some("from the new holder"));
    assert!(child.wait().expect("the holder ends").success());
    lock.release();
}
