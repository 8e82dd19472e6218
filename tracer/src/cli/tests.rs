//! The command line's parsers and definitions, as users type them.
use super::*;
use crate::sys::parse::{parse_stack_entries, MAX_STACK_ENTRIES, MAX_THREADS_LIMIT, MIN_INTERVAL};

#[test]
fn durations() {
    assert_eq!(parse_duration("5s").unwrap(), Duration::from_secs(5));
    assert_eq!(parse_duration("5").unwrap(), Duration::from_secs(5));
    assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
    assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
    assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
    assert_eq!(parse_duration("100us").unwrap(), Duration::from_micros(100));
    assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
    for bad in ["", "s", "-1s", "5x", "1..2s", "1e9999", "99999999h", "NaN"] {
        assert!(parse_duration(bad).is_err(), "{bad:?} should be rejected");
    }
}

#[test]
fn numeric_options_are_validated() {
    assert!(parse_interval("0s").is_err());
    assert!(parse_interval("0").is_err());
    assert!(parse_interval("1ms").is_err());
    assert_eq!(parse_interval("10ms").unwrap(), MIN_INTERVAL);
    assert!(parse_count("0").is_err());
    assert!(parse_count("-1").is_err());
    assert_eq!(parse_count("3").unwrap(), 3);
    assert!(parse_max_threads("0").is_err());
    assert!(parse_max_threads("4294967296").is_err());
    assert!(parse_max_threads("4194305").is_err());
    assert_eq!(parse_max_threads("4194304").unwrap(), MAX_THREADS_LIMIT);
    let e = parse_max_threads("0").unwrap_err().to_string();
    assert!(e.contains("at least 1"), "{e}");
    // Stack map slots, in their own words (not "threads").
    for bad in ["0", "-1", "4194305", "many"] {
        let e = parse_stack_entries(bad).unwrap_err().to_string();
        assert!(
            e.contains("stack map slots") && !e.contains("thread"),
            "{e}"
        );
    }
    assert_eq!(parse_stack_entries("1").unwrap(), 1);
    assert_eq!(parse_stack_entries("4194304").unwrap(), MAX_STACK_ENTRIES);
    // Through clap, as a user types them.
    for bad in [
        &["tracer", "run", "-i", "0s", "--count", "1"][..],
        &["tracer", "run", "-i", "1s", "--count", "0"],
        &["tracer", "run", "--max-threads", "0"],
    ] {
        assert!(Cli::try_parse_from(bad).is_err(), "{bad:?}");
    }
    assert!(Cli::try_parse_from(["tracer", "run", "-d", "1"]).is_ok());
}

/// Issue 25's small ones and issue 24 item 12 (`-d 0s` was a 4 ms window).
#[test]
fn what_users_type_gets_an_answer_that_fits() {
    let err = |args: &[&str]| match Cli::try_parse_from(args) {
        Ok(_) => panic!("{args:?} accepted"),
        Err(e) => e.to_string(),
    };
    for cmd in ["run", "top", "offcpu", "slow", "record"] {
        let e = err(&["tracer", cmd, "-d", "0s"]);
        assert!(e.contains("a window of 0 traces nothing"), "{cmd}: {e}");
        let e = err(&["tracer", cmd, "-d", "-1s"]);
        assert!(e.contains("cannot be negative"), "{cmd}: {e}");
        assert!(!e.contains("-- -1"), "{cmd}: {e}");
        let e = err(&["tracer", cmd, "-p", "1", "--cgroup", "/sys/fs/cgroup"]);
        assert!(e.contains("cannot be used with"), "{cmd}: {e}");
    }
    for cmd in ["run", "offcpu"] {
        let e = err(&["tracer", cmd, "--top", "-1"]);
        assert!(e.contains("expected a whole number of rows"), "{cmd}: {e}");
        assert!(!e.contains("-- -1"), "{cmd}: {e}");
    }
    let e = err(&["tracer", "run", "-d", "1e9s"]);
    assert!(e.contains("too long"), "{e}");
    assert_eq!(parse_duration("1e6us").unwrap(), Duration::from_secs(1));
    assert_eq!(
        parse_duration("2.5e-1s").unwrap(),
        Duration::from_millis(250)
    );
    for same in ["5", "5s", "5 s", "5sec", "5secs", " 5 "] {
        assert_eq!(
            parse_duration(same).unwrap(),
            Duration::from_secs(5),
            "{same:?}"
        );
    }
    // dtl's 0 is a snapshot, not a window.
    assert!(Cli::try_parse_from(["tracer", "dtl", "-d", "0"]).is_ok());
    // What a bare number means is in the help.
    use clap::CommandFactory;
    let help = Cli::command()
        .find_subcommand_mut("run")
        .unwrap()
        .render_long_help()
        .to_string();
    assert!(help.contains("a bare number is seconds"), "{help}");
    let serve = Cli::command()
        .find_subcommand("serve")
        .unwrap()
        .get_about()
        .unwrap()
        .to_string();
    assert!(serve.contains("Prometheus text format"), "{serve}");
}

#[test]
fn numbers_in_any_base() {
    assert_eq!(parse_u32_any_base("0x7").unwrap(), 7);
    assert_eq!(parse_u32_any_base("12").unwrap(), 12);
    assert_eq!(parse_u32_any_base("0b11").unwrap(), 3);
    assert!(parse_u32_any_base("0xzz").is_err());
}

#[test]
fn cli_is_consistent() {
    use clap::CommandFactory;
    Cli::command().debug_assert();
}

#[test]
fn an_error_for_the_terminal_has_its_controls_escaped_and_its_lines_kept() {
    let e = anyhow::anyhow!("cgroup /sys/fs/cgroup/cg\x1b[31mRED\x07/nope: gone")
        .context("no probe mode works:\n  tp-btf: \u{202e}x");
    assert_eq!(
            error_for_terminal(&e),
            "no probe mode works:\n  tp-btf: \\u{202e}x: cgroup /sys/fs/cgroup/cg\\x1b[31mRED\\x07/nope: gone"
        );
}

#[test]
fn a_target_given_twice_is_one_target() {
    let cli = Cli::try_parse_from([
        "tracer", "run", "-p", "7", "-p", "9", "-p", "7", "-t", "3", "-t", "3",
    ])
    .unwrap();
    let Command::Run(a) = cli.command else {
        panic!("not run");
    };
    let t: crate::model::targets::Targets = a.target.into();
    assert_eq!(t.pids, [7, 9]);
    assert_eq!(t.tids, [3]);
}
