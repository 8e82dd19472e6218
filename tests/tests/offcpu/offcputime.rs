//! Against libbpf-tools' offcputime on the same workload at the same time: the same top
//! kernel stack for each thread, and totals within 5%.
use std::{collections::BTreeMap, process::Command};

use serde_json::Value;
use tracer_tests::{require_root, scratch, tracer_bin};

use super::{within, workload};

/// offcputime's output: blocks of kernel frames (leaf first), `-  comm (tid)`, the time
/// in microseconds.
fn parse_offcputime(s: &str) -> Vec<(String, Vec<String>, u64)> {
    let mut v = Vec::new();
    for block in s.split("\n\n") {
        let lines: Vec<&str> = block
            .lines()
            .map(|l| l.trim())
            .filter(|l| !l.is_empty())
            .collect();
        let Some(i) = lines.iter().position(|l| l.starts_with("- ")) else {
            continue;
        };
        let comm = lines[i][1..]
            .trim()
            .rsplit_once(" (")
            .map(|(c, _)| c.trim().to_string());
        let Some(us) = lines.get(i + 1).and_then(|l| l.parse::<u64>().ok()) else {
            continue;
        };
        let frames = lines[..i]
            .iter()
            .filter(|f| {
                !f.starts_with('[') && !f.starts_with("bpf_") && !f.starts_with("__traceiter")
            })
            .map(|f| f.to_string())
            .collect();
        v.push((comm.unwrap_or_default(), frames, us));
    }
    v
}

#[test]
#[ignore = "needs root"]
fn agrees_with_offcputime() {
    require_root();
    let w = workload(true);
    let t = scratch("offcpu-vs");
    // The waits begin after both tools have attached (start-up takes up to a second or
    // two on a loaded 2-CPU machine) and end before they stop.
    let mut child = Command::new(&w)
        .args([
            "--ms",
            "20",
            "--rounds",
            "40",
            "--delay-ms",
            "2500",
            "--out",
        ])
        .arg(&t)
        .spawn()
        .unwrap();
    let pid = child.id().to_string();
    // Its stack map keeps no REUSE_STACKID: a stack whose hash bucket another took is
    // refused every time ("[Missed Kernel Stack]"; at the default 1024 buckets it lost all
    // of w-futex's 811 ms once). 65536 buckets make that rare.
    let oc = Command::new("offcputime")
        .args(["--stack-storage-size", "65536", "-p", &pid, "7"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("offcputime (apt package libbpf-tools; cargo xtask test installs it)");
    let ours = Command::new(tracer_bin())
        .args(["offcpu", "--json", "-d", "7", "-p", &pid])
        .output()
        .unwrap();
    let oc = oc.wait_with_output().unwrap();
    child.wait().unwrap();
    assert!(
        ours.status.success(),
        "{}",
        String::from_utf8_lossy(&ours.stderr)
    );
    let doc: Value = serde_json::from_slice(&ours.stdout).unwrap();
    let theirs = parse_offcputime(&String::from_utf8_lossy(&oc.stdout));
    for comm in ["w-futex", "w-pipe", "w-sleep", "w-spin0", "w-spin1"] {
        let mut mine: BTreeMap<Vec<String>, u64> = BTreeMap::new();
        for s in doc["stacks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["comm"] == comm)
        {
            let k: Vec<String> = s["kernel"]
                .as_array()
                .map(|f| {
                    f.iter()
                        .map(|f| f["name"].as_str().unwrap().to_string())
                        .collect()
                })
                .unwrap_or_default();
            *mine.entry(k).or_default() += s["total_ns"].as_u64().unwrap() / 1000;
        }
        let mut their: BTreeMap<Vec<String>, u64> = BTreeMap::new();
        for (c, f, us) in &theirs {
            if c == comm {
                *their.entry(f.clone()).or_default() += us;
            }
        }
        let top = |m: &BTreeMap<Vec<String>, u64>| {
            m.iter().max_by_key(|(_, v)| **v).map(|(k, _)| k.clone())
        };
        // offcputime prints "[Missed Kernel Stack]" where its stack map refused a stack
        // (a bucket taken by another stack: it keeps no REUSE_STACKID), and that can be
        // most of a thread's time; the stack it lost is no truth to compare with, so its
        // top is taken among the stacks it has. Ours must still have a stack.
        let missed = their.get(&Vec::new()).copied().unwrap_or(0);
        if missed > 0 {
            eprintln!("{comm}: offcputime missed the kernel stack of {missed} us");
        }
        let their_top = {
            let known: BTreeMap<Vec<String>, u64> = their
                .iter()
                .filter(|(k, _)| !k.is_empty())
                .map(|(k, v)| (k.clone(), *v))
                .collect();
            top(&known).or_else(|| top(&their))
        };
        assert!(
            top(&mine).is_some_and(|k| !k.is_empty()),
            "{comm}: no kernel stack of ours: {mine:?}"
        );
        assert_eq!(top(&mine), their_top, "{comm}: top kernel stacks differ");
        let (a, b) = (mine.values().sum::<u64>(), their.values().sum::<u64>());
        within(&format!("{comm} total vs offcputime"), a * 1000, b * 1000);
    }
    let _ = std::fs::remove_file(&t);
}
