use super::*;

/// Builds BTF blobs by hand, in either byte order.
struct Builder {
    be: bool,
    types: Vec<u8>,
    strs: Vec<u8>,
    next_id: u32,
}

impl Builder {
    fn new(be: bool) -> Self {
        Builder {
            be,
            types: Vec::new(),
            strs: vec![0],
            next_id: 1,
        }
    }

    fn word(&self, v: u32, out: &mut Vec<u8>) {
        out.extend_from_slice(&if self.be {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        });
    }

    fn name(&mut self, s: &str) -> u32 {
        if s.is_empty() {
            return 0;
        }
        let off = self.strs.len() as u32;
        self.strs.extend_from_slice(s.as_bytes());
        self.strs.push(0);
        off
    }

    /// Adds a type record; returns its id.
    fn add(
        &mut self,
        name: &str,
        kind: u32,
        kflag: bool,
        vlen: u32,
        st: u32,
        extra: &[u32],
    ) -> u32 {
        let name_off = self.name(name);
        let info = (kind << 24) | vlen | if kflag { 1 << 31 } else { 0 };
        let mut rec = Vec::new();
        for w in [name_off, info, st].iter().chain(extra) {
            self.word(*w, &mut rec);
        }
        self.types.extend_from_slice(&rec);
        self.next_id += 1;
        self.next_id - 1
    }

    fn int(&mut self, name: &str, size: u32, bits: u32) -> u32 {
        self.add(name, KIND_INT, false, 0, size, &[bits])
    }

    /// `members`: (name, type id, offset word).
    fn compound(
        &mut self,
        kind: u32,
        name: &str,
        kflag: bool,
        size: u32,
        members: &[(&str, u32, u32)],
    ) -> u32 {
        let mut extra = Vec::new();
        for (n, t, off) in members {
            extra.extend([self.name(n), *t, *off]);
        }
        self.add(name, kind, kflag, members.len() as u32, size, &extra)
    }

    fn finish(&self) -> Vec<u8> {
        let mut out = Vec::new();
        if self.be {
            out.extend_from_slice(&BTF_MAGIC.to_be_bytes());
        } else {
            out.extend_from_slice(&BTF_MAGIC.to_le_bytes());
        }
        out.extend_from_slice(&[1, 0]);
        let tl = self.types.len() as u32;
        for w in [24, 0, tl, tl, self.strs.len() as u32] {
            self.word(w, &mut out);
        }
        out.extend_from_slice(&self.types);
        out.extend_from_slice(&self.strs);
        out
    }
}

/// struct task { int pid; union { long state; int __state; };
///               struct { int a; int tgid; }; char comm[16]; unsigned flags:3; };
/// typedef void (*btf_trace_x)(void *, int, struct task *);
/// struct kf { int lo:4; int hi:4; int whole; } with kind_flag bitfields.
fn sample(be: bool) -> Vec<u8> {
    let mut b = Builder::new(be);
    let int = b.int("int", 4, 32);
    let long = b.int("long int", 8, 64);
    let chr = b.int("char", 1, 8);
    let uint3 = b.int("unsigned int", 4, 3); // old-style bitfield encoding
    let pid_t = b.add("pid_t", KIND_TYPEDEF, false, 0, int, &[]);
    let cpid = b.add("", KIND_CONST, false, 0, pid_t, &[]);
    let anon_union = b.compound(
        KIND_UNION,
        "",
        false,
        8,
        &[("state", long, 0), ("__state", int, 0)],
    );
    let anon_struct = b.compound(
        KIND_STRUCT,
        "",
        false,
        8,
        &[("a", int, 0), ("tgid", cpid, 32)],
    );
    let arr = b.add("", KIND_ARRAY, false, 0, 0, &[chr, int, 16]);
    let task = b.compound(
        KIND_STRUCT,
        "task",
        false,
        48,
        &[
            ("pid", pid_t, 0),
            ("", anon_union, 64),
            ("", anon_struct, 128),
            ("comm", arr, 192),
            ("flags", uint3, 320),
        ],
    );
    let ptask = b.add("", KIND_PTR, false, 0, task, &[]);
    let void_ptr = b.add("", KIND_PTR, false, 0, 0, &[]);
    let proto = b.add(
        "",
        KIND_FUNC_PROTO,
        false,
        3,
        0,
        &[0, void_ptr, 0, int, 0, ptask],
    );
    let fptr = b.add("", KIND_PTR, false, 0, proto, &[]);
    b.add("btf_trace_x", KIND_TYPEDEF, false, 0, fptr, &[]);
    b.add("not_a_fn", KIND_TYPEDEF, false, 0, int, &[]);
    b.compound(
        KIND_STRUCT,
        "kf",
        true,
        8,
        &[
            ("lo", int, 4 << 24),
            ("hi", int, (4 << 24) | 4),
            ("whole", int, 32),
        ],
    );
    // Kinds the reader must skip over correctly.
    b.add("E", KIND_ENUM, false, 2, 4, &[0, 1, 0, 2]);
    b.add("E64", KIND_ENUM64, false, 1, 8, &[0, 1, 0]);
    b.add("d", KIND_DECL_TAG, false, 0, task, &[0xffff_ffff]);
    b.add("v", KIND_VAR, false, 0, int, &[1]);
    b.add(".data", KIND_DATASEC, false, 1, 4, &[22, 0, 4]);
    b.add("double", KIND_FLOAT, false, 0, 8, &[]);
    b.finish()
}

#[test]
fn members_through_anonymous_unions_and_typedefs() {
    for be in [false, true] {
        let btf = KernelBtf::from_bytes(&sample(be)).expect("parses");
        assert_eq!(btf.member_offset("task", "pid").ok(), Some(0));
        assert_eq!(btf.member_size("task", "pid").ok(), Some(4));
        assert_eq!(btf.member_offset("task", "__state").ok(), Some(8));
        assert_eq!(btf.member_size("task", "state").ok(), Some(8));
        assert_eq!(btf.member_offset("task", "tgid").ok(), Some(20));
        assert_eq!(btf.member_size("task", "tgid").ok(), Some(4));
        assert_eq!(btf.member_offset("task", "comm").ok(), Some(24));
        assert_eq!(btf.member_size("task", "comm").ok(), Some(16));
        assert!(btf.has_member("task", "tgid"));
        assert!(!btf.has_member("task", "nope"));
        assert!(!btf.has_member("nostruct", "pid"));
        assert_eq!(btf.typedef_proto_params("btf_trace_x"), Some(3));
        assert_eq!(btf.typedef_proto_params("not_a_fn"), None);
        assert_eq!(btf.typedef_proto_params("absent"), None);
    }
}

#[test]
fn bitfields_have_no_byte_offset() {
    let btf = KernelBtf::from_bytes(&sample(false)).expect("parses");
    // Old-style: INT with 3 bits.
    assert!(btf.has_member("task", "flags"));
    let e = btf.member_offset("task", "flags").unwrap_err().to_string();
    assert!(e.contains("task.flags") && e.contains("bitfield"), "{e}");
    assert!(btf.member_size("task", "flags").is_err());
    // kind_flag: bitfield size in the offset word.
    assert!(btf.member_offset("kf", "lo").is_err());
    assert!(btf.member_offset("kf", "hi").is_err());
    assert_eq!(btf.member_offset("kf", "whole").ok(), Some(4));
}

#[test]
fn missing_names_are_reported() {
    let btf = KernelBtf::from_bytes(&sample(false)).expect("parses");
    let e = btf.member_offset("task", "nope").unwrap_err().to_string();
    assert!(e.contains("task") && e.contains("nope"), "{e}");
    let e = btf.member_size("ghost", "pid").unwrap_err().to_string();
    assert!(e.contains("ghost"), "{e}");
}

#[test]
fn garbage_is_rejected_without_panicking() {
    let good = sample(false);
    assert!(KernelBtf::from_bytes(&[]).is_err());
    assert!(KernelBtf::from_bytes(&good[..10]).is_err());
    let mut bad_magic = good.clone();
    bad_magic[0] = 0;
    assert!(KernelBtf::from_bytes(&bad_magic)
        .unwrap_err()
        .contains("magic"));
    // Every truncation and every single-byte corruption must fail or parse, never panic.
    for n in 0..good.len() {
        let _ = KernelBtf::from_bytes(&good[..n]);
    }
    for i in 0..good.len() {
        for v in [0u8, 0x7f, 0xff] {
            let mut d = good.clone();
            d[i] = v;
            if let Ok(btf) = KernelBtf::from_bytes(&d) {
                let _ = btf.member_offset("task", "comm");
                let _ = btf.member_size("task", "comm");
                let _ = btf.typedef_proto_params("btf_trace_x");
            }
        }
    }
}

#[test]
fn type_cycles_terminate() {
    let mut b = Builder::new(false);
    // typedef a -> typedef b -> typedef a; struct s { a x; struct s-anon... }
    b.add("a", KIND_TYPEDEF, false, 0, 2, &[]);
    b.add("b", KIND_TYPEDEF, false, 0, 1, &[]);
    // An anonymous member whose type is the struct itself.
    b.compound(KIND_STRUCT, "s", false, 4, &[("x", 1, 0), ("", 3, 0)]);
    let btf = KernelBtf::from_bytes(&b.finish()).expect("parses");
    assert!(btf.member_size("s", "x").is_err());
    assert!(btf.member_offset("s", "y").is_err());
    assert_eq!(btf.typedef_proto_params("a"), None);
}

#[test]
fn self_referencing_anonymous_members_stay_cheap() {
    let mut b = Builder::new(false);
    // struct s { <anon s>; <anon s>; ... }: 2^64 paths without a visit budget.
    b.compound(
        KIND_STRUCT,
        "s",
        false,
        4,
        &[("", 1, 0), ("", 1, 0), ("", 1, 0)],
    );
    let btf = KernelBtf::from_bytes(&b.finish()).expect("parses");
    let t0 = std::time::Instant::now();
    assert!(!btf.has_member("s", "x"));
    assert!(t0.elapsed() < std::time::Duration::from_secs(5));
}

#[test]
fn missing_file_is_no_btf() {
    let e = KernelBtf::from_file(Path::new("/nonexistent/btf/vmlinux")).unwrap_err();
    assert!(matches!(e, TracerError::NoBtf(_)), "{e}");
}

#[test]
#[ignore = "needs the running kernel's BTF (/sys/kernel/btf/vmlinux); cargo xtask test runs it"]
fn live_vmlinux() {
    let path = Path::new("/sys/kernel/btf/vmlinux");
    let data = std::fs::read(path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (the tracer needs a kernel built with CONFIG_DEBUG_INFO_BTF)",
            path.display()
        )
    });
    let t0 = std::time::Instant::now();
    let btf = KernelBtf::from_bytes(&data).expect("vmlinux BTF parses");
    let took = t0.elapsed();
    eprintln!(
        "indexed {} bytes, {} types in {:?}",
        data.len(),
        btf.type_count(),
        took
    );
    for m in ["pid", "tgid", "comm", "__state"] {
        assert!(btf.has_member("task_struct", m), "task_struct.{m}");
    }
    let pid = btf.member_offset("task_struct", "pid").expect("pid");
    let tgid = btf.member_offset("task_struct", "tgid").expect("tgid");
    let comm = btf.member_offset("task_struct", "comm").expect("comm");
    assert!(
        pid > 0 && pid < tgid && tgid < 16384,
        "pid {pid} tgid {tgid}"
    );
    assert!(comm > tgid && comm < 16384, "comm {comm}");
    assert_eq!(btf.member_size("task_struct", "comm").ok(), Some(16));
    assert_eq!(btf.member_size("task_struct", "pid").ok(), Some(4));
    assert_eq!(btf.member_size("task_struct", "__state").ok(), Some(4));
    // The context pointer and the tracepoint's arguments: 5.18 added `prev_state`
    // to sched_switch's three, so the count follows from the kernel's version.
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("osrelease");
    let version: Vec<u32> = release
        .split(|c: char| !c.is_ascii_digit())
        .take(2)
        .map(|n| n.parse().expect("kernel version"))
        .collect();
    let want = if (version[0], version[1]) >= (5, 18) {
        5
    } else {
        4
    };
    assert_eq!(
        btf.typedef_proto_params("btf_trace_sched_switch"),
        Some(want),
        "kernel {}",
        release.trim()
    );
    assert!(btf.typedef_proto_params("btf_trace_sched_wakeup").is_some());
}

/// aya finds each wanted name of the stub at the id the full blob gives it.
fn stub_ids_agree(full: &[u8], names: &[(Named, &str)]) {
    let endian = aya::Endianness::default();
    let whole = aya::Btf::parse(full, endian).expect("aya parses the full blob");
    let small = KernelBtf::from_bytes(full).unwrap().id_stub(names).unwrap();
    for &(n, name) in names {
        let kind = match n {
            Named::Typedef => aya_obj::btf::BtfKind::Typedef,
            Named::Func => aya_obj::btf::BtfKind::Func,
        };
        let want = whole.id_by_type_name_kind(name, kind).ok();
        let got = small.id_by_type_name_kind(name, kind).ok();
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn the_id_stub_keeps_the_kernel_ids() {
    let mut b = Builder::new(cfg!(target_endian = "big"));
    let int = b.int("int", 4, 32);
    let proto = b.add("", KIND_FUNC_PROTO, false, 0, int, &[]);
    b.add("first_fn", KIND_FUNC, false, 0, proto, &[]);
    b.add("btf_trace_a", KIND_TYPEDEF, false, 0, int, &[]);
    b.add("E", KIND_ENUM, false, 2, 4, &[0, 1, 0, 2]);
    // A typedef and a function of one name: each is found by its own kind.
    b.add("both", KIND_TYPEDEF, false, 0, int, &[]);
    b.add("both", KIND_FUNC, false, 0, proto, &[]);
    b.add("bpf_iter_task", KIND_FUNC, false, 0, proto, &[]);
    let full = b.finish();
    stub_ids_agree(
        &full,
        &[
            (Named::Typedef, "btf_trace_a"),
            (Named::Func, "first_fn"),
            (Named::Typedef, "both"),
            (Named::Func, "both"),
            (Named::Func, "bpf_iter_task"),
            (Named::Func, "absent"),
        ],
    );
    // A name wanted twice, and a typedef name the kernel has twice (the first counts,
    // as in aya's own lookup).
    let mut b = Builder::new(cfg!(target_endian = "big"));
    let int = b.int("int", 4, 32);
    let proto = b.add("", KIND_FUNC_PROTO, false, 0, int, &[]);
    b.add("btf_trace_a", KIND_TYPEDEF, false, 0, int, &[]);
    b.add("f", KIND_FUNC, false, 0, proto, &[]);
    b.add("btf_trace_a", KIND_TYPEDEF, false, 0, int, &[]);
    b.add("g", KIND_FUNC, false, 0, proto, &[]);
    let twice = b.finish();
    stub_ids_agree(
        &twice,
        &[
            (Named::Typedef, "btf_trace_a"),
            (Named::Func, "g"),
            (Named::Typedef, "btf_trace_a"),
            (Named::Func, "g"),
            (Named::Func, "f"),
        ],
    );
    // Functions only (perf-sched's fentry hooks): every id is appended, none parsed.
    stub_ids_agree(
        &full,
        &[(Named::Func, "bpf_iter_task"), (Named::Func, "first_fn")],
    );
    // Nothing wanted: an empty but valid stub.
    assert!(KernelBtf::from_bytes(&full).unwrap().id_stub(&[]).is_ok());
}

#[test]
#[ignore = "needs the running kernel's BTF (/sys/kernel/btf/vmlinux); cargo xtask test runs it"]
fn the_id_stub_of_vmlinux_keeps_its_ids() {
    let full = std::fs::read("/sys/kernel/btf/vmlinux").expect("vmlinux BTF");
    stub_ids_agree(
        &full,
        &[
            (Named::Typedef, "btf_trace_sched_switch"),
            (Named::Typedef, "btf_trace_sched_wakeup"),
            (Named::Typedef, "btf_trace_sched_process_exec"),
            (Named::Func, "bpf_iter_task"),
            (Named::Func, "finish_task_switch"),
        ],
    );
}
