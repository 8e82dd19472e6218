//! The settings `tracer dtl` changes and puts back: the state file written before any
//! change, settings refused before anything is written, a dead run's state restored at
//! the next start, a live writer's state file kept.
use tracer::pseries::vcpudispatch::{self, SettingsGuard};

use super::Fixture;

#[test]
fn enabling_writes_the_state_file_first_and_restores() {
    let f = Fixture::pseries("enable");
    f.write(vcpudispatch::STATS_PATH, "off\n");
    let root = f.root();
    let (mut g, recovered) = SettingsGuard::acquire(&root).unwrap();
    assert!(recovered.is_none());
    assert!(g.enable_stats().unwrap());
    g.set_freq(200).unwrap();
    g.set_dtl_mask(0x2).unwrap();
    assert_eq!(f.read(vcpudispatch::STATS_PATH), "1\n");
    assert_eq!(f.read(vcpudispatch::FREQ_PATH), "200\n");
    assert_eq!(f.read(vcpudispatch::DTL_MASK_PATH), "0x2\n");
    let state = f.read(vcpudispatch::STATE_PATH);
    assert!(
        state.contains(&format!("pid {}", std::process::id())),
        "{state}"
    );
    for line in [
        "vcpudispatch_stats 0",
        "vcpudispatch_stats_freq 50",
        "dtl_event_mask 0x7",
    ] {
        assert!(state.contains(line), "{line} missing in\n{state}");
    }
    g.restore().unwrap();
    assert_eq!(f.read(vcpudispatch::STATS_PATH), "0\n");
    assert_eq!(f.read(vcpudispatch::FREQ_PATH), "50\n");
    assert_eq!(f.read(vcpudispatch::DTL_MASK_PATH), "0x7\n");
    assert!(!f.path(vcpudispatch::STATE_PATH).exists());

    // dropping without restore() restores too
    f.write(vcpudispatch::STATS_PATH, "off\n");
    {
        let (mut g, _) = SettingsGuard::acquire(&root).unwrap();
        g.set_freq(7).unwrap();
        assert_eq!(f.read(vcpudispatch::FREQ_PATH), "7\n");
    }
    assert_eq!(f.read(vcpudispatch::FREQ_PATH), "50\n");
    assert!(!f.path(vcpudispatch::STATE_PATH).exists());
}

#[test]
fn bad_settings_are_rejected_before_writing() {
    let f = Fixture::pseries("reject");
    let (mut g, _) = SettingsGuard::acquire(&f.root()).unwrap();
    assert!(g.set_freq(0).unwrap_err().to_string().contains("1..HZ"));
    assert!(g.set_dtl_mask(0x8).is_err());
    assert_eq!(f.read(vcpudispatch::FREQ_PATH), "50\n");
    assert!(!f.path(vcpudispatch::STATE_PATH).exists());
}

#[test]
fn a_dead_runs_state_file_is_restored_at_the_next_start() {
    let f = Fixture::pseries("stale");
    f.write(vcpudispatch::FREQ_PATH, "250\n");
    f.write(
        vcpudispatch::STATE_PATH,
        "# tracer dtl\npid 999999999\nstarttime 5\nvcpudispatch_stats 0\nvcpudispatch_stats_freq 50\n",
    );
    let rec = vcpudispatch::recover_stale(&f.root()).unwrap().unwrap();
    assert_eq!(rec.settings.pid, 999_999_999);
    assert!(rec.describe().contains("PID 999999999"));
    assert_eq!(f.read(vcpudispatch::STATS_PATH), "0\n");
    assert_eq!(f.read(vcpudispatch::FREQ_PATH), "50\n");
    assert!(!f.path(vcpudispatch::STATE_PATH).exists());
    assert!(vcpudispatch::recover_stale(&f.root()).unwrap().is_none());
}

#[test]
fn a_live_writer_keeps_its_state_file_and_a_reused_pid_does_not() {
    let f = Fixture::pseries("live");
    let stat = "4242 (tracer) S 1 4242 4242 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 777 0 0";
    f.write("/proc/4242/stat", stat);
    f.write(
        vcpudispatch::STATE_PATH,
        "pid 4242\nstarttime 777\nvcpudispatch_stats_freq 50\n",
    );
    let e = vcpudispatch::recover_stale(&f.root())
        .unwrap_err()
        .to_string();
    assert!(e.contains("PID 4242") && e.contains("dtl-state"), "{e}");
    assert!(SettingsGuard::acquire(&f.root()).is_err());

    // same PID, other start time: a different process, so the writer is dead
    f.write(
        vcpudispatch::STATE_PATH,
        "pid 4242\nstarttime 778\nvcpudispatch_stats_freq 50\n",
    );
    assert!(vcpudispatch::recover_stale(&f.root()).unwrap().is_some());
}

#[test]
fn malformed_state_file_is_an_error_naming_it() {
    let f = Fixture::pseries("badstate");
    f.write(vcpudispatch::STATE_PATH, "pid x\n");
    let e = vcpudispatch::recover_stale(&f.root())
        .unwrap_err()
        .to_string();
    assert!(e.contains("run/tracer/dtl-state"), "{e}");
}
