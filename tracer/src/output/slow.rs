//! `tracer slow` lines: text like libbpf-tools `runqslower -P` (time, comm, TID, wait in
//! µs, the previous task), with the CPU, PID, how the thread became runnable and how long
//! the previous task had run; or one JSON object per line.
use crate::model::{
    events::{Slow, SlowKind},
    words,
};

/// The header of the text output.
pub fn header(kind: SlowKind) -> String {
    let what = match kind {
        SlowKind::Runq => "LAT(us)",
        SlowKind::OffCpu => "OFF(us)",
    };
    format!(
        "{:<12} {:>3} {:<16} {:>7} {:>7} {:>10} {:<9} {:<16} {:>8} {:>12}",
        "TIME", "CPU", "COMM", "PID", "TID", what, "HOW", "PREV COMM", "PREV TID", "PREV RAN(us)"
    )
}

/// Local wall-clock time of day with milliseconds.
pub fn local_time(unix_ns: u64) -> String {
    // time_t by inference: musl deprecates the alias.
    let secs = (unix_ns / 1_000_000_000).try_into().unwrap_or(0);
    // SAFETY: tm is plain data (integers and a pointer), so all-zero is valid.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: localtime_r writes the tm it is given and reads only `secs`.
    if unsafe { libc::localtime_r(&secs, &mut tm) }.is_null() {
        return "?".into();
    }
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
        (unix_ns / 1_000_000) % 1000
    )
}

/// One text line; `unix_ns` is the event's time on the wall clock.
pub fn text_line(s: &Slow, unix_ns: u64) -> String {
    format!(
        "{:<12} {:>3} {:<16} {:>7} {:>7} {:>10} {:<9} {:<16} {:>8} {:>12}",
        local_time(unix_ns),
        s.cpu,
        words::escape(&s.comm),
        s.tgid,
        s.tid,
        s.wait_ns / 1000,
        s.how.name(),
        if s.prev_tid == 0 {
            "[idle]".to_string()
        } else {
            words::escape(&s.prev_comm)
        },
        s.prev_tid,
        s.prev_ran_ns / 1000,
    )
}

/// One JSON Lines record as printed: names with C1 or bidi controls escaped as
/// `\uXXXX` (serde_json leaves them raw, and they reach terminals through `jq`-less
/// pipes as they are).
pub fn json_text(s: &Slow, unix_ns: u64) -> String {
    crate::output::json::terminal_safe(json_line(s, unix_ns).to_string())
}

/// One JSON object (a JSON Lines record).
pub fn json_line(s: &Slow, unix_ns: u64) -> serde_json::Value {
    serde_json::json!({
        "time_unix_ns": unix_ns,
        "monotonic_ns": s.ts_mono,
        "kind": match s.kind { SlowKind::Runq => "runq", SlowKind::OffCpu => "off_cpu" },
        "cpu": s.cpu,
        "pid": s.tgid,
        "tid": s.tid,
        "comm": s.comm,
        "wait_ns": s.wait_ns,
        "how": s.how.name(),
        "prev_tid": s.prev_tid,
        "prev_comm": s.prev_comm,
        "prev_ran_ns": s.prev_ran_ns,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::events::How;

    #[test]
    fn lines_carry_every_field() {
        let s = Slow {
            ts_mono: 5,
            kind: SlowKind::Runq,
            cpu: 1,
            tid: 101,
            tgid: 100,
            comm: "worker".into(),
            wait_ns: 12_345_678,
            how: How::Preempted,
            prev_tid: 7,
            prev_comm: "hog".into(),
            prev_ran_ns: 4_000_000,
        };
        let t = text_line(&s, 0);
        for want in ["worker", "100", "101", "12345", "preempted", "hog", "4000"] {
            assert!(t.contains(want), "{want} in {t}");
        }
        assert_eq!(header(SlowKind::Runq).split_whitespace().count(), 13);
        let j = json_line(&s, 9);
        assert_eq!(j["wait_ns"], 12_345_678);
        assert_eq!(j["how"], "preempted");
        assert_eq!(j["prev_comm"], "hog");
        assert_eq!(j["time_unix_ns"], 9);
        let evil = Slow {
            comm: "evil\u{202e}gpj\u{9b}".into(),
            ..s
        };
        let line = json_text(&evil, 9);
        assert!(line.contains("evil\\u202egpj\\u009b"), "{line}");
        assert!(
            !line.chars().any(crate::model::words::needs_escape),
            "{line}"
        );
        let back: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(back["comm"], "evil\u{202e}gpj\u{9b}");
    }
}
