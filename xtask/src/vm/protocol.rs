//! The guest's framed output (tests/vm/steps.sh) read back into steps.
//!
//! ```text
//! @@vmtest begin NAME
//! @@vmtest part PART
//! ...lines...
//! @@vmtest end NAME rc=RC t0=UPTIME t1=UPTIME
//! @@vmtest done
//! ```

/// One step the guest ran.
#[derive(Clone, Debug, Default)]
pub struct Step {
    pub name: String,
    /// (part name, text) in the order printed: stdout, stderr, then the step's files.
    pub parts: Vec<(String, String)>,
    /// The command's exit status; None when the step never ended (the guest died in it).
    pub rc: Option<i32>,
    /// Guest uptime (s) when the step started and ended.
    pub t0: f64,
    pub t1: f64,
}

impl Step {
    /// A part's text, "" when the step has no such part.
    pub fn part(&self, name: &str) -> &str {
        self.parts
            .iter()
            .find(|(n, _)| n == name)
            .map_or("", |(_, t)| t.as_str())
    }

    pub fn stdout(&self) -> &str {
        self.part("stdout")
    }

    pub fn stderr(&self) -> &str {
        self.part("stderr")
    }

    pub fn secs(&self) -> f64 {
        (self.t1 - self.t0).max(0.0)
    }

    /// The whole step as the guest printed it, for a failing check's report.
    pub fn transcript(&self) -> String {
        let mut out = String::new();
        for (name, text) in &self.parts {
            if text.trim().is_empty() {
                continue;
            }
            out += &format!("--- {name}\n{}\n", text.trim_end());
        }
        match self.rc {
            Some(rc) => out += &format!("--- exit status {rc}, {:.1} s\n", self.secs()),
            None => out += "--- the step never ended\n",
        }
        out
    }
}

/// Everything the guest reported.
#[derive(Clone, Debug, Default)]
pub struct GuestOutput {
    pub steps: Vec<Step>,
    /// The guest printed `@@vmtest done`: it ran every step.
    pub done: bool,
}

impl GuestOutput {
    pub fn step(&self, name: &str) -> Option<&Step> {
        self.steps.iter().find(|s| s.name == name)
    }
}

const MARK: &str = "@@vmtest ";

/// Reads the results port's text (a serial line: `\r\n` endings, maybe a cut-off end).
pub fn parse(text: &str) -> GuestOutput {
    let mut out = GuestOutput::default();
    let mut cur: Option<Step> = None;
    let mut part: Option<(String, Vec<&str>)> = None;
    let close_part = |cur: &mut Option<Step>, part: &mut Option<(String, Vec<&str>)>| {
        if let (Some(step), Some((name, lines))) = (cur.as_mut(), part.take()) {
            // steps.sh ends every part with one extra newline.
            let mut lines = lines;
            if lines.last() == Some(&"") {
                lines.pop();
            }
            step.parts.push((name, lines.join("\n")));
        }
    };
    for line in text.lines() {
        let line = line.trim_end_matches('\r');
        let Some(rest) = line.strip_prefix(MARK) else {
            if let Some((_, lines)) = part.as_mut() {
                lines.push(line);
            }
            continue;
        };
        let mut words = rest.split_whitespace();
        match words.next() {
            Some("begin") => {
                close_part(&mut cur, &mut part);
                if let Some(s) = cur.take() {
                    out.steps.push(s);
                }
                cur = Some(Step {
                    name: words.next().unwrap_or("?").to_string(),
                    ..Default::default()
                });
            }
            Some("part") => {
                close_part(&mut cur, &mut part);
                part = Some((words.next().unwrap_or("?").to_string(), Vec::new()));
            }
            Some("end") => {
                close_part(&mut cur, &mut part);
                if let Some(mut s) = cur.take() {
                    for w in words.skip(1) {
                        match w.split_once('=') {
                            Some(("rc", v)) => s.rc = v.parse().ok(),
                            Some(("t0", v)) => s.t0 = v.parse().unwrap_or(0.0),
                            Some(("t1", v)) => s.t1 = v.parse().unwrap_or(0.0),
                            _ => {}
                        }
                    }
                    out.steps.push(s);
                }
            }
            Some("done") => {
                close_part(&mut cur, &mut part);
                if let Some(s) = cur.take() {
                    out.steps.push(s);
                }
                out.done = true;
            }
            _ => {
                if let Some((_, lines)) = part.as_mut() {
                    lines.push(line);
                }
            }
        }
    }
    close_part(&mut cur, &mut part);
    if let Some(s) = cur.take() {
        out.steps.push(s);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_steps_parts_and_status() {
        let text = "@@vmtest begin facts\r\n@@vmtest part stdout\r\narch=x86_64\r\nbtf=yes\r\n\r\n\
                    @@vmtest part stderr\r\n\r\n@@vmtest end facts rc=0 t0=1.50 t1=1.75\r\n\
                    @@vmtest begin run\n@@vmtest part stdout\n{\"a\":1}\n\n@@vmtest part truth\nx\n\n\
                    @@vmtest end run rc=2 t0=2 t1=5\n@@vmtest done\n";
        let g = parse(text);
        assert!(g.done);
        assert_eq!(g.steps.len(), 2);
        let f = g.step("facts").unwrap();
        assert_eq!(f.stdout(), "arch=x86_64\nbtf=yes");
        assert_eq!(f.stderr(), "");
        assert_eq!(f.rc, Some(0));
        assert!((f.secs() - 0.25).abs() < 1e-9);
        let r = g.step("run").unwrap();
        assert_eq!(r.rc, Some(2));
        assert_eq!(r.part("truth"), "x");
        assert_eq!(r.part("kprobes"), "");
    }

    #[test]
    fn a_guest_that_died_mid_step_leaves_an_unended_step() {
        let g = parse("@@vmtest begin check\n@@vmtest part stdout\npartial\n");
        assert!(!g.done);
        let s = g.step("check").unwrap();
        assert_eq!(s.rc, None);
        assert_eq!(s.stdout(), "partial");
        assert!(s.transcript().contains("never ended"));
    }
}
