//! The one loop every tracing command waits in: it owns the signals, the deadline, the
//! command's exit (SIGCHLD), the `-p`/`-t` targets exiting and a closed standard output,
//! and wakes the command's [`Work`] when it is due, when the kernel has records to read,
//! or when a message comes (a scrape, the TUI's quit key).
use std::os::fd::OwnedFd;
use std::time::Duration;

use anyhow::{Context as _, Result};
use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc::{Receiver, UnboundedReceiver};
use tokio::time::Instant;

use super::signals::Signals;
use crate::{
    cmd::targets,
    error::TracerError,
    sys::{launch, procfs, root::Root},
};

/// What ended the run.
#[derive(Debug)]
pub(crate) enum End {
    /// `-d` ran out.
    Duration,
    /// `-c` intervals were reported.
    Count,
    /// SIGINT, SIGTERM or SIGHUP.
    Signal(&'static str),
    /// The front end asked (top's quit key).
    Quit,
    /// The command ended (reaped, with its CPU time).
    CommandExited(launch::Reaped),
    /// Every -p/-t target exited (perf stat -p ends the same way).
    TargetsExited,
    /// A report could not be written (closed pipe, full disk).
    Output(TracerError),
    /// The command's own output failed (record's trace file): it says why.
    Failed,
}

/// What else ends a run, besides a signal.
pub(crate) struct Ends {
    pub deadline: Option<Instant>,
    /// The command started held, once released.
    pub child: Option<u32>,
    /// The -p/-t targets given at the start (a cgroup can gain tasks later: never).
    pub watch: Option<Vec<procfs::Watched>>,
    /// A closed standard output ends the run (its reports have nowhere to go).
    pub stdout: bool,
}

impl Ends {
    pub(crate) fn new(
        duration: Option<Duration>,
        child: Option<u32>,
        t: &crate::model::targets::Targets,
        root: &Root,
        stdout: bool,
    ) -> Ends {
        Ends {
            deadline: duration.map(|d| Instant::now() + d),
            child,
            watch: targets::watch_list(t, root),
            stdout,
        }
    }

    /// An end that has come, checked when woken.
    fn check(&self, root: &Root) -> Option<End> {
        // A SIGCHLD that arrived before the handler was installed.
        if let Some(code) = self.child.and_then(launch::try_wait_exit) {
            return Some(End::CommandExited(code));
        }
        if self
            .watch
            .as_ref()
            .is_some_and(|w| !targets::targets_alive(root, w))
        {
            return Some(End::TargetsExited);
        }
        if self.stdout && crate::output::stdout::stdout_closed() {
            return Some(End::Output(TracerError::OutputClosed));
        }
        None
    }
}

/// Why the loop woke the command.
pub(crate) enum Wake<M> {
    /// Its [`Work::due`] time came, or [`CHECK`] passed since the last wake: it looks
    /// whether it has work.
    Tick,
    /// The kernel's records are readable: which of the descriptors given to [`run`].
    Readable(usize),
    Message(M),
}

/// A command's part of the loop.
pub(crate) trait Work<M> {
    /// When it wants to be woken next (it is woken every [`CHECK`] anyway).
    fn due(&self) -> Instant;
    /// It was woken: Some(end) ends the run.
    fn wake(&mut self, why: Wake<M>) -> Result<Option<End>>;
}

/// A command's own channel: scrapes asking for a fresh read (bounded), the TUI's keys.
pub(crate) enum Inbox<'a, M> {
    None,
    Bounded(&'a mut Receiver<M>),
    Unbounded(&'a mut UnboundedReceiver<M>),
}

impl<M> Inbox<'_, M> {
    /// The next message; None when the sender went away. Never, without a channel.
    async fn recv(&mut self) -> Option<M> {
        match self {
            Inbox::None => std::future::pending().await,
            Inbox::Bounded(rx) => rx.recv().await,
            Inbox::Unbounded(rx) => rx.recv().await,
        }
    }
}

/// How often the ends are checked at the latest (a target's exit, a closed pipe).
pub(crate) const CHECK: Duration = Duration::from_millis(100);

/// Waits for the run's end, waking `work`. `rings`: descriptors readable when the
/// kernel has records (`Wake::Readable(i)`); `messages`: the command's own channel.
pub(crate) async fn run<M, W: Work<M>>(
    signals: &mut Signals,
    ends: &Ends,
    root: &Root,
    rings: &[&AsyncFd<OwnedFd>],
    mut messages: Inbox<'_, M>,
    work: &mut W,
) -> Result<End> {
    use tokio::signal::unix::{signal, SignalKind};
    // SIGCHLD wakes us; waitpid(WNOHANG) reaps: the run ends at -d or a signal even
    // while the command goes on.
    let mut sigchld = signal(SignalKind::child()).context("watching SIGCHLD")?;
    // The ends are checked (and a Tick given) every CHECK even while rings or messages
    // wake the loop without pause: a deadline recomputed at each wake would never come
    // under a burst of exits, and a failed output would go unseen until -d ran out.
    let mut next_check = Instant::now() + CHECK;
    loop {
        let due = work.due().min(next_check);
        let readable = any_readable(rings);
        let message = messages.recv();
        let deadline = async {
            match ends.deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        let mut child_changed = false;
        let woke = tokio::select! {
            sig = signals.next() => return Ok(End::Signal(sig)),
            _ = deadline => return Ok(End::Duration),
            _ = sigchld.recv(), if ends.child.is_some() => {
                child_changed = true;
                None
            }
            i = readable => Some(Wake::Readable(i)),
            m = message => match m {
                Some(m) => Some(Wake::Message(m)),
                // The sender went away (the front end ended): as a quit.
                None => return Ok(End::Quit),
            },
            _ = tokio::time::sleep_until(due) => Some(Wake::Tick),
        };
        let now = Instant::now();
        let check_due = now >= next_check;
        if let Some(why) = woke {
            let ticked = matches!(why, Wake::Tick);
            if let Some(end) = work.wake(why)? {
                return Ok(end);
            }
            if check_due && !ticked {
                if let Some(end) = work.wake(Wake::Tick)? {
                    return Ok(end);
                }
            }
        }
        if check_due || child_changed {
            if let Some(end) = ends.check(root) {
                return Ok(end);
            }
        }
        if check_due {
            next_check = now + CHECK;
        }
    }
}

/// The first of `fds` that is readable (its readiness cleared); never, without any. A
/// descriptor whose readiness fails is left out: its records are read at the next tick.
async fn any_readable(fds: &[&AsyncFd<OwnedFd>]) -> usize {
    use std::task::Poll;
    std::future::poll_fn(|cx| {
        for (i, fd) in fds.iter().enumerate() {
            if let Poll::Ready(Ok(mut guard)) = fd.poll_read_ready(cx) {
                guard.clear_ready();
                return Poll::Ready(i);
            }
        }
        Poll::Pending
    })
    .await
}
