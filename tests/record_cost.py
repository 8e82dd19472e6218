"""Quick cost check: BPF run-time statistics (through a BPF_ENABLE_STATS fd, so the
kernel.bpf_stats_enabled sysctl is never touched) of one tracer process's programs over one
`perf bench sched pipe -l 200000` run pinned to CPU 0, with their translated and JIT sizes.
Needs root, perf, bpftool, taskset. One run, not a benchmark (`cargo xtask bench` is).

  sudo python3 tests/record_cost.py none                         # throughput untraced
  sudo python3 tests/record_cost.py target/debug/tracer run
  sudo python3 tests/record_cost.py target/debug/tracer record -o /tmp/t.pftrace
"""
import ctypes, os, re, signal, subprocess, sys, time, json
libc = ctypes.CDLL(None, use_errno=True)
attr = (ctypes.c_uint32 * 32)()
attr[0] = 0  # BPF_STATS_RUN_TIME
fd = libc.syscall(321, 32, ctypes.byref(attr), ctypes.sizeof(attr))
assert fd >= 0, os.strerror(ctypes.get_errno())

def progs(pid):
    out = {}
    for f in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            t = open(f"/proc/{pid}/fdinfo/{f}").read()
        except OSError:
            continue
        m = re.search(r"prog_id:\s*(\d+)", t)
        if m and "run_time_ns" in t:
            rt = int(re.search(r"run_time_ns:\s*(\d+)", t).group(1))
            rc = int(re.search(r"run_cnt:\s*(\d+)", t).group(1))
            out[int(m.group(1))] = (rt, rc)
    return out

def names(ids):
    n = {}
    for i in ids:
        j = json.loads(subprocess.run(["bpftool", "prog", "show", "id", str(i), "--json"], capture_output=True, text=True).stdout or "{}")
        n[i] = (j.get("name", "?"), j.get("bytes_xlated"), j.get("bytes_jited"))
    return n

def pipe(loops):
    o = subprocess.run(["taskset", "-c", "0", "perf", "bench", "sched", "pipe", "-l", str(loops)], capture_output=True, text=True).stdout
    return float(re.search(r"([\d.]+) ops/sec", o).group(1))

cmd = sys.argv[1:]
loops = 200000
base = pipe(loops) if cmd == ["none"] else None
if base:
    print("no tracer: ops/sec", base); sys.exit()
p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
t = time.time()
while time.time() - t < 30:
    ps = progs(p.pid)
    if ps and any(v[1] > 0 for v in ps.values()):
        break
    time.sleep(0.1)
time.sleep(0.5)
s0 = progs(p.pid)
cpu0 = sum(int(x) for x in open(f"/proc/{p.pid}/stat").read().rsplit(")",1)[1].split()[11:13])
ops = pipe(loops)
s1 = progs(p.pid)
cpu1 = sum(int(x) for x in open(f"/proc/{p.pid}/stat").read().rsplit(")",1)[1].split()[11:13])
nm = names(s1)
p.send_signal(signal.SIGINT); p.wait()
sw = [i for i in s1 if nm[i][0].startswith("sched_switch")][0]
cnt = s1[sw][1] - s0.get(sw, (0, 0))[1]
tot = sum(s1[i][0] - s0.get(i, (0, 0))[0] for i in s1)
print(" ".join(cmd[:2]), f"ops/sec {ops:.0f}", f"ns/switch {tot/cnt:.0f}", f"switches {cnt}", f"tracer CPU ticks {cpu1-cpu0}")
for i in sorted(s1):
    d = (s1[i][0] - s0.get(i, (0,0))[0], s1[i][1] - s0.get(i, (0,0))[1])
    if d[1]:
        print(f"   {nm[i][0]:<22} xlated {nm[i][1]} jited {nm[i][2]} ns/run {d[0]/d[1]:.0f} runs {d[1]}")
