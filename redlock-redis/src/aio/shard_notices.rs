//! A cluster node's release-notice subscriber: one RESP3 connection per master, each channel
//! `SSUBSCRIBE`d on the master of its slot (see [`crate::shard_notices`]). A master that drops
//! a wanted channel or its connection ends every connection; the map is learnt again after
//! [`RESUBSCRIBE_PAUSE`] and everything is subscribed anew, for as long as the driver lives.

use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, PushInfo};
use redlock_core::Change;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use super::conn::slot_map;
use super::runtime::Runtime;
use crate::cluster::SlotMap;
use crate::shard_notices::{Masters, Order, RESUBSCRIBE_PAUSE, ShardPlan, is_loss, map_sources};
use crate::{FromSubscriber, NodeAddr};

/// Follows `changes` on the cluster that node `addr` leads to, starting from `map` and
/// `channels`; passes notices to `heard` (never a confirmation: a release on a cluster node
/// announces to every listener). Ends when the driver is gone.
pub(super) async fn follow_shards<R: Runtime>(
    addr: NodeAddr,
    io_timeout: Duration,
    mut map: SlotMap,
    channels: Vec<Vec<u8>>,
    mut changes: UnboundedReceiver<(Change, u64)>,
    heard: UnboundedSender<FromSubscriber>,
) {
    let mut plan = ShardPlan::new(channels);
    loop {
        let (pushes_tx, mut pushes) = unbounded_channel::<PushInfo>();
        let mut masters = Masters::new(&addr, &map, io_timeout);
        let mut healthy = true;
        for order in plan.subscriptions() {
            healthy = healthy && send(&mut masters, &pushes_tx, order).await;
        }
        while healthy {
            tokio::select! {
                change = changes.recv() => {
                    let Some((change, _)) = change else { return };
                    if let Some(order) = plan.apply(&change, true) {
                        healthy = send(&mut masters, &pushes_tx, order).await;
                    }
                }
                Some(push) = pushes.recv() => {
                    let said = plan.heard(&push.kind, &push.data);
                    let Some(whole) = said.pass(|channel| heard.send(FromSubscriber::Notice(channel)).is_ok()) else {
                        return;
                    };
                    healthy = whole;
                }
            }
        }
        drop(masters);
        tracing::debug!(node = %addr.label(), "release notices: a master changed; subscribing again");
        // Learn the map again after a pause (the changes meanwhile still count).
        loop {
            let wake = Instant::now() + RESUBSCRIBE_PAUSE;
            loop {
                tokio::select! {
                    change = changes.recv() => {
                        let Some((change, _)) = change else { return };
                        plan.apply(&change, false);
                    }
                    () = R::sleep_until(wake) => break,
                }
            }
            if let Some(fresh) = learn(&addr, &map, io_timeout).await {
                map = fresh;
                break;
            }
        }
    }
}

/// Sends `order` to its slot's master, connecting to it (its pushes to `pushes`) first if
/// need be; `false` when that master cannot be reached (a slot no master serves waits for the
/// next map). A server's refusal (a user denied the channel) is not a loss: subscribing again
/// would be refused again.
async fn send(
    masters: &mut Masters<'_, MultiplexedConnection>,
    pushes: &UnboundedSender<PushInfo>,
    (slot, cmd): Order,
) -> bool {
    let Some(master) = masters.map.master_of(slot) else {
        return true;
    };
    if !masters.open.contains_key(&master) {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(masters.io_timeout))
            .set_response_timeout(Some(masters.io_timeout))
            .set_push_sender(pushes.clone());
        let Some(client) = masters.client_of(master) else {
            return false;
        };
        match client
            .get_multiplexed_async_connection_with_config(&config)
            .await
        {
            Ok(conn) => masters.open.insert(master, conn),
            Err(_) => return false,
        };
    }
    let Some(conn) = masters.open.get_mut(&master) else {
        return false;
    };
    match cmd.query_async::<redis::Value>(conn).await {
        Ok(_) => true,
        Err(err) if is_loss(&err) => false,
        Err(err) => {
            tracing::debug!(%err, "release notices: a subscription refused");
            true
        }
    }
}

/// The map, as the first of the node's URL, its seeds and `known`'s nodes answers it.
async fn learn(addr: &NodeAddr, known: &SlotMap, io_timeout: Duration) -> Option<SlotMap> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(io_timeout))
        .set_response_timeout(Some(io_timeout));
    for source in map_sources(addr, known) {
        let client = source.client();
        let Ok(mut conn) = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
        else {
            continue;
        };
        if let Ok(map) = slot_map(&mut conn, &source).await {
            return Some(map);
        }
    }
    None
}
