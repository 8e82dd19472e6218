//! What a tracing command was asked to trace, as plain data: every command that traces
//! threads (run, top, record, slow, offcpu) embeds one, parsed once by `cli`.
use std::path::PathBuf;

/// Processes, threads, a cgroup, or a command started here; none of them: the whole
/// machine.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Targets {
    /// Processes with all their threads and, as they are born, their new threads and
    /// children (repeatable `-p`).
    pub pids: Vec<u32>,
    /// Single threads (repeatable `-t`).
    pub tids: Vec<u32>,
    /// A cgroup v2 directory: the tasks in it and, unless `cgroup_node_only`, in every
    /// cgroup below it (as perf's cgroup events count).
    pub cgroup: Option<PathBuf>,
    pub cgroup_node_only: bool,
    /// `--pod`/`--container`: resolved into `cgroup` before the session starts.
    pub workload: Option<crate::model::workload::WorkloadQuery>,
    /// The resolved workload's labels, as `tracer serve` exports them (names escaped).
    pub workload_labels: Vec<(String, String)>,
    /// Run `command` as root even when started through sudo.
    pub as_root: bool,
    /// A command started held, traced with everything it spawns.
    pub command: Vec<String>,
}

impl Targets {
    /// No target: every thread of the machine.
    pub fn system_wide(&self) -> bool {
        self.pids.is_empty()
            && self.tids.is_empty()
            && self.cgroup.is_none()
            && self.command.is_empty()
    }

    /// What is traced, for banners and titles: "all CPUs", "PID 42, TID 7",
    /// "cgroup /x and below", "command ./x -y". Not escaped (JSON keeps the exact text):
    /// a terminal line escapes it.
    pub fn describe(&self) -> String {
        if let Some(cg) = &self.cgroup {
            let below = if self.cgroup_node_only {
                " (only it, not the cgroups below)"
            } else {
                " and the cgroups below"
            };
            let labels = self
                .workload_labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ");
            let asked = match &self.workload {
                Some(q) if !labels.is_empty() => {
                    format!("{} ({labels}): ", q.describe().trim_start_matches("--"))
                }
                Some(q) => format!("{}: ", q.describe().trim_start_matches("--")),
                None => String::new(),
            };
            return format!("{asked}cgroup {}{below}", cg.display());
        }
        if !self.command.is_empty() {
            return format!(
                "command {}",
                crate::sys::launch::short_command(&self.command, 200)
            );
        }
        let mut parts: Vec<String> = self.pids.iter().map(|p| format!("PID {p}")).collect();
        parts.extend(self.tids.iter().map(|t| format!("TID {t}")));
        if parts.is_empty() {
            "all CPUs".into()
        } else {
            parts.join(", ")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describes_each_kind_of_target() {
        assert_eq!(Targets::default().describe(), "all CPUs");
        assert!(Targets::default().system_wide());
        let t = Targets {
            pids: vec![4, 5],
            tids: vec![9],
            ..Default::default()
        };
        assert_eq!(t.describe(), "PID 4, PID 5, TID 9");
        assert!(!t.system_wide());
        let cmd = Targets {
            command: vec!["./busy".into(), "2".into()],
            ..Default::default()
        };
        assert_eq!(cmd.describe(), "command ./busy 2");
        assert!(!cmd.system_wide());
        let c = Targets {
            cgroup: Some("/sys/fs/cgroup/a".into()),
            ..Default::default()
        };
        assert_eq!(
            c.describe(),
            "cgroup /sys/fs/cgroup/a and the cgroups below"
        );
        let n = Targets {
            cgroup_node_only: true,
            ..c
        };
        assert!(n.describe().ends_with("(only it, not the cgroups below)"));
        let p = Targets {
            workload: Some(crate::model::workload::WorkloadQuery::Pod("cart".into())),
            ..n
        };
        assert_eq!(
            p.describe(),
            "pod cart: cgroup /sys/fs/cgroup/a (only it, not the cgroups below)"
        );
        let named = Targets {
            workload_labels: vec![
                ("namespace".into(), "shop".into()),
                ("pod".into(), "cart".into()),
            ],
            ..p
        };
        assert_eq!(
            named.describe(),
            "pod cart (namespace=shop pod=cart): cgroup /sys/fs/cgroup/a (only it, not the \
             cgroups below)"
        );
    }
}

/// How the kernel selects the threads it accounts: every thread, the traced set
/// (`-p`, `-t`, a command, and what they start), or a cgroup's tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filter {
    All,
    Traced,
    Cgroup,
}

/// Which histograms are kept beside the machine-wide ones: none, per process (`-P`,
/// `tracer serve`) or per thread (`-L`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HistScope {
    #[default]
    All,
    Process,
    Thread,
}
