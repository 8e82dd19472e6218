"""Decodes a trace written by `tracer record` with Perfetto's official generated protos
(the `perfetto` PyPI package) and rebuilds per-thread scheduling from the compact_sched
arrays, independently of the tracer's own code. Prints one JSON document.

Usage: python rebuild.py TRACE
"""
import json
import sys
import zlib
from collections import defaultdict

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

R, R_PLUS = 0, 0x100  # runnable: preempted (R+) or switched out still running (R)


def expand(trace):
    """The trace's packets, each `compressed_packets` replaced by the packets its zlib
    stream holds (a serialized Trace), as trace_processor reads them."""
    out = []
    for p in trace.packet:
        if p.HasField("compressed_packets"):
            inner = pb.Trace()
            inner.ParseFromString(zlib.decompress(p.compressed_packets))
            out.extend(inner.packet)
        else:
            out.append(p)
    return out


def main(path):
    trace = pb.Trace()
    with open(path, "rb") as f:
        data = f.read()
    # Strict: every byte must parse as Trace (no trailing garbage, no cut packet).
    trace.ParseFromString(data)
    packets = expand(trace)
    out = {
        "bytes": len(data),
        "packets": len(packets),
        "compressed_packets": sum(1 for p in trace.packet if p.HasField("compressed_packets")),
        "release": None,
        "stats": {},
        "lost_bundles": 0,
        "threads_named": {},
        "processes_named": {},
    }
    out["ftrace_events"] = []  # task events: {ts, cpu, common_pid, type, fields...}
    out["event_order_errors"] = 0
    switches = []  # (ts, cpu, next_pid, prev_state, comm)
    wakings = []  # (ts, cpu, pid, target_cpu)
    for p in packets:
        if p.HasField("system_info"):
            out["release"] = p.system_info.utsname.release
            out["num_cpus"] = p.system_info.num_cpus
        if p.HasField("ftrace_stats"):
            phase = pb.FtraceStats.Phase.Name(p.ftrace_stats.phase)
            out["stats"][phase] = {
                str(c.cpu): {"overrun": c.overrun, "read_events": c.read_events}
                for c in p.ftrace_stats.cpu_stats
            }
        if p.HasField("process_tree"):
            for t in p.process_tree.threads:
                out["threads_named"][str(t.tid)] = {"name": t.name, "tgid": t.tgid}
            for pr in p.process_tree.processes:
                out["processes_named"][str(pr.pid)] = list(pr.cmdline)
        if p.HasField("ftrace_events"):
            b = p.ftrace_events
            if b.lost_events:
                out["lost_bundles"] += 1
            last = 0
            for e in b.event:
                if e.timestamp < last:
                    out["event_order_errors"] += 1
                last = e.timestamp
                which = e.WhichOneof("event")
                # FtraceEvent.pid is ftrace's common_pid: the task running then.
                d = {"ts": e.timestamp, "cpu": b.cpu, "common_pid": e.pid, "type": which}
                for f, v in getattr(e, which).ListFields():
                    d[f.name] = v
                out["ftrace_events"].append(d)
            cs = b.compact_sched
            n = len(cs.switch_timestamp)
            for arr in (cs.switch_prev_state, cs.switch_next_pid, cs.switch_next_prio,
                        cs.switch_next_comm_index):
                assert len(arr) == n, "compact_sched switch arrays differ in length"
            ts = 0
            for i in range(n):
                ts += cs.switch_timestamp[i]
                switches.append((ts, b.cpu, cs.switch_next_pid[i], cs.switch_prev_state[i],
                                 cs.intern_table[cs.switch_next_comm_index[i]]))
            ts = 0
            for i in range(len(cs.waking_timestamp)):
                ts += cs.waking_timestamp[i]
                wakings.append((ts, b.cpu, cs.waking_pid[i], cs.waking_target_cpu[i]))
    # Per CPU: a switch's next task runs until the CPU's next switch, whose prev_state
    # is that task's. compact_sched has no prev pid: it is the previous switch's next.
    by_cpu = defaultdict(list)
    for s in switches:
        by_cpu[s[1]].append(s)
    th = defaultdict(lambda: {"on_cpu_ns": 0, "slices": 0, "runq_wait_ns": 0, "runq_waits": 0,
                              "switch_ins": 0, "preempted": 0, "blocked": 0})
    # Global timeline of (ts, order, kind, ...) for the waits.
    timeline = []
    order_errors = 0
    for cpu, ev in by_cpu.items():
        for i, s in enumerate(ev):
            if i and s[0] < ev[i - 1][0]:
                order_errors += 1
            th[s[2]]["switch_ins"] += 1
            timeline.append((s[0], 1, "in", s[2]))
            if i + 1 < len(ev):
                nxt = ev[i + 1]
                if s[2] != 0:
                    th[s[2]]["on_cpu_ns"] += nxt[0] - s[0]
                    th[s[2]]["slices"] += 1
                    state = nxt[3]
                    if state in (R, R_PLUS):
                        th[s[2]]["preempted"] += 1
                    else:
                        th[s[2]]["blocked"] += 1
                    timeline.append((nxt[0], 0, "out", s[2], state))
    for w in wakings:
        timeline.append((w[0], 2, "wake", w[2]))
    # At one timestamp: switch-out, then switch-in, then a wakeup (as they happen).
    timeline.sort(key=lambda e: (e[0], e[1]))
    runnable = {}
    for e in timeline:
        ts, _, kind, tid = e[:4]
        if tid == 0:
            continue
        if kind == "wake":
            # A waking of a thread already runnable (preempted and queued, or woken
            # before) does not restart its wait, as in the summary.
            runnable.setdefault(tid, ts)
        elif kind == "out":
            runnable.pop(tid, None)
            if e[4] in (R, R_PLUS):
                runnable[tid] = ts
        elif kind == "in":
            start = runnable.pop(tid, None)
            if start is not None:
                th[tid]["runq_wait_ns"] += ts - start
                th[tid]["runq_waits"] += 1
    out["switches"] = len(switches)
    out["wakings"] = len(wakings)
    out["switches_per_cpu"] = {str(c): len(v) for c, v in by_cpu.items()}
    out["order_errors"] = order_errors
    out["first_ts"] = min((s[0] for s in switches), default=0)
    out["last_ts"] = max((s[0] for s in switches), default=0)
    out["threads"] = {str(t): v for t, v in th.items()}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1])
