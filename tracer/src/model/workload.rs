//! Workload identity from a cgroup v2 path: the pod, container and systemd service a
//! cgroup belongs to, for the layouts of the kubelet (systemd and cgroupfs drivers, every
//! QoS class), containerd, CRI-O, docker, podman and systemd. Pure: names a runtime or
//! the kubelet can say (pod name, namespace, container name) are added by the caller
//! ([`Names`]); what the path says is always there.
//!
//! A recognised workload is one series, cut at its own cgroup (a container's processes
//! in sub-cgroups of the container count for the container), whatever `--cgroup-depth`
//! says; a path of no known layout is cut at that depth, as before.
use std::collections::HashMap;

use crate::model::series::cgroup_prefix;

/// The kubelet's QoS classes (Guaranteed pods sit directly under kubepods).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Qos {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl Qos {
    pub fn name(self) -> &'static str {
        match self {
            Qos::Guaranteed => "guaranteed",
            Qos::Burstable => "burstable",
            Qos::BestEffort => "besteffort",
        }
    }
}

/// What a cgroup path says about its workload.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Workload {
    /// The series' cgroup: the path cut at the workload (or at the depth).
    pub path: Vec<u8>,
    /// Pod UID, with dashes (`3f1c…-…`).
    pub pod_uid: Option<String>,
    pub qos: Option<Qos>,
    /// `containerd`, `crio`, `docker`, `podman` (None where the path does not say:
    /// the kubelet's cgroupfs driver names containers by id alone).
    pub runtime: Option<&'static str>,
    /// The full container id (64 hex digits for every runtime here).
    pub container_id: Option<String>,
    /// The runtime's monitor process beside the container (CRI-O's and podman's
    /// `conmon`), which is not the container's own work.
    pub conmon: bool,
    /// The systemd unit (`nginx.service`) when the cgroup is in one and no container.
    pub service: Option<String>,
}

impl Workload {
    /// The short container id (12 hex digits, as docker and crictl show it).
    pub fn short_id(&self) -> Option<&str> {
        self.container_id
            .as_deref()
            .map(|id| &id[..id.len().min(12)])
    }
}

/// Container scope prefixes by runtime (systemd cgroup driver and docker/podman).
const SCOPES: &[(&str, &str, bool)] = &[
    ("cri-containerd-", "containerd", false),
    ("crio-conmon-", "crio", true),
    ("crio-", "crio", false),
    ("docker-", "docker", false),
    ("libpod-conmon-", "podman", true),
    ("libpod-", "podman", false),
];

fn is_hex_id(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A container's component: `<prefix><64 hex>[.scope]` or, for the cgroupfs drivers,
/// the bare id. (runtime, id, conmon).
fn container(comp: &str, bare: bool) -> Option<(Option<&'static str>, String, bool)> {
    let name = comp.strip_suffix(".scope").unwrap_or(comp);
    for (prefix, runtime, conmon) in SCOPES {
        if let Some(id) = name.strip_prefix(prefix) {
            if is_hex_id(id) {
                return Some((Some(runtime), id.to_ascii_lowercase(), *conmon));
            }
        }
    }
    (bare && is_hex_id(name)).then(|| (None, name.to_ascii_lowercase(), false))
}

/// A pod UID as the kubelet writes it in cgroup names (with `_` for `-` under the
/// systemd driver), checked to be one.
fn pod_uid(s: &str) -> Option<String> {
    let uid = s.replace('_', "-");
    let ok = uid.len() == 36
        && uid.char_indices().all(|(i, c)| {
            if [8, 13, 18, 23].contains(&i) {
                c == '-'
            } else {
                c.is_ascii_hexdigit()
            }
        });
    ok.then(|| uid.to_ascii_lowercase())
}

/// The kubelet's layout from the component after its root (`kubepods` or
/// `kubepods.slice`, found anywhere: kind and k3s nest it). Returns the workload and
/// how many components it takes.
fn kubepods(comps: &[&str], systemd: bool) -> (Workload, usize) {
    let mut w = Workload::default();
    let mut i = 0;
    let qos_of = |c: &str| -> Option<Qos> {
        if c == "burstable" || (systemd && c.ends_with("kubepods-burstable.slice")) {
            Some(Qos::Burstable)
        } else if c == "besteffort" || (systemd && c.ends_with("kubepods-besteffort.slice")) {
            Some(Qos::BestEffort)
        } else {
            None
        }
    };
    if let Some(q) = comps.first().and_then(|c| qos_of(c)) {
        w.qos = Some(q);
        i = 1;
    }
    let Some(pod) = comps.get(i) else {
        return (w, i);
    };
    let uid = if systemd {
        // kubepods-pod<uid>.slice, kubepods-burstable-pod<uid>.slice, ...
        pod.strip_suffix(".slice")
            .and_then(|p| p.rsplit_once("-pod"))
            .and_then(|(_, uid)| pod_uid(uid))
    } else {
        pod.strip_prefix("pod").and_then(pod_uid)
    };
    let Some(uid) = uid else {
        return (w, i);
    };
    w.pod_uid = Some(uid);
    w.qos.get_or_insert(Qos::Guaranteed);
    i += 1;
    if let Some((runtime, id, conmon)) = comps.get(i).and_then(|c| container(c, true)) {
        w.runtime = runtime;
        w.container_id = Some(id);
        w.conmon = conmon;
        i += 1;
    }
    (w, i)
}

/// The workload of the cgroup at `path` (bytes below the v2 mount, `/a/b`); `depth`
/// cuts paths of no known layout.
pub fn identify(path: &[u8], depth: usize) -> Workload {
    let fallback = || Workload {
        path: cgroup_prefix(path, depth),
        ..Default::default()
    };
    let raw: Vec<&[u8]> = path
        .trim_ascii_end()
        .split(|&b| b == b'/')
        .filter(|c| !c.is_empty())
        .collect();
    // Known layouts are ASCII: stop at the first component that is not UTF-8 (below
    // a workload it is cut off; above one there is no layout to know).
    let comps: Vec<&str> = raw
        .iter()
        .map_while(|c| std::str::from_utf8(c).ok())
        .collect();
    let cut = |n: usize, w: Workload| Workload {
        path: cgroup_prefix(path, n),
        ..w
    };
    for (i, c) in comps.iter().enumerate() {
        let systemd = *c == "kubepods.slice" || c.ends_with("-kubepods.slice");
        if systemd || *c == "kubepods" {
            let (w, n) = kubepods(&comps[i + 1..], systemd);
            return cut(i + 1 + n, w);
        }
        // docker, podman, containerd outside Kubernetes: a container scope (or the
        // cgroupfs drivers' `docker/<id>`, `libpod_parent/libpod-<id>`).
        let bare = i > 0 && comps[i - 1] == "docker";
        if let Some((runtime, id, conmon)) = container(c, bare) {
            return cut(
                i + 1,
                Workload {
                    runtime: runtime.or(Some("docker")),
                    container_id: Some(id),
                    conmon,
                    ..Default::default()
                },
            );
        }
    }
    // No container: the first systemd service (its own sub-cgroups, systemd's
    // delegation, count for it).
    for (i, c) in comps.iter().enumerate() {
        if c.ends_with(".service") && c.len() > ".service".len() {
            return cut(
                i + 1,
                Workload {
                    service: Some(c.to_string()),
                    ..Default::default()
                },
            );
        }
    }
    fallback()
}

/// Names the kubelet (or a runtime) says: pods by UID, containers by id.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Names {
    /// UID -> (namespace, pod name).
    pub pods: HashMap<String, (String, String)>,
    /// Full container id -> container name.
    pub containers: HashMap<String, String>,
}

/// The extra labels of a workload series, in a fixed order; names escaped by the
/// caller's `escape` (they come from the files of whoever runs the pod).
pub fn labels(
    w: &Workload,
    names: &Names,
    escape: impl Fn(&str) -> String,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut push = |k: &str, v: String| out.push((k.to_string(), v));
    if let Some(uid) = &w.pod_uid {
        if let Some((ns, pod)) = names.pods.get(uid) {
            push("namespace", escape(ns));
            push("pod", escape(pod));
        }
        push("pod_uid", uid.clone());
    }
    if let Some(q) = w.qos {
        push("qos", q.name().to_string());
    }
    if let Some(id) = &w.container_id {
        let name = if w.conmon {
            Some("conmon".to_string())
        } else {
            names.containers.get(id).map(|n| escape(n))
        };
        let short = w.short_id().unwrap_or_default().to_string();
        push("container", name.unwrap_or_else(|| short.clone()));
        push("container_id", short);
    }
    if let Some(r) = w.runtime {
        push("runtime", r.to_string());
    }
    if let Some(s) = &w.service {
        push("service", escape(s));
    }
    out
}

/// What `--pod` or `--container` asks for: an id (a pod UID, with dashes or the systemd
/// driver's underscores; a container id or a prefix of it, as docker and crictl take
/// them) or a name the kubelet's log directories say (`pod`, `namespace/pod`,
/// `container`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WorkloadQuery {
    Pod(String),
    Container(String),
}

/// The shortest container id prefix taken: shorter ones match by accident.
pub const MIN_ID_PREFIX: usize = 4;

impl WorkloadQuery {
    /// `--pod X` / `--container X`, for messages.
    pub fn describe(&self) -> String {
        match self {
            WorkloadQuery::Pod(q) => format!("--pod {q}"),
            WorkloadQuery::Container(q) => format!("--container {q}"),
        }
    }

    /// Whether the cgroup at `path` (from the cgroup v2 root) is the asked workload's own
    /// cgroup: the pod's (holding its containers), or the container's (not its runtime
    /// monitor's, not a sub-cgroup inside it).
    pub fn is(&self, path: &[u8], names: &Names) -> bool {
        let w = identify(path, 0);
        if w.path != cgroup_prefix(path, usize::MAX) {
            return false;
        }
        match self {
            WorkloadQuery::Pod(q) => {
                let Some(uid) = w.pod_uid.as_deref().filter(|_| w.container_id.is_none()) else {
                    return false;
                };
                let q = q.to_ascii_lowercase();
                q.replace('_', "-") == uid
                    || names.pods.get(uid).is_some_and(|(ns, pod)| {
                        q == pod.to_ascii_lowercase()
                            || q == format!("{ns}/{pod}").to_ascii_lowercase()
                    })
            }
            WorkloadQuery::Container(q) => {
                let Some(id) = w.container_id.as_deref().filter(|_| !w.conmon) else {
                    return false;
                };
                let q = q.to_ascii_lowercase();
                (q.len() >= MIN_ID_PREFIX
                    && q.bytes().all(|b| b.is_ascii_hexdigit())
                    && id.starts_with(&q))
                    || names.containers.get(id).is_some_and(|n| *n == q)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_and_containers_are_found_by_id_prefix_uid_or_name() {
        let u = UID.replace('-', "_");
        let pod =
            format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice");
        let ctr = format!("{pod}/cri-containerd-{ID}.scope");
        let mut names = Names::default();
        let none = Names::default();
        names
            .pods
            .insert(UID.into(), ("shop".into(), "cart-7d9".into()));
        names.containers.insert(ID.into(), "redis".into());
        let pod_q = |q: &str| WorkloadQuery::Pod(q.into());
        let ctr_q = |q: &str| WorkloadQuery::Container(q.into());
        for q in [UID.to_string(), u.clone(), UID.to_uppercase()] {
            assert!(pod_q(&q).is(pod.as_bytes(), &none), "{q}");
        }
        for q in ["cart-7d9", "shop/cart-7d9"] {
            assert!(pod_q(q).is(pod.as_bytes(), &names), "{q}");
            assert!(
                !pod_q(q).is(pod.as_bytes(), &none),
                "{q} without the kubelet's names"
            );
        }
        // The pod's own cgroup, not its containers' or their sub-cgroups.
        assert!(!pod_q(UID).is(ctr.as_bytes(), &none));
        assert!(
            !pod_q(&UID[..8]).is(pod.as_bytes(), &none),
            "UIDs are whole"
        );
        for q in [&ID[..4], &ID[..12], ID, &ID.to_uppercase()] {
            assert!(ctr_q(q).is(ctr.as_bytes(), &none), "{q}");
        }
        assert!(ctr_q("redis").is(ctr.as_bytes(), &names));
        assert!(
            !ctr_q(&ID[..3]).is(ctr.as_bytes(), &none),
            "too short a prefix"
        );
        assert!(
            !ctr_q(&ID[1..9]).is(ctr.as_bytes(), &none),
            "a prefix, not a substring"
        );
        assert!(!ctr_q(ID).is(format!("{ctr}/sub").as_bytes(), &none));
        assert!(!ctr_q(ID).is(pod.as_bytes(), &none));
        let conmon = format!("/machine.slice/libpod-conmon-{ID}.scope");
        assert!(
            !ctr_q(ID).is(conmon.as_bytes(), &none),
            "the monitor is not the container"
        );
        let docker = format!("/system.slice/docker-{ID}.scope");
        assert!(ctr_q(&ID[..12]).is(docker.as_bytes(), &none));
        assert!(!ctr_q(ID).is(b"/system.slice/ssh.service", &none));
    }

    const ID: &str = "0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9";
    const UID: &str = "3f1c9a2e-7b4d-4e8a-9c1f-2a3b4c5d6e7f";

    fn id(path: &str) -> Workload {
        identify(path.as_bytes(), 2)
    }

    #[test]
    fn kubelet_systemd_driver_each_qos_and_runtime() {
        let u = UID.replace('-', "_");
        for (runtime, prefix) in [
            ("containerd", "cri-containerd-"),
            ("crio", "crio-"),
            ("docker", "docker-"),
        ] {
            let p = format!(
                "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice/{prefix}{ID}.scope"
            );
            let w = id(&format!("{p}/sub"));
            assert_eq!(w.path, p.as_bytes(), "cut at the container");
            assert_eq!(w.pod_uid.as_deref(), Some(UID));
            assert_eq!(w.qos, Some(Qos::Burstable));
            assert_eq!(w.runtime, Some(runtime));
            assert_eq!(w.container_id.as_deref(), Some(ID));
            assert_eq!(w.short_id(), Some(&ID[..12]));
        }
        let be = id(&format!(
            "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{u}.slice/cri-containerd-{ID}.scope"
        ));
        assert_eq!(be.qos, Some(Qos::BestEffort));
        let g = id(&format!(
            "/kubepods.slice/kubepods-pod{u}.slice/crio-{ID}.scope"
        ));
        assert_eq!(
            (g.qos, g.pod_uid.as_deref()),
            (Some(Qos::Guaranteed), Some(UID))
        );
        // CRI-O's monitor beside the container.
        let c = id(&format!(
            "/kubepods.slice/kubepods-pod{u}.slice/crio-conmon-{ID}.scope"
        ));
        assert!(c.conmon && c.runtime == Some("crio"));
        // The pod's own cgroup (nothing below it yet), and the QoS level.
        let pod = id(&format!("/kubepods.slice/kubepods-pod{u}.slice"));
        assert_eq!(pod.container_id, None);
        assert_eq!(
            pod.path,
            format!("/kubepods.slice/kubepods-pod{u}.slice").as_bytes()
        );
        let q = id("/kubepods.slice/kubepods-burstable.slice");
        assert_eq!((q.qos, q.pod_uid), (Some(Qos::Burstable), None));
        // kind and k3s nest the kubelet's root.
        let kind = id(&format!(
            "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod{u}.slice/cri-containerd-{ID}.scope"
        ));
        assert_eq!(kind.pod_uid.as_deref(), Some(UID));
    }

    #[test]
    fn kubelet_cgroupfs_driver() {
        let p = format!("/kubepods/besteffort/pod{UID}/{ID}");
        let w = id(&p);
        assert_eq!(w.path, p.as_bytes());
        assert_eq!((w.qos, w.runtime), (Some(Qos::BestEffort), None));
        assert_eq!(w.container_id.as_deref(), Some(ID));
        let g = id(&format!("/kubepods/pod{UID}/{ID}"));
        assert_eq!(g.qos, Some(Qos::Guaranteed));
        // Not a pod: the QoS level only.
        let q = id("/kubepods/burstable/not-a-pod");
        assert_eq!((q.qos, q.pod_uid), (Some(Qos::Burstable), None));
        assert_eq!(q.path, b"/kubepods/burstable");
    }

    #[test]
    fn docker_podman_and_services() {
        let d = id(&format!("/system.slice/docker-{ID}.scope"));
        assert_eq!((d.runtime, d.service.clone()), (Some("docker"), None));
        let d = id(&format!("/docker/{ID}"));
        assert_eq!(d.runtime, Some("docker"));
        let p = id(&format!("/machine.slice/libpod-{ID}.scope/container"));
        assert_eq!(p.runtime, Some("podman"));
        assert_eq!(
            p.path,
            format!("/machine.slice/libpod-{ID}.scope").as_bytes()
        );
        let r = id(&format!(
            "/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope"
        ));
        assert_eq!(
            r.runtime,
            Some("podman"),
            "rootless: the container, not the user's service"
        );
        let s = id("/system.slice/nginx.service/worker");
        assert_eq!(s.service.as_deref(), Some("nginx.service"));
        assert_eq!(s.path, b"/system.slice/nginx.service");
        // A session: no layout, the depth.
        let u = id("/user.slice/user-1000.slice/session-3.scope");
        assert_eq!(
            u,
            Workload {
                path: b"/user.slice/user-1000.slice".to_vec(),
                ..Default::default()
            }
        );
        // A 64-hex name alone is not a container outside the drivers that use them.
        assert_eq!(id(&format!("/x/{ID}")).container_id, None);
        assert_eq!(id(".service").service, None);
    }

    #[test]
    fn bytes_that_are_not_utf8_keep_the_depth_rule() {
        // Below a workload: cut off with the rest.
        let w = identify(b"/system.slice/a.service/\xff", 2);
        assert_eq!(w.path, b"/system.slice/a.service");
        // Above any layout: the depth, as for every unknown path.
        let w = identify(b"/top\xff/kubepods/pod", 1);
        assert_eq!(w.path, b"/top\xff");
        assert_eq!(w.pod_uid, None);
    }

    #[test]
    fn labels_name_what_is_known_and_fall_back_to_ids() {
        let u = UID.replace('-', "_");
        let w = id(&format!(
            "/kubepods.slice/kubepods-pod{u}.slice/cri-containerd-{ID}.scope"
        ));
        let mut names = Names::default();
        let plain = |s: &str| s.to_string();
        let l = labels(&w, &names, plain);
        let keys: Vec<&str> = l.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            ["pod_uid", "qos", "container", "container_id", "runtime"]
        );
        assert_eq!(l[2].1, &ID[..12], "no name: the short id");
        names
            .pods
            .insert(UID.into(), ("shop".into(), "cart-7d9f".into()));
        names.containers.insert(ID.into(), "cart".into());
        let l = labels(&w, &names, plain);
        assert_eq!(l[0], ("namespace".into(), "shop".into()));
        assert_eq!(l[1], ("pod".into(), "cart-7d9f".into()));
        assert_eq!(l[4], ("container".into(), "cart".into()));
    }
}
