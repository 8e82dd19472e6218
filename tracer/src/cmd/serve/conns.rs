//! The exporter's connections, bounded: at most [`MAX_TOTAL`] at once and
//! [`MAX_PER_PEER`] from one address. A new connection is always let in: when a bound
//! is reached, the connection that has been idle longest (no request in progress: in
//! its TLS handshake, before its first request or between keep-alive requests) is
//! dropped to make room, so idle and half-open clients cannot keep a scraper out. Only
//! when every connection is in the middle of a request is the new one closed at once.
use std::{
    collections::HashMap,
    net::IpAddr,
    sync::{Arc, Mutex},
};

use tokio::sync::Notify;

/// Connections served at once.
pub const MAX_TOTAL: usize = 64;
/// Connections from one address at once.
pub const MAX_PER_PEER: usize = 16;

/// One connection as the table sees it.
struct Entry {
    peer: IpAddr,
    /// When it was accepted or last answered a request, in the table's own clock (a
    /// count of such events: a strict order, where instants can tie).
    idle_since: u64,
    busy: bool,
    close: Arc<Notify>,
}

/// The table of live connections, with the clock of [`Entry::idle_since`] (which also
/// numbers the connections).
#[derive(Default)]
pub struct Conns {
    table: Mutex<(u64, HashMap<u64, Entry>)>,
}

/// A connection's place in the table; leaves it when dropped.
pub struct Slot {
    conns: Arc<Conns>,
    id: u64,
    /// Notified when the connection is dropped to make room.
    pub close: Arc<Notify>,
}

impl Conns {
    /// Admits a connection from `peer`, dropping the longest-idle one (of that peer at
    /// its bound, else of all) when needed; None when every candidate is busy.
    pub fn admit(self: &Arc<Self>, peer: IpAddr) -> Option<Slot> {
        let mut g = self.table.lock().unwrap_or_else(|e| e.into_inner());
        let (next, table) = &mut *g;
        let from_peer = table.values().filter(|e| e.peer == peer).count();
        if from_peer >= MAX_PER_PEER && !evict(table, Some(peer)) {
            return None;
        }
        if table.len() >= MAX_TOTAL && !evict(table, None) {
            return None;
        }
        *next += 1;
        let close = Arc::new(Notify::new());
        table.insert(
            *next,
            Entry {
                peer,
                idle_since: *next,
                busy: false,
                close: close.clone(),
            },
        );
        Some(Slot {
            conns: self.clone(),
            id: *next,
            close,
        })
    }
}

/// Drops the longest-idle connection (of `peer`, or of anyone); false if none is idle.
fn evict(table: &mut HashMap<u64, Entry>, peer: Option<IpAddr>) -> bool {
    let victim = table
        .iter()
        .filter(|(_, e)| !e.busy && peer.is_none_or(|p| e.peer == p))
        .min_by_key(|(_, e)| e.idle_since)
        .map(|(&id, _)| id);
    match victim.and_then(|id| table.remove(&id)) {
        Some(e) => {
            // notify_one stores a permit: the task sees it even if not waiting yet.
            e.close.notify_one();
            true
        }
        None => false,
    }
}

impl Slot {
    /// A request is being answered: not to be dropped (true) or done (false).
    pub fn set_busy(&self, busy: bool) {
        let mut g = self.conns.table.lock().unwrap_or_else(|e| e.into_inner());
        let (clock, table) = &mut *g;
        *clock += 1;
        if let Some(e) = table.get_mut(&self.id) {
            e.busy = busy;
            e.idle_since = *clock;
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut g = self.conns.table.lock().unwrap_or_else(|e| e.into_inner());
        g.1.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn closing(s: &Slot) -> bool {
        // notify_one left a permit: `notified` completes at once.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            tokio::time::timeout(std::time::Duration::from_millis(10), s.close.notified())
                .await
                .is_ok()
        })
    }

    fn live(c: &Conns) -> usize {
        c.table.lock().unwrap().1.len()
    }

    #[test]
    fn the_longest_idle_goes_first_and_busy_ones_stay() {
        let c = Arc::new(Conns::default());
        let a: IpAddr = [10, 0, 0, 1].into();
        let b: IpAddr = [10, 0, 0, 2].into();
        let from_a: Vec<Slot> = (0..MAX_PER_PEER).map(|_| c.admit(a).unwrap()).collect();
        from_a[0].set_busy(true);
        // At a's bound: a's longest idle that is not busy (the second) makes room.
        let newest_a = c.admit(a).expect("room is made");
        assert_eq!(live(&c), MAX_PER_PEER);
        assert!(!closing(&from_a[0]), "busy: kept");
        assert!(closing(&from_a[1]), "the longest idle is told to close");
        assert!(!closing(&from_a[2]));
        // Other addresses are held only by the total.
        let from_b: Vec<Slot> = (0..MAX_TOTAL - MAX_PER_PEER)
            .map(|i| {
                c.admit([10, 0, 1, (i / MAX_PER_PEER) as u8].into())
                    .unwrap()
            })
            .collect();
        assert_eq!(live(&c), MAX_TOTAL);
        let _newest_b = c.admit(b).expect("room is made at the total too");
        assert_eq!(live(&c), MAX_TOTAL);
        assert!(closing(&from_a[2]), "the longest idle of all");
        // Every connection answering a request: the newcomer is refused.
        for s in from_a.iter().chain(&from_b).chain([&newest_a, &_newest_b]) {
            s.set_busy(true);
        }
        assert!(c.admit(b).is_none());
        drop(from_b);
        assert!(c.admit(b).is_some(), "closed connections leave the table");
    }
}
