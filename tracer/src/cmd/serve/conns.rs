//! The exporter's connections, bounded in two classes, and never by making a newcomer
//! wait behind idle clients:
//! - *pending*: accepted (or in its TLS handshake) and no complete request yet. At most
//!   [`MAX_PENDING`]; a newcomer beyond that closes the oldest pending one. A scraper
//!   sends its request at once, so it leaves this class within one poll of its task,
//!   long before hundreds of newer connections could push it out; half-sent requests
//!   and half handshakes sit here until the header timeout closes them.
//! - *established*: has sent a request. At most [`MAX_TOTAL`], [`MAX_PER_PEER`] from one
//!   address; a connection starting a request beyond a bound closes the one idle
//!   longest between keep-alive requests (of that address first). One in the middle of
//!   a request is never closed; when all are, the request is still served (scrapes are
//!   served while the bounds are reached) and the class is briefly above its bound.
use std::{
    collections::HashMap,
    net::IpAddr,
    sync::{Arc, Mutex},
};

use tokio::sync::Notify;

/// Established connections at once.
pub const MAX_TOTAL: usize = 64;
/// Established connections from one address at once.
pub const MAX_PER_PEER: usize = 16;
/// Connections without a complete request yet (well within the default 1024 open files).
pub const MAX_PENDING: usize = 256;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Pending,
    Idle,
    Busy,
}

/// One connection as the table sees it.
struct Entry {
    peer: IpAddr,
    /// When it was accepted or last answered a request, in the table's own clock (a
    /// count of such events: a strict order, where instants can tie).
    since: u64,
    state: State,
    close: Arc<Notify>,
}

#[derive(Default)]
struct Table {
    clock: u64,
    entries: HashMap<u64, Entry>,
}

impl Table {
    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    fn count(&self, f: impl Fn(&Entry) -> bool) -> usize {
        self.entries.values().filter(|e| f(e)).count()
    }

    /// Closes the entry in `state` that has waited longest (of `peer` when given);
    /// false when there is none.
    fn evict(&mut self, state: State, peer: Option<IpAddr>) -> bool {
        let victim = self
            .entries
            .iter()
            .filter(|(_, e)| e.state == state && peer.is_none_or(|p| e.peer == p))
            .min_by_key(|(_, e)| e.since)
            .map(|(&id, _)| id);
        match victim.and_then(|id| self.entries.remove(&id)) {
            Some(e) => {
                // notify_one stores a permit: the task sees it even if not waiting yet.
                e.close.notify_one();
                true
            }
            None => false,
        }
    }
}

/// The table of live connections.
#[derive(Default)]
pub struct Conns {
    table: Mutex<Table>,
}

/// A connection's place in the table; leaves it when dropped.
pub struct Slot {
    conns: Arc<Conns>,
    id: u64,
    /// Notified when the connection is closed to make room.
    pub close: Arc<Notify>,
}

impl Conns {
    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Admits a connection from `peer` as pending, closing the oldest pending one when
    /// there are [`MAX_PENDING`].
    pub fn admit(self: &Arc<Self>, peer: IpAddr) -> Slot {
        let mut t = self.lock();
        if t.count(|e| e.state == State::Pending) >= MAX_PENDING {
            t.evict(State::Pending, None);
        }
        let id = t.tick();
        let close = Arc::new(Notify::new());
        t.entries.insert(
            id,
            Entry {
                peer,
                since: id,
                state: State::Pending,
                close: close.clone(),
            },
        );
        Slot {
            conns: self.clone(),
            id,
            close,
        }
    }
}

impl Slot {
    /// A request's headers are in: the connection is established and busy until
    /// [`Slot::done`]. Makes room at the bounds by closing the longest-idle established
    /// connection (of this address first).
    pub fn busy(&self) {
        let mut t = self.conns.lock();
        let Some(e) = t.entries.get(&self.id) else {
            return;
        };
        let (peer, was) = (e.peer, e.state);
        if was == State::Pending {
            let established = |e: &Entry| e.state != State::Pending;
            if t.count(|e| established(e) && e.peer == peer) >= MAX_PER_PEER {
                t.evict(State::Idle, Some(peer));
            }
            if t.count(established) >= MAX_TOTAL {
                t.evict(State::Idle, None);
            }
        }
        if let Some(e) = t.entries.get_mut(&self.id) {
            e.state = State::Busy;
        }
    }

    /// The response is written: idle until the next request.
    pub fn done(&self) {
        let mut t = self.conns.lock();
        let now = t.tick();
        if let Some(e) = t.entries.get_mut(&self.id) {
            e.state = State::Idle;
            e.since = now;
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.conns.lock().entries.remove(&self.id);
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
        c.lock().entries.len()
    }

    #[test]
    fn half_open_clients_never_keep_a_scraper_out() {
        let c = Arc::new(Conns::default());
        let attacker: IpAddr = [127, 0, 0, 1].into();
        // More half-open connections than the pending class holds: the oldest go.
        let half: Vec<Slot> = (0..MAX_PENDING + 10).map(|_| c.admit(attacker)).collect();
        assert_eq!(live(&c), MAX_PENDING);
        assert!(closing(&half[0]) && closing(&half[9]) && !closing(&half[10]));
        // A scraper from the same address gets in and, once its request is in, stays
        // through any number of newer half-open ones.
        let scraper = c.admit(attacker);
        scraper.busy();
        let _more: Vec<Slot> = (0..3 * MAX_PENDING).map(|_| c.admit(attacker)).collect();
        assert!(!closing(&scraper));
        scraper.done();
        assert!(
            !closing(&scraper),
            "idle between scrapes, still in its class"
        );
    }

    #[test]
    fn established_bounds_close_the_longest_idle_first() {
        let c = Arc::new(Conns::default());
        let a: IpAddr = [10, 0, 0, 1].into();
        let from_a: Vec<Slot> = (0..MAX_PER_PEER).map(|_| c.admit(a)).collect();
        for s in &from_a {
            s.busy();
            s.done();
        }
        from_a[0].busy();
        // At a's bound: a's longest idle that is not busy (the second) makes room.
        let newest_a = c.admit(a);
        newest_a.busy();
        assert!(!closing(&from_a[0]), "busy: kept");
        assert!(closing(&from_a[1]), "the longest idle is closed");
        assert!(!closing(&from_a[2]));
        // Others are held only by the total.
        let others: Vec<Slot> = (0..MAX_TOTAL - MAX_PER_PEER)
            .map(|i| {
                let s = c.admit([10, 0, 1, (i / MAX_PER_PEER) as u8].into());
                s.busy();
                s.done();
                s
            })
            .collect();
        let late = c.admit([10, 0, 2, 1].into());
        late.busy();
        assert!(closing(&from_a[2]), "the longest idle of all");
        // Every one busy: the request is still served, above the bound for a moment.
        for s in from_a.iter().chain(&others) {
            s.busy();
        }
        let extra = c.admit([10, 0, 3, 1].into());
        extra.busy();
        assert!(!closing(&extra));
        drop(others);
        assert!(live(&c) < MAX_TOTAL, "closed connections leave the table");
    }
}
