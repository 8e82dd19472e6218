//! Basic auth for the exporter, off its serving thread: bcrypt is slow by design (each
//! cost step doubles it: ~70 ms at cost 10), so verifications run on a small pool of
//! threads with a bounded queue, successful ones are remembered (as the Prometheus
//! exporter-toolkit does) so an authorized scraper pays once, and a user name that does
//! not exist costs what one that does costs, so names cannot be told by timing.
use std::{
    collections::HashSet,
    sync::{mpsc, Arc, Mutex, OnceLock},
};

use tokio::sync::oneshot;

use crate::sys::webconfig::WebConfig;

/// Verifying threads; more requests than this wait in the queue.
const WORKERS: usize = 2;
/// Verifications waiting; beyond, a request is answered 503 at once.
const QUEUE: usize = 32;
/// Successful verifications remembered (a handful of scrapers); the cache is emptied
/// when full.
const CACHE: usize = 64;

/// What a request's credentials got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Admitted,
    Refused,
    /// The verifying pool's queue is full: try again.
    Busy,
}

struct Job {
    password: String,
    hash: Arc<str>,
    reply: oneshot::Sender<bool>,
}

/// The users of the web config, with the pool and the cache.
pub struct Auth {
    users: std::collections::BTreeMap<String, Arc<str>>,
    /// A hash of the users' largest cost, checked for names that are not users.
    dummy: Arc<str>,
    /// SHA-256 of `user \0 password` of verifications that succeeded.
    admitted: Mutex<HashSet<[u8; 32]>>,
    /// Started at the first verification, so its threads are born under the privilege
    /// policy of an attached tracer.
    pool: OnceLock<mpsc::SyncSender<Job>>,
}

fn key(user: &str, password: &str) -> [u8; 32] {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(user.as_bytes());
    ctx.update(&[0]);
    ctx.update(password.as_bytes());
    let mut k = [0u8; 32];
    k.copy_from_slice(ctx.finish().as_ref());
    k
}

impl Auth {
    /// From the web config (whose hashes and costs are already checked).
    pub fn new(web: &WebConfig) -> Auth {
        let cost = web.max_cost().unwrap_or(bcrypt::DEFAULT_COST);
        let dummy = bcrypt::hash("not a user's password", cost).unwrap_or_default();
        Auth {
            users: web
                .users
                .iter()
                .map(|(u, h)| (u.clone(), Arc::from(h.as_str())))
                .collect(),
            dummy: Arc::from(dummy.as_str()),
            admitted: Mutex::new(HashSet::new()),
            pool: OnceLock::new(),
        }
    }

    fn pool(&self) -> &mpsc::SyncSender<Job> {
        self.pool.get_or_init(|| {
            let (tx, rx) = mpsc::sync_channel::<Job>(QUEUE);
            let rx = Arc::new(Mutex::new(rx));
            for i in 0..WORKERS {
                let rx = rx.clone();
                let _ = std::thread::Builder::new()
                    .name(format!("bcrypt-{i}"))
                    .spawn(move || loop {
                        let job = match rx.lock() {
                            Ok(r) => r.recv(),
                            Err(_) => return,
                        };
                        let Ok(job) = job else { return };
                        let ok = bcrypt::verify(&job.password, &job.hash).unwrap_or(false);
                        let _ = job.reply.send(ok);
                    });
            }
            tx
        })
    }

    /// Whether an `Authorization` header admits the request (always, without users).
    pub async fn check(&self, authorization: Option<&str>) -> Verdict {
        if self.users.is_empty() {
            return Verdict::Admitted;
        }
        let Some((user, password)) = authorization.and_then(crate::sys::webconfig::decode_basic)
        else {
            return Verdict::Refused;
        };
        let k = key(&user, &password);
        if self
            .admitted
            .lock()
            .map(|s| s.contains(&k))
            .unwrap_or(false)
        {
            return Verdict::Admitted;
        }
        // Same work for a name that is not a user, at the users' cost.
        let (hash, known) = match self.users.get(&user) {
            Some(h) => (h.clone(), true),
            None => (self.dummy.clone(), false),
        };
        let (tx, rx) = oneshot::channel();
        let job = Job {
            password,
            hash,
            reply: tx,
        };
        if self.pool().try_send(job).is_err() {
            return Verdict::Busy;
        }
        match rx.await {
            Ok(true) if known => {
                if let Ok(mut s) = self.admitted.lock() {
                    if s.len() >= CACHE {
                        s.clear();
                    }
                    s.insert(k);
                }
                Verdict::Admitted
            }
            Ok(_) => Verdict::Refused,
            Err(_) => Verdict::Busy,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth(cost: u32) -> Auth {
        let hash = bcrypt::hash("secret", cost).unwrap();
        let web = WebConfig::parse(
            &format!("basic_auth_users:\n  alice: {hash}\n"),
            ".".as_ref(),
        )
        .unwrap();
        Auth::new(&web)
    }

    fn check(a: &Auth, header: &str) -> (Verdict, std::time::Duration) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let t = std::time::Instant::now();
        let v = rt.block_on(a.check(Some(header)));
        (v, t.elapsed())
    }

    #[test]
    fn verdicts_and_the_cache_of_successes() {
        let a = auth(4);
        // "alice:secret", "alice:wrong", "bob:secret"
        assert_eq!(check(&a, "Basic YWxpY2U6c2VjcmV0").0, Verdict::Admitted);
        assert_eq!(check(&a, "Basic YWxpY2U6d3Jvbmc=").0, Verdict::Refused);
        assert_eq!(check(&a, "Basic Ym9iOnNlY3JldA==").0, Verdict::Refused);
        assert_eq!(check(&a, "Basic !!!").0, Verdict::Refused);
        assert_eq!(
            a.admitted.lock().unwrap().len(),
            1,
            "only the success is kept"
        );
        let none = Auth::new(&WebConfig::default());
        assert_eq!(check(&none, "anything").0, Verdict::Admitted);
    }

    /// An unknown user once cost 0.27-0.30 s against 0.07 s for a known one (a dummy
    /// hash at bcrypt's default cost 12 against the users' 10): names could be told by
    /// timing. bcrypt's work is fixed by the cost in the hash, so the dummy checked for a
    /// name that is not a user must carry the users' largest cost (checked by its
    /// parameters, not by a clock, which a loaded machine moves).
    #[test]
    fn a_name_that_is_not_a_user_costs_what_a_user_does() {
        use std::str::FromStr;
        for cost in [4, 10] {
            let a = auth(cost);
            let dummy = bcrypt::HashParts::from_str(&a.dummy).expect("a bcrypt hash");
            assert_eq!(dummy.get_cost(), cost);
            assert_eq!(check(&a, "Basic Ym9iOnNlY3JldA==").0, Verdict::Refused);
        }
        let hashes = [4, 6].map(|c| bcrypt::hash("secret", c).unwrap());
        let web = WebConfig::parse(
            &format!(
                "basic_auth_users:\n  alice: {}\n  bob: {}\n",
                hashes[0], hashes[1]
            ),
            ".".as_ref(),
        )
        .unwrap();
        let a = Auth::new(&web);
        assert_eq!(bcrypt::HashParts::from_str(&a.dummy).unwrap().get_cost(), 6);
    }
}
