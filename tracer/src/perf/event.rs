//! perf's event syntax: a symbolic name or alias, or `rNNNN` (hex raw config), optionally
//! followed by `:` and modifiers, resolved to the attribute fields the kernel sees.
//!
//! Modifier rules follow current perf (6.12+): `u`, `k`, `h` exclude the privilege levels not
//! named; `G` / `H` exclude the host / the guest unless both are named; an event without
//! `G`/`H` excludes neither (older perf set `exclude_guest` by default; current perf only does
//! so for `perf kvm`). A letter given twice is rejected, as perf does.
use std::collections::BTreeSet;

use super::sys::{self, AttrFields};
use crate::error::TracerError;

const HW: u32 = sys::PERF_TYPE_HARDWARE;
const SW: u32 = sys::PERF_TYPE_SOFTWARE;

/// perf's symbolic names (and aliases) with their type and config.
const SYMBOLS: &[(&str, u32, u32)] = &[
    ("cpu-clock", SW, sys::PERF_COUNT_SW_CPU_CLOCK),
    ("task-clock", SW, sys::PERF_COUNT_SW_TASK_CLOCK),
    ("page-faults", SW, sys::PERF_COUNT_SW_PAGE_FAULTS),
    ("faults", SW, sys::PERF_COUNT_SW_PAGE_FAULTS),
    ("context-switches", SW, sys::PERF_COUNT_SW_CONTEXT_SWITCHES),
    ("cs", SW, sys::PERF_COUNT_SW_CONTEXT_SWITCHES),
    ("cpu-migrations", SW, sys::PERF_COUNT_SW_CPU_MIGRATIONS),
    ("migrations", SW, sys::PERF_COUNT_SW_CPU_MIGRATIONS),
    ("minor-faults", SW, sys::PERF_COUNT_SW_PAGE_FAULTS_MIN),
    ("major-faults", SW, sys::PERF_COUNT_SW_PAGE_FAULTS_MAJ),
    ("alignment-faults", SW, sys::PERF_COUNT_SW_ALIGNMENT_FAULTS),
    ("emulation-faults", SW, sys::PERF_COUNT_SW_EMULATION_FAULTS),
    ("cycles", HW, sys::PERF_COUNT_HW_CPU_CYCLES),
    ("cpu-cycles", HW, sys::PERF_COUNT_HW_CPU_CYCLES),
    ("instructions", HW, sys::PERF_COUNT_HW_INSTRUCTIONS),
    ("cache-references", HW, sys::PERF_COUNT_HW_CACHE_REFERENCES),
    ("cache-misses", HW, sys::PERF_COUNT_HW_CACHE_MISSES),
    ("branches", HW, sys::PERF_COUNT_HW_BRANCH_INSTRUCTIONS),
    (
        "branch-instructions",
        HW,
        sys::PERF_COUNT_HW_BRANCH_INSTRUCTIONS,
    ),
    ("branch-misses", HW, sys::PERF_COUNT_HW_BRANCH_MISSES),
    ("bus-cycles", HW, sys::PERF_COUNT_HW_BUS_CYCLES),
    (
        "stalled-cycles-frontend",
        HW,
        sys::PERF_COUNT_HW_STALLED_CYCLES_FRONTEND,
    ),
    (
        "idle-cycles-frontend",
        HW,
        sys::PERF_COUNT_HW_STALLED_CYCLES_FRONTEND,
    ),
    (
        "stalled-cycles-backend",
        HW,
        sys::PERF_COUNT_HW_STALLED_CYCLES_BACKEND,
    ),
    (
        "idle-cycles-backend",
        HW,
        sys::PERF_COUNT_HW_STALLED_CYCLES_BACKEND,
    ),
    ("ref-cycles", HW, sys::PERF_COUNT_HW_REF_CPU_CYCLES),
];

/// perf stat's default event list, in its order.
const DEFAULT_EVENTS: &[&str] = &[
    "task-clock",
    "context-switches",
    "cpu-migrations",
    "page-faults",
    "cycles",
    "instructions",
    "branches",
    "branch-misses",
];

/// One event as the user named it, resolved to what the kernel is asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSpec {
    /// Exactly as the user wrote it (surrounding blanks dropped): reports print this.
    pub name: String,
    pub(super) attr: AttrFields,
}

impl EventSpec {
    /// This event is (type, config), whatever its modifiers.
    pub(super) fn is(&self, type_: u32, config: u32) -> bool {
        self.attr.type_ == type_ && self.attr.config == u64::from(config)
    }

    /// task-clock and cpu-clock count nanoseconds; perf prints them in msec.
    pub fn is_clock(&self) -> bool {
        self.is(SW, sys::PERF_COUNT_SW_TASK_CLOCK) || self.is(SW, sys::PERF_COUNT_SW_CPU_CLOCK)
    }

    /// A kernel software event (clocks, switches, faults): countable on any machine,
    /// unlike hardware and raw PMU events.
    pub fn is_software(&self) -> bool {
        self.attr.type_ == SW
    }
}

/// Parses one perf event: a symbolic name or alias, or `rNNNN` (hex raw config), optionally
/// followed by `:` and modifiers from `u k h G H`.
pub fn parse_event(s: &str) -> Result<EventSpec, TracerError> {
    let name = s.trim();
    let unknown = || TracerError::UnknownEvent(name.to_string());
    let (base, mods) = match name.split_once(':') {
        Some((base, mods)) => (base, Some(mods)),
        None => (name, None),
    };
    let (type_, config) = resolve_base(base).ok_or_else(unknown)?;
    let mut attr = AttrFields {
        type_,
        config,
        ..AttrFields::default()
    };
    if let Some(mods) = mods {
        apply_modifiers(&mut attr, mods).ok_or_else(unknown)?;
    }
    Ok(EventSpec {
        name: name.to_string(),
        attr,
    })
}

fn resolve_base(base: &str) -> Option<(u32, u64)> {
    if let Some(&(_, type_, config)) = SYMBOLS.iter().find(|(n, _, _)| *n == base) {
        return Some((type_, config.into()));
    }
    let hex = base.strip_prefix('r')?;
    // perf's lexer takes `r` and hex digits only: no `0x`, no sign, no blanks.
    if hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(hex, 16)
        .ok()
        .map(|c| (sys::PERF_TYPE_RAW, c))
}

/// perf's translation of modifier letters into exclude bits; None for an unknown, repeated
/// or missing letter.
fn apply_modifiers(attr: &mut AttrFields, mods: &str) -> Option<()> {
    if mods.is_empty() {
        return None;
    }
    let mut seen = BTreeSet::new();
    for c in mods.chars() {
        if !"ukhGH".contains(c) || !seen.insert(c) {
            return None;
        }
    }
    let (u, k, h) = (
        seen.contains(&'u'),
        seen.contains(&'k'),
        seen.contains(&'h'),
    );
    if u || k || h {
        // Naming any privilege level means "only these": the others are excluded.
        attr.exclude_user = !u;
        attr.exclude_kernel = !k;
        attr.exclude_hv = !h;
    }
    let (g, host) = (seen.contains(&'G'), seen.contains(&'H'));
    if g || host {
        attr.exclude_host = !host;
        attr.exclude_guest = !g;
    }
    Some(())
}

/// Parses a list as given to `-e` (already split at commas).
pub fn parse_events(list: &[String]) -> Result<Vec<EventSpec>, TracerError> {
    list.iter().map(|s| parse_event(s)).collect()
}

/// perf stat's default set, in perf's order.
pub fn default_events() -> Vec<EventSpec> {
    DEFAULT_EVENTS
        .iter()
        .filter_map(|n| parse_event(n).ok())
        .collect()
}

/// task-clock and cpu-clock: they count nanoseconds (perf prints them in msec).
pub fn is_clock(spec: &EventSpec) -> bool {
    spec.is_clock()
}

/// The perf_event_attr fields this spec sets (type, config, exclude_user/kernel/hv/guest/host),
/// testable without a syscall.
pub fn attr_fields(spec: &EventSpec) -> AttrFields {
    spec.attr
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(s: &str) -> AttrFields {
        attr_fields(&parse_event(s).unwrap())
    }

    /// (modifiers, exclude_user, exclude_kernel, exclude_hv, exclude_guest, exclude_host)
    const MODIFIER_TABLE: &[(&str, bool, bool, bool, bool, bool)] = &[
        ("", false, false, false, false, false),
        (":u", false, true, true, false, false),
        (":k", true, false, true, false, false),
        (":h", true, true, false, false, false),
        (":uk", false, false, true, false, false),
        (":ku", false, false, true, false, false),
        (":uh", false, true, false, false, false),
        (":kh", true, false, false, false, false),
        (":ukh", false, false, false, false, false),
        (":G", false, false, false, false, true),
        (":H", false, false, false, true, false),
        (":GH", false, false, false, false, false),
        (":HG", false, false, false, false, false),
        (":uG", false, true, true, false, true),
        (":kH", true, false, true, true, false),
        (":ukGH", false, false, true, false, false),
    ];

    #[test]
    fn modifiers_set_exactly_the_right_exclude_bits() {
        for &(m, eu, ek, eh, eg, ehost) in MODIFIER_TABLE {
            for base in ["cycles", "task-clock", "r1a8"] {
                let f = fields(&format!("{base}{m}"));
                let want = (eu, ek, eh, eg, ehost);
                let got = (
                    f.exclude_user,
                    f.exclude_kernel,
                    f.exclude_hv,
                    f.exclude_guest,
                    f.exclude_host,
                );
                assert_eq!(got, want, "{base}{m}");
                // The encoded attribute carries exactly those bits besides the mode's own.
                let a = sys::encode_attr(
                    &f,
                    sys::OpenMode {
                        disabled: true,
                        ..sys::OpenMode::ENABLED
                    },
                );
                let got = (
                    a.exclude_user() == 1,
                    a.exclude_kernel() == 1,
                    a.exclude_hv() == 1,
                    a.exclude_guest() == 1,
                    a.exclude_host() == 1,
                );
                assert_eq!(got, want, "encoded {base}{m}");
                assert_eq!((a.disabled(), a.inherit()), (1, 0), "{base}{m}");
            }
        }
    }

    #[test]
    fn names_aliases_and_raw() {
        // Numbers from include/uapi/linux/perf_event.h, written out: the table above is
        // checked against the header, not against itself.
        let cases: &[(&str, u32, u64)] = &[
            ("task-clock", 1, 1),
            ("cpu-clock", 1, 0),
            ("context-switches", 1, 3),
            ("cs", 1, 3),
            ("cpu-migrations", 1, 4),
            ("migrations", 1, 4),
            ("page-faults", 1, 2),
            ("faults", 1, 2),
            ("minor-faults", 1, 5),
            ("major-faults", 1, 6),
            ("alignment-faults", 1, 7),
            ("emulation-faults", 1, 8),
            ("cycles", 0, 0),
            ("cpu-cycles", 0, 0),
            ("instructions", 0, 1),
            ("cache-references", 0, 2),
            ("cache-misses", 0, 3),
            ("branches", 0, 4),
            ("branch-instructions", 0, 4),
            ("branch-misses", 0, 5),
            ("bus-cycles", 0, 6),
            ("stalled-cycles-frontend", 0, 7),
            ("stalled-cycles-backend", 0, 8),
            ("ref-cycles", 0, 9),
            ("r1a8", 4, 0x1a8),
            ("r0", 4, 0),
            ("rC0", 4, 0xc0),
            ("rffffffffffffffff", 4, u64::MAX),
        ];
        for &(s, t, c) in cases {
            let spec = parse_event(s).unwrap();
            assert_eq!((spec.attr.type_, spec.attr.config), (t, c), "{s}");
            assert_eq!(spec.name, s);
            assert_eq!(spec.is_software(), t == 1, "{s}");
        }
        assert_eq!(parse_event(" cs:u ").unwrap().name, "cs:u");
    }

    #[test]
    fn unknown_names_and_modifiers_are_rejected() {
        for s in [
            "",
            "cycle",
            "Cycles",
            "r",
            "rxyz",
            "r0x1a",
            "r-1",
            "r1ffffffffffffffff",
            "task-clock:",
            "cycles:x",
            "cycles:p",
            "cycles:uu",
            "cycles:u:k",
            "cycles:U",
            ":u",
            "cycles :u",
            "cs:GG",
            "cs:ü",
        ] {
            match parse_event(s) {
                Err(TracerError::UnknownEvent(_)) => {}
                other => panic!("{s:?} gave {other:?}"),
            }
        }
        let list = vec!["cs".to_string(), "bogus".to_string()];
        assert!(matches!(parse_events(&list), Err(TracerError::UnknownEvent(n)) if n == "bogus"));
        assert_eq!(
            parse_events(&["cs".into(), "cycles:u".into()])
                .unwrap()
                .len(),
            2
        );
    }

    #[test]
    fn default_set_is_perfs() {
        let names: Vec<String> = default_events().into_iter().map(|e| e.name).collect();
        assert_eq!(names, DEFAULT_EVENTS);
    }
}
