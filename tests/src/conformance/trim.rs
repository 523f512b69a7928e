//! A tracking-table trim set off by the rival's own call (issue 21, scenario 4, "a case of its
//! own"). A node whose tracking table holds more keys than `tracking-table-max-keys` drops
//! keys from it at random, right before it runs the next command, and pushes their
//! invalidation to every connection that tracked them: for the connection whose command set it
//! off, before that command's reply (with `OPTIN` and without `NOLOOP`). A trim of the epoch
//! changes no data but ends every proof of it: B's vouched acquisition does not count, and B
//! proves again. With `NOLOOP` (the control) B never hears the trim its own call set off.
//!
//! A trim loses no data, but the node stops tracking the epoch for the connections it pushed
//! to: one that missed the push keeps vouching, and a later eviction of the epoch is never
//! pushed to it.
//! The trim picks keys at random, so a witness connection that also tracks the epoch tells,
//! per node, whether the epoch was among them.

use redis::{PushKind, Value};
use redlock_core::{Vote, WatchFault};
use redlock_local::RedisServer;

use super::adapter::{Adapter, HeldLock};
use super::memory::{
    Rival, client, evict, expect_refused_by, expect_second_holder, wait_for_every_node,
};
use crate::Servers;

const TTL: std::time::Duration = std::time::Duration::from_secs(30);

/// The three nodes whose tables are trimmed.
const LOSERS: [usize; 3] = [0, 1, 2];

/// Keys another application's tracking connection reads: far over the table's limit of one,
/// and few enough that a single trim (up to 100 keys) leaves one key of them all.
const OTHER_KEYS: usize = 60;

/// Clusters to try before giving up on a case where B's own call trimmed every loser's table.
const ATTEMPTS: usize = 6;

/// How long a witness listens for the trim's push.
const TRIM_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// A RESP3 connection to `server`.
fn resp3(server: &RedisServer) -> redis::Connection {
    let client = redis::Client::open(format!("{}?protocol=resp3", server.url())).expect("url");
    client.get_connection().expect("connect")
}

/// A connection that tracks the epoch (`OPTIN`, as the lock's own connections do), and then
/// only listens: it sends nothing that could set a trim off.
fn witness(server: &RedisServer) -> redis::Connection {
    let mut conn = resp3(server);
    let _: () = redis::pipe()
        .cmd("CLIENT")
        .arg("TRACKING")
        .arg("ON")
        .arg("OPTIN")
        .ignore()
        .cmd("CLIENT")
        .arg("CACHING")
        .arg("YES")
        .ignore()
        .cmd("GET")
        .arg(redlock_core::EPOCH_KEY)
        .ignore()
        .query(&mut conn)
        .expect("the witness tracks the epoch");
    conn
}

/// Whether the witness hears the epoch invalidated within a generous wait, reading only (a
/// command of its own would set the trim off itself if B's had not come yet).
fn epoch_trimmed(conn: &mut redis::Connection) -> bool {
    conn.set_read_timeout(Some(TRIM_WAIT)).expect("timeout");
    loop {
        match conn.recv_response() {
            Ok(Value::Push {
                kind: PushKind::Invalidate,
                data,
            }) => {
                let epoch = |key: &Value| matches!(key, Value::BulkString(k) if k.as_slice() == redlock_core::EPOCH_KEY);
                if let Some(Value::Array(keys)) = data.first()
                    && keys.iter().any(epoch)
                {
                    return true;
                }
            }
            Ok(_) => {}
            Err(_) => return false,
        }
    }
}

/// A holds `res`; on the losers the tracking table may hold one key (the epoch, which A's and
/// B's proven connections and a witness track), and another application's tracking connection
/// reads [`OTHER_KEYS`] keys in one command. Nothing else reaches those nodes before B's try,
/// whose first command sets off the trim: `first` is that try. Then the losers evict `res` and
/// the epoch (`allkeys-random`: an invalidation that goes through the tracking table, unlike a
/// `FLUSHALL`, which every tracking connection hears) and B tries again (`then`). A trim picks
/// at random, so the whole case runs again (new servers) until every loser dropped the epoch —
/// each keeps it with a chance of 1 in `OTHER_KEYS + 1`. B's call is the first command each
/// loser runs after the `MGET`, even one B's try did not wait for: the witnesses only listen.
/// The server's cron (at `hz 1` here) may still trim first, and B hears that trim as anyone's;
/// so a control that must show B missing its own trims (`hunt`) runs again until B's second try
/// got the lock — a control that never does gives up after [`ATTEMPTS`] clusters and fails.
fn self_trim<A: Adapter>(rival: Rival, hunt: bool) -> TrimOutcome<A> {
    for _ in 0..ATTEMPTS {
        let nodes = Servers::start(5);
        let holder: A = client(&nodes, Rival::Tracked);
        let rival: A = client(&nodes, rival);
        rival.lock("warm-up", TTL).expect("warm-up").release();
        let held = holder.lock("res", TTL).expect("A locks res");
        wait_for_every_node::<A>(&nodes, &held);
        let mut witnesses = Vec::new();
        let mut others = Vec::new();
        for node in LOSERS {
            let server = &nodes.servers()[node];
            // The server's cron trims too (and B hears that as anyone's): once a second here.
            let _: () = redis::cmd("CONFIG")
                .arg("SET")
                .arg("hz")
                .arg(1)
                .query(&mut server.client())
                .expect("CONFIG SET hz");
            witnesses.push(witness(server));
            let mut other = resp3(server);
            let keys: Vec<String> = (0..OTHER_KEYS).map(|i| format!("other:{i}")).collect();
            let _: () = redis::cmd("CLIENT")
                .arg("TRACKING")
                .arg("ON")
                .query(&mut other)
                .expect("tracking");
            let _: Vec<Option<Vec<u8>>> = redis::cmd("MGET")
                .arg(&keys)
                .query(&mut other)
                .expect("MGET");
            others.push(other);
        }
        // The limit comes last, right before B's call: no cron trim can come first unless it
        // falls in these few milliseconds (on a loaded machine the set-up above takes seconds).
        for node in LOSERS {
            let _: () = redis::cmd("CONFIG")
                .arg("SET")
                .arg("tracking-table-max-keys")
                .arg(1)
                .query(&mut nodes.servers()[node].client())
                .expect("CONFIG SET tracking-table-max-keys");
        }
        let first = rival.try_lock("res", TTL);
        let trimmed = witnesses.iter_mut().all(epoch_trimmed);
        if !trimmed {
            drop(first);
            held.release();
            continue;
        }
        for node in LOSERS {
            evict(
                &nodes.servers()[node],
                &[redlock_core::EPOCH_KEY, b"res"],
                "allkeys-random",
            );
        }
        let then = rival.try_lock("res", TTL);
        assert!(held.is_valid(), "A is still inside its validity");
        if hunt && then.is_err() {
            // A cron trim came first somewhere (heard): not the case this control is about.
            held.release();
            continue;
        }
        return TrimOutcome { held, first, then };
    }
    panic!(
        "in {ATTEMPTS} clusters, some loser always kept the epoch in its tracking table{}",
        if hunt { ", or B heard every trim" } else { "" }
    );
}

/// What [`self_trim`] saw: A's lock, B's try right after the trim, and B's try after the
/// eviction.
struct TrimOutcome<A: Adapter> {
    held: A::Lock,
    first: Result<A::Lock, redlock_redis::Error>,
    then: Result<A::Lock, redlock_redis::Error>,
}

/// B heard the trim its own call set off: each loser refused that call's vote (or had not
/// answered when the round was decided), B proved again, and after the eviction the losers
/// refuse it.
pub fn a_tracking_table_trim_set_off_by_the_rivals_own_call_refuses_it<A: Adapter>() {
    let TrimOutcome { held, first, then } = self_trim::<A>(Rival::Tracked, false);
    let err = first
        .err()
        .unwrap_or_else(|| panic!("{}: res is held on every node", A::NAME));
    let failure = err.failure().unwrap_or_else(|| panic!("{err}"));
    for node in LOSERS {
        let vote = &failure.nodes[node].result;
        assert!(
            matches!(vote, Vote::Ineligible { .. } | Vote::Pending),
            "{}: node {node} dropped the epoch from its table on B's own call, and B counted \
             its vote {vote:?}: {err}",
            A::NAME
        );
    }
    let causes = super::memory::EVICTION_CAUSES;
    expect_refused_by::<A>((held, then), "a trim, then an eviction", &LOSERS, causes);
}

/// Negative control: with `NOLOOP` tracking, B never hears the trim its own call set off; the
/// node no longer tracks the epoch for B, so the eviction that follows is never pushed either,
/// and B gets the lock A still holds.
pub fn a_tracking_table_trim_set_off_by_the_rivals_own_call_is_unheard_with_noloop<A: Adapter>() {
    let TrimOutcome { held, first, then } = self_trim::<A>(Rival::Faulty(WatchFault::NoLoop), true);
    drop(first);
    expect_second_holder::<A>(
        (held, then),
        "with NOLOOP tracking, a trim set off by B's own call, then an eviction",
    );
}
