//! Which scheduler ran the traced tasks, and what that means for the run-queue figures:
//! the fair class (EEVDF since 6.6, CFS before), whether delayed dequeue is on (6.12+),
//! and a sched_ext scheduler when one is loaded (6.12+). Decided here from what the
//! kernel said ([`Facts`], read by `bpf::scheduler`), so every rule has a unit test.
use serde::{Deserialize, Serialize};

/// The report header's `scheduler` object.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Scheduler {
    /// The fair class (SCHED_NORMAL, SCHED_BATCH, SCHED_IDLE): "EEVDF" or "CFS"; null
    /// when nothing the kernel exposes told which.
    pub class: Option<String>,
    /// The sched_ext scheduler's name (`root/ops`) while one is enabled, else null.
    pub ext: Option<String>,
    /// `/sys/kernel/sched_ext/state` (enabled, disabled, enabling, ...); null on a kernel
    /// without sched_ext.
    pub ext_state: Option<String>,
    /// With `ext`: whether it runs every fair task (`switch_all`) or only the tasks
    /// whose policy is SCHED_EXT; else null.
    pub ext_switch_all: Option<bool>,
    /// The DELAY_DEQUEUE scheduler feature; false on kernels without it, null when it
    /// could not be read (`notices` says why).
    pub delay_dequeue: Option<bool>,
    /// What the figures were read from.
    pub source: String,
}

/// What the kernel exposes, as read (each `Err` says why it could not be).
#[derive(Clone, Debug)]
pub struct Facts {
    /// From BTF: `sched_entity` has `deadline` and `vlag` (EEVDF), and `sched_delayed`
    /// (the kernel can delay dequeues).
    pub btf: Result<BtfFacts, String>,
    /// The kernel release (`osrelease`).
    pub release: Option<String>,
    /// The text of debugfs `sched/features` (`NO_` before a feature that is off).
    pub features: Result<String, String>,
    /// `/sys/kernel/sched_ext`; None when the kernel has no sched_ext.
    pub ext: Option<ExtFacts>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BtfFacts {
    pub eevdf: bool,
    pub delayed_dequeue: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExtFacts {
    pub state: String,
    pub switch_all: Option<bool>,
    /// `root/ops`: present while a scheduler is loaded.
    pub ops: Option<String>,
}

/// On or off in a `sched/features` text: `FEAT` is on, `NO_FEAT` off, absent None.
pub fn feature(text: &str, name: &str) -> Option<bool> {
    text.split_ascii_whitespace().find_map(|w| {
        if w == name {
            Some(true)
        } else if w.strip_prefix("NO_") == Some(name) {
            Some(false)
        } else {
            None
        }
    })
}

/// `major.minor` of a release such as `6.18.44-fc-v973`.
pub fn release_version(release: &str) -> Option<(u32, u32)> {
    let mut it = release.split(|c: char| !c.is_ascii_digit());
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    Some((major, minor))
}

/// EEVDF replaced CFS in 6.6; delayed dequeue came in 6.12 (`bpf::compat` names the
/// commits).
const EEVDF_SINCE: (u32, u32) = (6, 6);
const DELAY_DEQUEUE_SINCE: (u32, u32) = (6, 12);

/// The header's scheduler and the notes the report carries about it.
pub fn decide(f: &Facts) -> (Scheduler, Vec<String>) {
    let mut sources = Vec::new();
    let mut notes = Vec::new();
    let version = f.release.as_deref().and_then(release_version);
    let features = f.features.as_ref().ok();
    // The fair class: BTF names the fields EEVDF added; PLACE_LAG is an EEVDF feature
    // (CFS had none of that name); the release last.
    let class = if let Ok(b) = &f.btf {
        sources.push("BTF sched_entity");
        Some(b.eevdf)
    } else if let Some(eevdf) = features.and_then(|t| feature(t, "PLACE_LAG").map(|_| true)) {
        sources.push("sched/features");
        Some(eevdf)
    } else if let Some(v) = version {
        sources.push("kernel release");
        Some(v >= EEVDF_SINCE)
    } else {
        None
    };
    let can_delay = match (&f.btf, version, class) {
        (_, _, Some(false)) => Some(false),
        (Ok(b), _, _) => Some(b.delayed_dequeue),
        (Err(_), Some(v), _) => Some(v >= DELAY_DEQUEUE_SINCE),
        _ => None,
    };
    let delay_dequeue = match (features, can_delay) {
        (_, Some(false)) => Some(false),
        (Some(t), _) => {
            sources.push("sched/features");
            Some(feature(t, "DELAY_DEQUEUE").unwrap_or(false))
        }
        (None, _) => {
            let why = f.features.as_ref().err().map_or("", String::as_str);
            notes.push(format!(
                "whether delayed dequeue (DELAY_DEQUEUE) is on is unknown: {why}"
            ));
            None
        }
    };
    let (ext_state, ext, ext_switch_all) = match &f.ext {
        None => (None, None, None),
        Some(e) => {
            sources.push("/sys/kernel/sched_ext");
            let loaded = e.state == "enabled";
            if !loaded && e.state != "disabled" {
                notes.push(format!(
                    "sched_ext was {} when the run started: the class of some tasks may change during it",
                    e.state
                ));
            }
            let name = loaded.then(|| e.ops.clone().unwrap_or_else(|| "(unnamed)".into()));
            let all = name.as_ref().and(e.switch_all);
            (Some(e.state.clone()), name, all)
        }
    };
    let class = class.map(|eevdf| if eevdf { "EEVDF" } else { "CFS" }.to_string());
    if let Some(name) = &ext {
        let who = match ext_switch_all {
            Some(true) => "every fair task runs under it".to_string(),
            _ => format!(
                "only tasks of policy SCHED_EXT run under it, the rest under {}",
                class.as_deref().unwrap_or("the fair class")
            ),
        };
        notes.push(format!(
            "sched_ext scheduler {name:?} is enabled ({who}): its tasks wait in its dispatch \
             queues; run-queue waits are still timed from the wakeup to the switch-in \
             (sched_switch and the wakeups fire for every class)"
        ));
    }
    let fair_in_use = ext_switch_all != Some(true);
    if delay_dequeue == Some(true) && fair_in_use {
        notes.push(
            "delayed dequeue is on (DELAY_DEQUEUE): a fair task that blocks with negative lag \
             stays queued until it is picked or woken; sched_switch still reports it blocked, \
             so its time off-CPU counts as blocked, and its run-queue wait (and run_delay) \
             still runs from the wakeup to the switch-in"
                .to_string(),
        );
    }
    sources.dedup();
    (
        Scheduler {
            class,
            ext,
            ext_state,
            ext_switch_all,
            delay_dequeue,
            source: if sources.is_empty() {
                "nothing readable".into()
            } else {
                sources.join(", ")
            },
        },
        notes,
    )
}

impl Scheduler {
    /// The header line of the text report: `EEVDF, delayed dequeue on`.
    pub fn describe(&self) -> String {
        let dd = match self.delay_dequeue {
            Some(true) => "delayed dequeue on",
            Some(false) => "delayed dequeue off",
            None => "delayed dequeue unknown",
        };
        let class = self.class.as_deref().unwrap_or("fair class unknown");
        match (&self.ext, self.ext_switch_all) {
            (Some(name), Some(true)) => {
                format!("sched_ext {name} for every fair task ({class}, {dd} underneath)")
            }
            (Some(name), _) => format!("{class}, {dd}; sched_ext {name} for SCHED_EXT tasks"),
            (None, _) => format!("{class}, {dd}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// sched/features of a 6.18 kernel (x86_64 defaults), and of 6.1 (CFS).
    const FEATURES_618: &str = "PLACE_LAG PLACE_DEADLINE_INITIAL PLACE_REL_DEADLINE RUN_TO_PARITY \
        PREEMPT_SHORT NO_NEXT_BUDDY PICK_BUDDY CACHE_HOT_BUDDY DELAY_DEQUEUE DELAY_ZERO \
        WAKEUP_PREEMPTION HRTICK NO_HRTICK_DL NONTASK_CAPACITY TTWU_QUEUE";
    const FEATURES_61: &str = "GENTLE_FAIR_SLEEPERS START_DEBIT NO_NEXT_BUDDY LAST_BUDDY \
        CACHE_HOT_BUDDY WAKEUP_PREEMPTION NO_HRTICK";

    fn facts(btf: Result<BtfFacts, &str>, release: &str, features: Result<&str, &str>) -> Facts {
        Facts {
            btf: btf.map_err(str::to_string),
            release: (!release.is_empty()).then(|| release.to_string()),
            features: features.map(str::to_string).map_err(str::to_string),
            ext: None,
        }
    }

    const EEVDF_612: BtfFacts = BtfFacts {
        eevdf: true,
        delayed_dequeue: true,
    };

    #[test]
    fn features_are_read_with_their_no_prefix() {
        assert_eq!(feature(FEATURES_618, "DELAY_DEQUEUE"), Some(true));
        assert_eq!(feature(FEATURES_618, "NEXT_BUDDY"), Some(false));
        assert_eq!(feature(FEATURES_618, "BUDDY"), None);
        assert_eq!(feature(FEATURES_61, "DELAY_DEQUEUE"), None);
        assert_eq!(release_version("6.18.44-fc-v973"), Some((6, 18)));
        assert_eq!(release_version("5.4.0"), Some((5, 4)));
        assert_eq!(release_version("garbage"), None);
    }

    #[test]
    fn eevdf_with_delayed_dequeue_on_and_off() {
        let (s, notes) = decide(&facts(Ok(EEVDF_612), "6.18.4", Ok(FEATURES_618)));
        assert_eq!(s.class.as_deref(), Some("EEVDF"));
        assert_eq!(s.delay_dequeue, Some(true));
        assert_eq!(s.source, "BTF sched_entity, sched/features");
        assert_eq!(s.describe(), "EEVDF, delayed dequeue on");
        assert!(notes[0].contains("stays queued"), "{notes:?}");
        let off = FEATURES_618.replace(" DELAY_DEQUEUE", " NO_DELAY_DEQUEUE");
        let (s, notes) = decide(&facts(Ok(EEVDF_612), "6.18.4", Ok(&off)));
        assert_eq!(s.delay_dequeue, Some(false));
        assert!(notes.is_empty(), "{notes:?}");
    }

    #[test]
    fn a_kernel_without_the_feature_needs_no_debugfs() {
        // 6.6-6.11: EEVDF, no sched_delayed field: off whatever debugfs says.
        let btf = BtfFacts {
            eevdf: true,
            delayed_dequeue: false,
        };
        let (s, notes) = decide(&facts(Ok(btf), "6.8.0", Err("debugfs: EPERM")));
        assert_eq!(
            (s.class.as_deref(), s.delay_dequeue),
            (Some("EEVDF"), Some(false))
        );
        assert!(notes.is_empty());
        // CFS (6.1): never delayed.
        let cfs = BtfFacts::default();
        let (s, _) = decide(&facts(Ok(cfs), "6.1.0", Ok(FEATURES_61)));
        assert_eq!(
            (s.class.as_deref(), s.delay_dequeue),
            (Some("CFS"), Some(false))
        );
        assert_eq!(s.describe(), "CFS, delayed dequeue off");
    }

    #[test]
    fn unreadable_features_leave_delay_dequeue_unknown_and_say_why() {
        let (s, notes) = decide(&facts(
            Ok(EEVDF_612),
            "6.18.4",
            Err("cannot mount debugfs: EPERM"),
        ));
        assert_eq!(s.delay_dequeue, None);
        assert_eq!(s.describe(), "EEVDF, delayed dequeue unknown");
        assert_eq!(notes.len(), 1);
        assert!(
            notes[0].ends_with("cannot mount debugfs: EPERM"),
            "{notes:?}"
        );
    }

    #[test]
    fn without_btf_the_features_then_the_release_decide() {
        let (s, _) = decide(&facts(Err("no BTF"), "", Ok(FEATURES_618)));
        assert_eq!(s.class.as_deref(), Some("EEVDF"));
        assert_eq!(s.delay_dequeue, Some(true));
        assert_eq!(s.source, "sched/features");
        let (s, _) = decide(&facts(Err("no BTF"), "5.15.0", Err("no debugfs")));
        assert_eq!(
            (s.class.as_deref(), s.delay_dequeue),
            (Some("CFS"), Some(false))
        );
        assert_eq!(s.source, "kernel release");
        let (s, notes) = decide(&facts(Err("no BTF"), "", Err("no debugfs")));
        assert_eq!((s.class, s.delay_dequeue), (None, None));
        assert_eq!(s.source, "nothing readable");
        assert_eq!(notes.len(), 1);
    }

    #[test]
    fn sched_ext_name_state_and_reach() {
        let mut f = facts(Ok(EEVDF_612), "6.18.4", Ok(FEATURES_618));
        f.ext = Some(ExtFacts {
            state: "disabled".into(),
            switch_all: Some(false),
            ops: None,
        });
        let (s, notes) = decide(&f);
        assert_eq!(
            (s.ext.as_deref(), s.ext_state.as_deref()),
            (None, Some("disabled"))
        );
        assert_eq!(s.ext_switch_all, None);
        assert_eq!(notes.len(), 1, "only the delayed-dequeue note: {notes:?}");
        f.ext = Some(ExtFacts {
            state: "enabled".into(),
            switch_all: Some(true),
            ops: Some("rusty".into()),
        });
        let (s, notes) = decide(&f);
        assert_eq!(s.ext.as_deref(), Some("rusty"));
        assert_eq!(s.ext_switch_all, Some(true));
        assert!(s
            .describe()
            .starts_with("sched_ext rusty for every fair task"));
        // Every fair task runs under sched_ext: delayed dequeue concerns none of them.
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("\"rusty\""));
        f.ext = Some(ExtFacts {
            state: "enabled".into(),
            switch_all: Some(false),
            ops: Some("simple".into()),
        });
        let (s, notes) = decide(&f);
        assert_eq!(
            s.describe(),
            "EEVDF, delayed dequeue on; sched_ext simple for SCHED_EXT tasks"
        );
        assert!(notes[0].contains("the rest under EEVDF"), "{notes:?}");
        assert_eq!(notes.len(), 2);
        f.ext = Some(ExtFacts {
            state: "enabling".into(),
            switch_all: Some(false),
            ops: Some("simple".into()),
        });
        let (s, notes) = decide(&f);
        assert_eq!(s.ext, None);
        assert!(notes[0].contains("sched_ext was enabling"), "{notes:?}");
    }
}
