#!/bin/bash
# How docs/serve-prometheus.png was made: a pod in the kubelet's systemd-driver layout
# (cgroup v2 for the workload labels, v1 cpu with a 10% CFS quota on the pod slice as the
# kubelet sets it) under load, a real `tracer serve`, Debian's Prometheus scraping it every
# second, and its graph page in headless Chromium. As root, from the repository, after
# `cargo xtask build` and `cargo build -p tracer-tests --bin tracer-workload`; hybrid cgroups
# (v1 cpu at /sys/fs/cgroup/cpu, v2 at /sys/fs/cgroup/unified). WAIT=seconds of load.
set -eu
B=${TRACER_BIN_DIR:-target/debug}
OBJ=${TRACER_EBPF_DIR:-target/bpfel-unknown-none/release}
D=/tmp/shot; rm -rf $D; mkdir -p $D/logs/pods $D/logs/containers $D/prom
UID1=3f1e8a52-7c1d-4e8b-9a61-2b5f0c4d9e10; CID=$(printf 'a%.0s' {1..8})1b2c3d4e5f60718293a4b5c6d7e8f9012345678901234567890abcdef1234
REL="kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod${UID1//-/_}.slice/cri-containerd-$CID.scope"
V2=/sys/fs/cgroup/unified/$REL; V1=/sys/fs/cgroup/cpu/$REL
mkdir -p $V2 $V1
echo 10000 > $(dirname $V1)/cpu.cfs_quota_us   # the pod: 10% of a CPU, as the kubelet sets the pod slice
echo 10000 > $V1/cpu.cfs_quota_us
mkdir -p "$D/logs/pods/shop_cart-7d9f_$UID1"
touch "$D/logs/containers/cart-7d9f_shop_web-$CID.log"
cat > $D/prom.yml <<Y
global: {scrape_interval: 1s, evaluation_interval: 1s}
scrape_configs:
  - job_name: tracer
    honor_labels: true
    static_configs: [{targets: ['127.0.0.1:9871']}]
Y
TRACER_EBPF_DIR=$OBJ $B/tracer serve --listen 127.0.0.1:9871 --kubelet-logs $D/logs > $D/serve.log 2>&1 &
SERVE=$!
prometheus --config.file=$D/prom.yml --storage.tsdb.path=$D/prom --web.listen-address=127.0.0.1:9099 > $D/prom.log 2>&1 &
PROM=$!
sleep 3
# The pod's load: 4 threads working 3 ms / sleeping 2 ms under a 10% quota.
( echo $BASHPID > $V2/cgroup.procs; echo $BASHPID > $V1/cgroup.procs; exec $B/tracer-workload busy-sleep --threads 4 --work-ms 3 --sleep-ms 2 --duration-ms 150000 --out /dev/null ) &
LOAD=$!
sleep ${WAIT:-150}
Q1='histogram_quantile(0.99, sum by (pod, le) (rate(tracer_cgroup_runq_latency_seconds_bucket{pod!=""}[30s])))'
Q2='sum by (pod) (rate(tracer_cgroup_cpu_throttled_seconds_total{pod!=""}[30s]))'
enc() { python3 -c 'import sys,urllib.parse;print(urllib.parse.quote(sys.argv[1]))' "$1"; }
URL="http://127.0.0.1:9099/graph?g0.expr=$(enc "$Q1")&g0.tab=0&g0.range_input=2m&g1.expr=$(enc "$Q2")&g1.tab=0&g1.range_input=2m"
curl -s "http://127.0.0.1:9099/api/v1/query?query=$(enc "$Q1")" > $D/q1.json
curl -s "http://127.0.0.1:9099/api/v1/query?query=$(enc "$Q2")" > $D/q2.json
chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking --disable-component-update --disable-sync --user-data-dir=$D/chrome --window-size=1400,1500 --virtual-time-budget=15000 --screenshot=$D/serve-prometheus.png "$URL" > $D/chrome.log 2>&1 || true
kill $LOAD $SERVE $PROM 2>/dev/null || true
sleep 1
echo 1 > $V2/cgroup.kill 2>/dev/null || true
sleep 0.5
for root in /sys/fs/cgroup/unified /sys/fs/cgroup/cpu; do
    find $root/kubepods.slice -depth -type d -exec rmdir {} \; 2>/dev/null || true
done
echo "$URL" > $D/url.txt
ls -la $D/serve-prometheus.png
