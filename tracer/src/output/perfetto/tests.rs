//! The trace writer's unit tests: packets decoded back with the same prost messages.
use super::*;
use prost::Message as _;

fn sw(ts: u64, cpu: u32, prev: u32, next: u32, comm: &str) -> Switch {
    Switch {
        ts,
        cpu,
        prev_tid: prev,
        prev_state: 1,
        preempt: false,
        repaired: false,
        edge: false,
        chained: true,
        runtime: None,
        next_tid: next,
        next_tgid: next,
        next_prio: 120,
        next_comm: comm.into(),
    }
}

/// Splits a trace into its packets (Trace.packet, field 1, length-delimited).
fn packets(mut b: &[u8]) -> Vec<pb::TracePacket> {
    let mut v = Vec::new();
    while !b.is_empty() {
        let key = prost::encoding::decode_varint(&mut b).unwrap();
        assert_eq!(key, (1 << 3) | 2, "Trace.packet, length-delimited");
        let len = prost::encoding::decode_varint(&mut b).unwrap() as usize;
        v.push(pb::TracePacket::decode(&b[..len]).unwrap());
        b = &b[len..];
    }
    v
}

#[test]
fn bundles_are_delta_encoded_per_cpu_and_names_interned() {
    let facts = SystemFacts {
        release: "6.18.0".into(),
        num_cpus: 2,
        ..Default::default()
    };
    let mut w = TraceWriter::new(Vec::new(), &facts, 2, 0).unwrap();
    w.switch(sw(1000, 0, 0, 10, "a"));
    w.switch(sw(1500, 0, 10, 11, "b"));
    w.switch(sw(2100, 0, 11, 10, "a"));
    w.switch(sw(1200, 1, 0, 12, "c"));
    w.flush(&[0, 3]).unwrap();
    w.switch(sw(2500, 0, 10, 0, "swapper/0"));
    let written = w.finish(&[0, 3], &[4, 1], None).unwrap();
    let out = w.into_inner();
    assert_eq!(written.switches, 5);
    assert_eq!(written.bytes, out.len() as u64);
    let p = packets(&out);
    assert_eq!(
        p[0].system_info
            .as_ref()
            .unwrap()
            .utsname
            .as_ref()
            .unwrap()
            .release
            .as_deref(),
        Some("6.18.0")
    );
    assert_eq!(p[1].ftrace_stats.as_ref().unwrap().phase, Some(1));
    let tree = p[2].process_tree.as_ref().unwrap();
    assert_eq!(tree.threads.len(), 3);
    assert_eq!(p[2].timestamp, Some(1000));
    let b0 = p[3].ftrace_events.as_ref().unwrap();
    assert_eq!(b0.cpu, Some(0));
    let cs = b0.compact_sched.as_ref().unwrap();
    assert_eq!(cs.switch_timestamp, vec![1000, 500, 600]);
    assert_eq!(cs.intern_table, vec!["a", "b"]);
    assert_eq!(cs.switch_next_comm_index, vec![0, 1, 0]);
    let b1 = p[4].ftrace_events.as_ref().unwrap();
    assert_eq!((b1.cpu, b1.lost_events), (Some(1), Some(true)));
    // The second bundle of CPU 0 starts absolute again, after the first.
    let b0b = p[5].ftrace_events.as_ref().unwrap();
    assert_eq!(
        b0b.compact_sched.as_ref().unwrap().switch_timestamp,
        vec![2500]
    );
    assert_eq!(b0b.lost_events, None);
    let end = p[6].ftrace_stats.as_ref().unwrap();
    assert_eq!(end.phase, Some(2));
    assert_eq!(end.cpu_stats[1].overrun, Some(3));
    assert_eq!(end.cpu_stats[0].read_events, Some(4));
}

#[test]
fn a_repaired_switch_is_counted_and_marked() {
    let mut w = TraceWriter::new(Vec::new(), &SystemFacts::default(), 1, 0).unwrap();
    w.switch(sw(1, 0, 0, 10, "a"));
    let mut r = sw(3, 0, 10, 11, "b");
    r.repaired = true;
    w.switch(r);
    w.switch(sw(5, 0, 11, 0, "swapper/0"));
    assert_eq!(w.written().gaps, 1);
    assert_eq!(
        w.gap_tids().iter().copied().collect::<Vec<_>>(),
        vec![10, 11]
    );
    w.finish(&[], &[], None).unwrap();
    let b = packets(&w.into_inner())
        .into_iter()
        .find_map(|p| p.ftrace_events)
        .unwrap();
    assert_eq!(b.lost_events, Some(true));
    assert_eq!(b.compact_sched.unwrap().switch_timestamp, vec![1, 2, 2]);
}

#[test]
fn a_thread_is_named_again_only_when_renamed() {
    let mut w = TraceWriter::new(Vec::new(), &SystemFacts::default(), 1, 0).unwrap();
    w.switch(sw(1, 0, 0, 10, "a"));
    w.switch(sw(2, 0, 10, 10, "a"));
    w.flush(&[]).unwrap();
    w.switch(sw(3, 0, 10, 10, "renamed"));
    w.finish(&[], &[], None).unwrap();
    let out = w.into_inner();
    let trees: Vec<_> = packets(&out)
        .into_iter()
        .filter_map(|p| p.process_tree)
        .collect();
    assert_eq!(trees.len(), 2);
    assert_eq!(trees[0].threads.len(), 1);
    assert_eq!(trees[1].threads[0].name.as_deref(), Some("renamed"));
}

#[test]
fn task_events_are_ftrace_events_in_order_and_rename_the_thread() {
    let mut w = TraceWriter::new(Vec::new(), &SystemFacts::default(), 1, 0).unwrap();
    let ev = |ts, change| TaskEv {
        ts,
        cpu: 0,
        tid: 11,
        tgid: 10,
        actor_tid: 10,
        prio: 120,
        comm: "new".into(),
        change,
    };
    w.switch(sw(1, 0, 0, 11, "old"));
    w.task(ev(
        5,
        TaskChange::Migrate {
            orig_cpu: 1,
            dest_cpu: 0,
        },
    ));
    w.task(ev(
        3,
        TaskChange::Rename {
            old_comm: "old".into(),
        },
    ));
    w.finish(&[], &[], None).unwrap();
    assert_eq!(w.written().tasks, 2);
    let p = packets(&w.into_inner());
    let tree = p.iter().find_map(|p| p.process_tree.clone()).unwrap();
    let names: Vec<_> = tree
        .threads
        .iter()
        .map(|t| t.name.clone().unwrap())
        .collect();
    assert_eq!(names, vec!["old", "new"]);
    let b = p.into_iter().find_map(|p| p.ftrace_events).unwrap();
    let ts: Vec<_> = b.event.iter().map(|e| e.timestamp.unwrap()).collect();
    assert_eq!(ts, vec![3, 5]);
    let r = b.event[0].task_rename.as_ref().unwrap();
    assert_eq!(
        (r.pid, r.oldcomm.as_deref(), r.newcomm.as_deref()),
        (Some(11), Some("old"), Some("new"))
    );
    let m = b.event[1].sched_migrate_task.as_ref().unwrap();
    assert_eq!((m.orig_cpu, m.dest_cpu), (Some(1), Some(0)));
}

fn wake(ts: u64, cpu: u32, tid: u32) -> Wakeup {
    Wakeup {
        ts,
        cpu,
        tid,
        tgid: tid,
        waker_tid: 0,
        target_cpu: 1,
        prio: 120,
        comm: "w".into(),
        new: false,
    }
}

/// CPU `cpu`'s switch timestamps (absolute) and wakings (absolute) over all bundles.
fn times(out: &[u8], cpu: u32) -> (Vec<u64>, Vec<u64>) {
    let (mut s, mut w) = (Vec::new(), Vec::new());
    for b in packets(out).into_iter().filter_map(|p| p.ftrace_events) {
        if b.cpu != Some(cpu) {
            continue;
        }
        let cs = b.compact_sched.unwrap();
        let mut t = 0;
        for d in cs.switch_timestamp {
            t = if t == 0 { d } else { t + d };
            s.push(t);
        }
        let mut t = 0;
        for d in cs.waking_timestamp {
            t = if t == 0 { d } else { t + d };
            w.push(t);
        }
    }
    (s, w)
}

#[test]
fn boundaries_follow_the_runtime_and_a_waking_stays_before_its_switch_in() {
    // Woken on CPU 0 at 1_000, charged on CPU 1 from 980 (its enqueue: the idle CPU's
    // clock update was skipped), switched in at 3_000, out at 10_000 after 9_020.
    let mut w = TraceWriter::new(Vec::new(), &SystemFacts::default(), 2, 1_000_000).unwrap();
    w.switch(sw(500, 1, 7, 0, "swapper/1"));
    w.wakeup(wake(1_000, 0, 7));
    w.switch(sw(3_000, 1, 0, 7, "a"));
    let mut out = sw(10_000, 1, 7, 0, "swapper/1");
    out.runtime = Some(9_020);
    w.switch(out);
    w.finish(&[], &[], None).unwrap();
    let out = w.into_inner();
    // All moved onto the boot clock by the offset.
    let (s, _) = times(&out, 1);
    assert_eq!(s, vec![1_000_500, 1_000_980, 1_010_000]);
    let (_, wk) = times(&out, 0);
    assert_eq!(wk, vec![1_000_979], "the waking just before the boundary");
}

#[test]
fn the_trace_ends_at_the_close_with_each_cpus_task_switched_out() {
    let mut w = TraceWriter::new(Vec::new(), &SystemFacts::default(), 2, 0).unwrap();
    w.switch(sw(100, 0, 0, 10, "a"));
    w.switch(sw(200, 1, 11, 0, "swapper/1"));
    let written = w.finish(&[], &[], Some(900)).unwrap();
    assert_eq!((written.switches, written.window_cuts), (3, 1));
    let out = w.into_inner();
    assert_eq!(times(&out, 0).0, vec![100, 900]);
    assert_eq!(times(&out, 1).0, vec![200], "an idle CPU needs no cut");
    let b = packets(&out)
        .into_iter()
        .filter_map(|p| p.ftrace_events)
        .rfind(|b| b.cpu == Some(0))
        .unwrap();
    let cs = b.compact_sched.unwrap();
    assert_eq!(cs.switch_next_pid.last(), Some(&0));
    assert_eq!(
        cs.switch_prev_state.last(),
        Some(&0),
        "R: it was still running"
    );
}

/// A disk that takes `room` more bytes, then says it is full.
struct SmallDisk {
    data: Vec<u8>,
    room: usize,
}

impl Write for SmallDisk {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if self.room == 0 {
            return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
        }
        let n = b.len().min(self.room);
        self.data.extend_from_slice(&b[..n]);
        self.room -= n;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_failed_write_counts_nothing_of_it_and_the_stats_still_end_the_trace() {
    let disk = SmallDisk {
        data: Vec::new(),
        room: usize::MAX,
    };
    let mut w = TraceWriter::new(disk, &SystemFacts::default(), 1, 0).unwrap();
    let start = w.written();
    w.get_mut().room = 10;
    w.switch(sw(1, 0, 0, 10, "a"));
    w.switch(sw(2, 0, 10, 11, "b"));
    assert!(w.flush(&[0]).is_err());
    assert_eq!(w.written(), start, "nothing of the failed write is counted");
    // The caller cuts the file back to what was written, which frees the room.
    let good = w.written().bytes as usize;
    let d = w.get_mut();
    d.data.truncate(good);
    d.room = 1000;
    w.end_after_failure(&[3], &[2]).unwrap();
    let out = w.into_inner().data;
    let p = packets(&out);
    assert!(p.iter().all(|p| p.ftrace_events.is_none()));
    let end = p.last().unwrap().ftrace_stats.as_ref().unwrap();
    assert_eq!((end.phase, end.cpu_stats[0].overrun), (Some(2), Some(3)));
}

/// A compressed trace is the plain one with each flush's packets in one
/// `compressed_packets` zlib stream: expanded, the very same packets, and smaller.
#[test]
fn a_compressed_trace_expands_to_the_plain_one() {
    let write = |compress: bool| {
        let mut w = TraceWriter::new(Vec::new(), &SystemFacts::default(), 1, 0)
            .unwrap()
            .compressed(compress);
        for i in 0..2000u64 {
            let (prev, next) = if i % 2 == 0 { (10, 11) } else { (11, 10) };
            w.switch(sw(1000 + i * 13_000, 0, prev, next, "pipe"));
        }
        w.flush(&[0]).unwrap();
        let written = w.finish(&[0], &[2000], None).unwrap();
        (written, w.into_inner())
    };
    let (pw, plain) = write(false);
    let (cw, small) = write(true);
    assert_eq!(cw.bytes, small.len() as u64);
    assert_eq!(cw.switches, pw.switches);
    let expanded: Vec<pb::TracePacket> = packets(&small)
        .into_iter()
        .flat_map(|p| match p.compressed_packets {
            Some(z) => {
                let mut raw = Vec::new();
                std::io::Read::read_to_end(&mut flate2::read::ZlibDecoder::new(&z[..]), &mut raw)
                    .unwrap();
                packets(&raw)
            }
            None => vec![p],
        })
        .collect();
    assert_eq!(expanded, packets(&plain));
    assert!(
        small.len() * 3 < plain.len(),
        "{} bytes compressed, {} plain",
        small.len(),
        plain.len()
    );
}

/// A thread the summary lists that no event named (asleep the whole window) is named in
/// the last process tree; one an event named is not named again.
#[test]
fn threads_no_event_named_are_named_at_the_end() {
    let facts = SystemFacts::default();
    let mut w = TraceWriter::new(Vec::new(), &facts, 1, 0).unwrap();
    w.switch(sw(1000, 0, 0, 10, "a"));
    w.flush(&[0]).unwrap();
    w.name_threads(5000, &[(10, 10, "a".into()), (7, 7, "kthreadd".into())]);
    w.finish(&[0], &[1], None).unwrap();
    let trees: Vec<pb::ProcessTree> = packets(&w.into_inner())
        .into_iter()
        .filter_map(|p| p.process_tree)
        .collect();
    assert_eq!(trees.len(), 2, "{trees:?}");
    let last = &trees[1];
    assert_eq!(last.threads.len(), 1, "{last:?}");
    assert_eq!(last.threads[0].tid, Some(7));
    assert_eq!(last.threads[0].name.as_deref(), Some("kthreadd"));
    assert_eq!(last.processes[0].pid, Some(7));
}
