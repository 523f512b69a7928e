//! A cluster node's release-notice subscriber thread: one RESP3 connection per master, each
//! channel `SSUBSCRIBE`d on the master of its slot (see [`crate::shard_notices`]), the
//! connections read in turn. A master that drops a wanted channel or its connection ends every
//! connection; the map is learnt again after [`RESUBSCRIBE_PAUSE`] and everything is
//! subscribed anew, for as long as the driver lives.

use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};

use redis::Value;
use redlock_core::Change;

use super::conn::slot_map;
use super::driver::{Input, Mailbox};
use super::notices::POLL;
use crate::cluster::SlotMap;
use crate::shard_notices::{
    Heard, Masters, Order, RESUBSCRIBE_PAUSE, ShardPlan, is_loss, map_sources,
};
use crate::{FromSubscriber, NodeAddr};

/// Follows `changes` on the cluster that node `addr` leads to, starting from `map` and
/// `channels`; passes notices to the driver (never a confirmation: a release on a cluster
/// node announces to every listener). Returns when the driver is gone.
pub(super) fn follow_shards(
    addr: &NodeAddr,
    io_timeout: Duration,
    mut map: SlotMap,
    channels: Vec<Vec<u8>>,
    changes: &Receiver<(Change, u64)>,
    driver: &Mailbox,
) {
    let mut plan = ShardPlan::new(channels);
    loop {
        let mut masters = Masters::new(addr, &map, io_timeout);
        let mut healthy = true;
        for order in plan.subscriptions() {
            healthy = healthy && send(&mut masters, order);
        }
        while healthy {
            // Nothing to read: sleep until there is a change.
            if masters.open.is_empty() {
                let Ok((change, _)) = changes.recv() else {
                    return;
                };
                if let Some(order) = plan.apply(&change, true) {
                    healthy = send(&mut masters, order);
                }
            }
            loop {
                match changes.try_recv() {
                    Ok((change, _)) => {
                        if let Some(order) = plan.apply(&change, true) {
                            healthy = healthy && send(&mut masters, order);
                        }
                    }
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => return,
                }
            }
            for conn in masters.open.values_mut() {
                let heard = match conn.recv_response() {
                    Ok(Value::Push { kind, data }) => plan.heard(&kind, &data),
                    // A reply: a subscription refused, or redirected (the map changed).
                    Ok(Value::ServerError(err)) if is_loss(&err.clone().into()) => Heard::Lost,
                    Ok(_) => Heard::Nothing,
                    Err(err) if err.is_timeout() => Heard::Nothing,
                    Err(_) => Heard::Lost,
                };
                let Some(whole) = heard
                    .pass(|channel| driver.push(Input::Heard(FromSubscriber::Notice(channel))))
                else {
                    return;
                };
                healthy = healthy && whole;
            }
        }
        drop(masters);
        tracing::debug!(node = %addr.label(), "release notices: a master changed; subscribing again");
        // Learn the map again after a pause (the changes meanwhile still count).
        loop {
            let wake = Instant::now() + RESUBSCRIBE_PAUSE;
            loop {
                match changes.recv_timeout(wake.saturating_duration_since(Instant::now())) {
                    Ok((change, _)) => {
                        plan.apply(&change, false);
                    }
                    Err(RecvTimeoutError::Timeout) => break,
                    Err(RecvTimeoutError::Disconnected) => return,
                }
            }
            if let Some(fresh) = learn(addr, &map, io_timeout) {
                map = fresh;
                break;
            }
        }
    }
}

/// Writes `order` to its slot's master, connecting to it first if need be (its confirmation,
/// a push, is read with the notices); `false` when that master cannot be reached (a slot no
/// master serves waits for the next map).
fn send(masters: &mut Masters<'_, redis::Connection>, (slot, cmd): Order) -> bool {
    let Some(master) = masters.map.master_of(slot) else {
        return true;
    };
    if !masters.open.contains_key(&master) {
        // Read in short turns ([`POLL`]).
        let io_timeout = masters.io_timeout;
        let connected = masters.client_of(master).and_then(|client| {
            let conn = client.get_connection_with_timeout(io_timeout).ok()?;
            conn.set_write_timeout(Some(io_timeout)).ok()?;
            conn.set_read_timeout(Some(POLL)).ok()?;
            Some(conn)
        });
        let Some(conn) = connected else { return false };
        masters.open.insert(master, conn);
    }
    let Some(conn) = masters.open.get_mut(&master) else {
        return false;
    };
    conn.send_packed_command(&cmd.get_packed_command()).is_ok()
}

/// The map, as the first of the node's URL, its seeds and `known`'s nodes answers it.
fn learn(addr: &NodeAddr, known: &SlotMap, io_timeout: Duration) -> Option<SlotMap> {
    map_sources(addr, known).into_iter().find_map(|source| {
        let mut conn = source
            .client()
            .get_connection_with_timeout(io_timeout)
            .ok()?;
        conn.set_read_timeout(Some(io_timeout)).ok()?;
        conn.set_write_timeout(Some(io_timeout)).ok()?;
        slot_map(&mut conn, &source).ok()
    })
}
