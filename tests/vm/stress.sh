# The guest's side of `cargo xtask vm-test --stress LOAD`: for vmtest.secs seconds of guest
# uptime, attach something to sched_switch and detach it again, over and over, while a
# workload switches on both CPUs. It prints one line a cycle on the results port; the host
# reads any crash from the kernel console. LOAD:
#   tracer   `tracer run -d 1s`, cycling the probe modes that attach to sched_switch
#            (tp-btf, raw-tp, tracepoint), as the checks' steps do
#   runqlat  libbpf-tools `runqlat 1 1` (tp_btf sched_wakeup, sched_wakeup_new, sched_switch)
#   tracefs  the sched_switch trace event enabled for 0.2 s, then disabled (no BPF at all)
#   idle     the workloads alone: nothing attaches (the baseline)
W=/bin/tracer-workload
LOAD=$(sed -n 's/.*vmtest\.stress=\([^ ]*\).*/\1/p' /proc/cmdline)
SECS=$(sed -n 's/.*vmtest\.secs=\([0-9]*\).*/\1/p' /proc/cmdline)
SECS=${SECS:-60}
EVENT=/sys/kernel/tracing/events/sched/sched_switch/enable

up() { cut -d. -f1 /proc/uptime; }

[ "$LOAD" = tracefs ] && mount -t tracefs tracefs /sys/kernel/tracing
# Switches on both CPUs (about 300 a second a thread) while leaving most of the guest's
# time to the load itself.
$W busy-sleep --threads 2 --work-ms 1 --sleep-ms 2 --duration-ms 3600000 >/dev/null 2>&1 &

echo "@@vmtest stress $LOAD $(uname -r) start=$(up)"
end=$(($(up) + SECS))
n=0
while [ "$(up)" -lt "$end" ]; do
    case $LOAD in
    tracer)
        case $((n % 3)) in
        0) mode=tp-btf ;;
        1) mode=raw-tp ;;
        *) mode=tracepoint ;;
        esac
        tracer run --probe "$mode" -d 1s >/tmp/out 2>&1
        ;;
    runqlat) runqlat 1 1 >/tmp/out 2>&1 ;;
    tracefs)
        { echo 1 >"$EVENT" && sleep 0.2 && echo 0 >"$EVENT" && sleep 0.05; } >/tmp/out 2>&1
        ;;
    idle) sleep 1 >/tmp/out 2>&1 ;;
    *)
        echo "@@vmtest stress: unknown load '$LOAD'"
        exit 2
        ;;
    esac
    rc=$?
    n=$((n + 1))
    echo "@@vmtest cycle $n rc=$rc t=$(cut -d' ' -f1 /proc/uptime)"
    # A failing cycle's output, once: the host reports it (a load that never attached
    # proves nothing).
    if [ $rc -ne 0 ] && [ -z "$failed" ]; then
        failed=1
        sed 's/^/@@vmtest out /' /tmp/out | head -n 20
    fi
done
[ "$LOAD" = tracefs ] && echo "trace events seen: $(grep -c sched_switch /sys/kernel/tracing/trace)"
echo "@@vmtest stress end cycles=$n"
