//! Which series a thread's time goes to: its cgroup id (written by the kernel at every
//! switch-out) to a path (`sys::cgroups::CgroupNames`, fed by walks of the tree and the
//! kernel's `cgroup_mkdir` events), the path to a workload (`model::workload`), the
//! workload to a series label, through `--cgroup-allow`/`--cgroup-deny`. Also each
//! series' throttling and pressure, and the names the kubelet writes.
use std::{
    collections::{BTreeMap, HashMap},
    ffi::OsStr,
    os::unix::ffi::OsStrExt as _,
    path::PathBuf,
    time::{Duration, Instant},
};

use globset::{Glob, GlobSet, GlobSetBuilder};

use crate::{
    bpf::cgroups::MkdirRing,
    model::{
        series::{CgroupCpu, Labels},
        words,
        workload::{identify, labels, Names, Workload},
    },
    sys::{
        cgroups::{CgroupNames, CpuFiles},
        procfs,
        root::Root,
    },
};

/// The label of time no cgroup could be found for (counted in `cgroup_unresolved`).
pub const UNKNOWN: &str = "unknown";
/// The label of cgroups outside `--cgroup-allow` or inside `--cgroup-deny`.
pub const OTHER: &str = "other";

/// `--cgroup-allow` / `--cgroup-deny`: globs over the series' cgroup path (`*` within
/// one component, `**` across them).
#[derive(Clone, Debug, Default)]
pub struct Patterns {
    pub allow: Vec<String>,
    pub deny: Vec<String>,
}

fn globset(pats: &[String]) -> Result<Option<GlobSet>, String> {
    if pats.is_empty() {
        return Ok(None);
    }
    let mut b = GlobSetBuilder::new();
    for p in pats {
        let g = globset::GlobBuilder::new(p)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|e| format!("{p:?}: {e}"))?;
        b.add(g);
    }
    b.build().map(Some).map_err(|e| e.to_string())
}

/// Checks the patterns (the command line's parse).
pub fn check_pattern(p: &str) -> Result<String, String> {
    Glob::new(p)
        .map(|_| p.to_string())
        .map_err(|e| e.to_string())
}

/// A series' cgroup: its path below the mount and what the path says.
pub struct SeriesCgroup {
    pub workload: Workload,
    /// Bandwidth and pressure read for it, kept going up across a recreated cgroup.
    cpu: CgroupCpu,
}

/// The kubelet's names: `/var/log/pods/<namespace>_<pod>_<uid>/` and
/// `/var/log/containers/<pod>_<namespace>_<container>-<id>.log` (what log shippers
/// read), under `--kubelet-logs`.
struct KubeNames {
    dir: PathBuf,
    names: Names,
    read_at: Option<Instant>,
}

/// Re-reads the kubelet's directories at most this often, and only for a name missing.
const KUBE_REFRESH: Duration = Duration::from_secs(5);

impl KubeNames {
    fn refresh(&mut self) {
        if self.read_at.is_some_and(|t| t.elapsed() < KUBE_REFRESH) {
            return;
        }
        self.read_at = Some(Instant::now());
        self.names = read_kube_names(&self.dir);
    }
}

/// The names in the kubelet's log directories under `dir`.
pub fn read_kube_names(dir: &std::path::Path) -> Names {
    let mut n = Names::default();
    let list = |sub: &str| -> Vec<String> {
        std::fs::read_dir(dir.join(sub))
            .map(|rd| {
                rd.flatten()
                    .filter_map(|e| e.file_name().into_string().ok())
                    .collect()
            })
            .unwrap_or_default()
    };
    // Pod and namespace names are DNS labels and container names too: no `_` inside.
    for e in list("pods") {
        let f: Vec<&str> = e.split('_').collect();
        if let [ns, pod, uid] = f[..] {
            n.pods
                .insert(uid.to_ascii_lowercase(), (ns.to_string(), pod.to_string()));
        }
    }
    for e in list("containers") {
        let Some(stem) = e.strip_suffix(".log") else {
            continue;
        };
        let Some((left, id)) = stem.rsplit_once('-') else {
            continue;
        };
        let f: Vec<&str> = left.split('_').collect();
        if let [_pod, _ns, name] = f[..] {
            if id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit()) {
                n.containers
                    .insert(id.to_ascii_lowercase(), name.to_string());
            }
        }
    }
    n
}

/// Everything between a thread's cgroup id and its series.
pub struct Workloads {
    names: CgroupNames,
    ring: Option<MkdirRing>,
    depth: usize,
    allow: Option<GlobSet>,
    deny: Option<GlobSet>,
    kube: KubeNames,
    cpu_files: CpuFiles,
    /// Series label -> its cgroup.
    pub series: HashMap<String, SeriesCgroup>,
    /// Cgroup id -> series label, for ids seen since the last prune.
    by_id: HashMap<u64, String>,
    /// One walk of the tree per read at most, for ids nobody named.
    walked: bool,
    /// Thread deltas whose cgroup could not be found (label `unknown`).
    pub unresolved: u64,
    /// Thread deltas that went to `other` through the patterns.
    pub filtered: u64,
    /// Events lost in the kernel's ring (read from its counter).
    pub events_lost: u64,
    root: Root,
}

impl Workloads {
    pub fn new(
        root: &Root,
        ring: Option<MkdirRing>,
        depth: usize,
        patterns: &Patterns,
        kubelet_logs: PathBuf,
        now: u64,
    ) -> Result<Self, String> {
        let mut names = CgroupNames::new(procfs::cgroup2_mount(root));
        names.walk(now);
        Ok(Workloads {
            names,
            ring,
            depth,
            allow: globset(&patterns.allow)?,
            deny: globset(&patterns.deny)?,
            kube: KubeNames {
                dir: root.path(kubelet_logs),
                names: Names::default(),
                read_at: None,
            },
            cpu_files: CpuFiles::find(root),
            series: HashMap::new(),
            by_id: HashMap::new(),
            walked: false,
            unresolved: 0,
            filtered: 0,
            events_lost: 0,
            root: root.clone(),
        })
    }

    pub fn ring(&self) -> Option<&MkdirRing> {
        self.ring.as_ref()
    }

    /// Takes the kernel's new cgroups out of its ring (call as it fills).
    pub fn drain(&mut self, now: u64) {
        let Some(r) = self.ring.as_mut() else { return };
        for m in r.drain() {
            // A path cut to fit the event is not a name: a walk finds it.
            if !m.cut {
                self.names.learn(m.id, m.path, now);
            }
        }
    }

    /// Before a read's attributions.
    pub fn begin_read(&mut self, now: u64) {
        self.drain(now);
        self.walked = false;
    }

    /// The series label of a thread of process `pid` whose entry says `cgroup_id` (0:
    /// not switched out yet, so it runs now: its cgroup is read from /proc).
    pub fn label(&mut self, cgroup_id: u64, pid: u32, now: u64) -> String {
        if cgroup_id == 0 {
            return match procfs::cgroup_path(&self.root, pid) {
                Some(p) => self.label_of_path(&p),
                None => self.unresolved(),
            };
        }
        if let Some(l) = self.by_id.get(&cgroup_id) {
            return l.clone();
        }
        let mut path = self.names.get(cgroup_id, now).map(<[u8]>::to_vec);
        if path.is_none() && !self.walked {
            self.walked = true;
            self.drain(now);
            path = self.names.get(cgroup_id, now).map(<[u8]>::to_vec);
            if path.is_none() {
                self.names.walk(now);
                path = self.names.get(cgroup_id, now).map(<[u8]>::to_vec);
            }
        }
        match path {
            Some(p) => {
                let l = self.label_of_path(&p);
                self.by_id.insert(cgroup_id, l.clone());
                l
            }
            None => self.unresolved(),
        }
    }

    fn unresolved(&mut self) -> String {
        self.unresolved += 1;
        UNKNOWN.to_string()
    }

    fn label_of_path(&mut self, path: &[u8]) -> String {
        let w = identify(path, self.depth);
        let glob_path = std::path::Path::new(OsStr::from_bytes(&w.path));
        let allowed = self.allow.as_ref().is_none_or(|a| a.is_match(glob_path))
            && !self.deny.as_ref().is_some_and(|d| d.is_match(glob_path));
        if !allowed {
            self.filtered += 1;
            return OTHER.to_string();
        }
        let label = words::escape(&w.path);
        self.series.entry(label.clone()).or_insert(SeriesCgroup {
            workload: w,
            cpu: CgroupCpu::default(),
        });
        label
    }

    /// Whether the series' cgroup directory is still there (unknown labels: yes).
    pub fn exists(&self, label: &str) -> bool {
        match self.series.get(label) {
            Some(s) => self.names.dir(&s.workload.path).is_none_or(|d| d.is_dir()),
            None => true,
        }
    }

    /// Forgets what no series needs: cgroups of expired series, ids unused since
    /// `before`.
    pub fn prune(&mut self, live: &BTreeMap<String, crate::model::series::Series>, before: u64) {
        self.series.retain(|l, _| live.contains_key(l));
        self.by_id.retain(|_, l| live.contains_key(l));
        self.names.forget_unused(before);
    }

    /// Each series' workload labels, throttling and pressure, read now.
    pub fn publish(&mut self) -> (BTreeMap<String, Labels>, BTreeMap<String, CgroupCpu>) {
        let need_names = self.series.values().any(|s| {
            let w = &s.workload;
            w.pod_uid
                .as_ref()
                .is_some_and(|u| !self.kube.names.pods.contains_key(u))
                || w.container_id
                    .as_ref()
                    .is_some_and(|c| !w.conmon && !self.kube.names.containers.contains_key(c))
        });
        if need_names {
            self.kube.refresh();
        }
        let mut lab = BTreeMap::new();
        let mut cpu = BTreeMap::new();
        for (label, s) in self.series.iter_mut() {
            let l = labels(&s.workload, &self.kube.names, |t| words::escape(t));
            if !l.is_empty() {
                lab.insert(label.clone(), l);
            }
            s.cpu.update(
                self.cpu_files.throttling(&s.workload.path),
                self.cpu_files.pressure(&s.workload.path),
            );
            cpu.insert(label.clone(), s.cpu);
        }
        (lab, cpu)
    }

    pub fn names_known(&self) -> usize {
        self.names.len()
    }

    pub fn walks(&self) -> u64 {
        self.names.walks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubelet_log_directories_name_pods_and_containers() {
        let dir = std::env::temp_dir().join(format!("tracer-kube-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let uid = "3f1c9a2e-7b4d-4e8a-9c1f-2a3b4c5d6e7f";
        let id = "0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9";
        std::fs::create_dir_all(dir.join(format!("pods/shop_cart-7d9f_{uid}/cart"))).unwrap();
        std::fs::create_dir_all(dir.join("pods/not-a-pod")).unwrap();
        std::fs::create_dir_all(dir.join("containers")).unwrap();
        std::fs::write(
            dir.join(format!("containers/cart-7d9f_shop_cart-{id}.log")),
            "",
        )
        .unwrap();
        std::fs::write(dir.join("containers/junk.log"), "").unwrap();
        let n = read_kube_names(&dir);
        assert_eq!(n.pods[uid], ("shop".to_string(), "cart-7d9f".to_string()));
        assert_eq!(n.pods.len(), 1);
        assert_eq!(n.containers[id], "cart");
        assert_eq!(n.containers.len(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn patterns_are_globs_over_the_path() {
        let s = globset(&[
            "/kubepods.slice/**".into(),
            "/system.slice/*.service".into(),
        ])
        .unwrap()
        .unwrap();
        let m = |p: &str| s.is_match(std::path::Path::new(p));
        assert!(m(
            "/kubepods.slice/kubepods-pod1.slice/cri-containerd-a.scope"
        ));
        assert!(m("/system.slice/nginx.service"));
        assert!(!m("/system.slice/x/y.service"), "* stays in one component");
        assert!(globset(&["[".into()]).is_err());
    }
}
