//! The keys of `tracer top` in one table, so what the screen says, what the man page
//! says (tracer-top(1)'s KEYS) and what [`Top::key`](super::Top::key) does cannot part:
//! the footer is built from it, the man page renders it, and a test checks that every
//! key `Top::key` acts on is listed here and every key listed here acts.
use std::sync::LazyLock;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

/// A key as the user presses it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    Plain(KeyCode),
    Ctrl(char),
}

impl Key {
    /// The event crossterm delivers for it.
    pub fn event(self) -> KeyEvent {
        match self {
            Key::Plain(code) => KeyEvent::new(code, KeyModifiers::NONE),
            Key::Ctrl(c) => KeyEvent::new(KeyCode::Char(c), KeyModifiers::CONTROL),
        }
    }

    /// Its name on a keyboard: `q`, `Space`, `PgUp`, `Ctrl-C`.
    pub fn name(self) -> String {
        match self {
            Key::Ctrl(c) => format!("Ctrl-{}", c.to_ascii_uppercase()),
            Key::Plain(KeyCode::Char(' ')) => "Space".into(),
            Key::Plain(KeyCode::Char(c)) => c.to_string(),
            Key::Plain(KeyCode::PageUp) => "PgUp".into(),
            Key::Plain(KeyCode::PageDown) => "PgDn".into(),
            Key::Plain(code) => format!("{code:?}"),
        }
    }
}

/// One row of the table: keys that do one thing.
pub struct Binding {
    pub keys: &'static [Key],
    /// Its entry in the footer (label, word), if it has one.
    pub footer: Option<(&'static str, &'static str)>,
    pub does: &'static str,
}

use Key::{Ctrl, Plain};
use KeyCode::{Char, Down, End, Enter, Esc, Home, Left, PageDown, PageUp, Right, Tab, Up};

/// Every key of the view, in the order the man page lists them.
pub const BINDINGS: &[Binding] = &[
    Binding {
        keys: &[Plain(Char('q')), Plain(Char('Q')), Ctrl('c')],
        footer: Some(("q", "quit")),
        does: "Quit; the terminal is restored (so it is on SIGTERM, SIGINT, SIGHUP and a panic). \
               With -- COMMAND the window ends and the command goes on untraced.",
    },
    Binding {
        keys: &[Plain(Char('j')), Plain(Down), Plain(Char('k')), Plain(Up)],
        footer: Some(("jk", "move")),
        does: "Move the selection one row down (j, Down) or up (k, Up).",
    },
    Binding {
        keys: &[Plain(PageUp), Plain(PageDown)],
        footer: None,
        does: "Move the selection a screenful up or down.",
    },
    Binding {
        keys: &[Plain(Char('g')), Plain(Home), Plain(Char('G')), Plain(End)],
        footer: None,
        does: "Select the first row (g, Home) or the last (G, End).",
    },
    Binding {
        keys: &[Plain(Enter), Plain(Char(' ')), Plain(Right), Plain(Left)],
        footer: Some(("enter", "expand")),
        does: "Expand or fold the selected process's threads (Right only expands, Left only \
               folds; on a thread, Enter, Space and Left fold its process).",
    },
    Binding {
        keys: &[Plain(Char('+')), Plain(Char('*'))],
        footer: None,
        does: "Expand every process.",
    },
    Binding {
        keys: &[Plain(Char('-'))],
        footer: None,
        does: "Fold every process.",
    },
    Binding {
        keys: &[
            Plain(Char('<')),
            Plain(Char(',')),
            Plain(Char('>')),
            Plain(Char('.')),
        ],
        footer: Some(("<>", "sort")),
        does: "Sort by the column left (< or ,) or right (> or .) of the one sorted by now; \
               its header is marked v (largest first) or ^ (ascending).",
    },
    Binding {
        keys: &[Plain(Char('r'))],
        footer: Some(("r", "rev")),
        does: "Reverse the order.",
    },
    Binding {
        keys: &[Plain(Char('/'))],
        footer: Some(("/", "filter")),
        does: "Filter the rows by comm (a substring, any case) or PID/TID (a prefix): type it, \
               Enter keeps it, Esc clears it, Backspace deletes a character.",
    },
    Binding {
        keys: &[Plain(Esc)],
        footer: None,
        does: "Clear the filter.",
    },
    Binding {
        keys: &[Plain(Char('f')), Plain(Char('p'))],
        footer: Some(("f", "freeze")),
        does: "Freeze or resume the screen; intervals still go into the heatmap's history.",
    },
    Binding {
        keys: &[Plain(Char('d')), Plain(Tab)],
        footer: Some(("d", "pane")),
        does: "Show or hide the detail pane.",
    },
    Binding {
        keys: &[Plain(Char('h'))],
        footer: Some(("h", "hist")),
        does: "Switch the detail pane's histogram: run-queue, on-CPU, off-CPU, in turn.",
    },
    Binding {
        keys: &[Plain(Char('e'))],
        footer: Some(("e", "svg")),
        does: "Write the heatmaps of the history as SVG (as tracer run --heatmap does) to \
               tracer-top-HHMMSS.svg in the current directory.",
    },
];

/// The footer: the keys that have an entry, in the table's order.
pub static FOOTER: LazyLock<String> = LazyLock::new(|| {
    BINDINGS
        .iter()
        .filter_map(|b| b.footer)
        .map(|(label, word)| format!("{label} {word}"))
        .collect::<Vec<_>>()
        .join(" ")
});

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::tui::{Action, Top};

    /// Every key a terminal sends without modifiers that a user might press, and Ctrl-C.
    fn keyboard() -> Vec<Key> {
        let mut all: Vec<Key> = (b' '..=b'~').map(|c| Plain(Char(c as char))).collect();
        all.extend(
            [
                Up,
                Down,
                Left,
                Right,
                PageUp,
                PageDown,
                Home,
                End,
                Enter,
                Tab,
                Esc,
                KeyCode::Backspace,
                KeyCode::BackTab,
                KeyCode::Delete,
                KeyCode::Insert,
            ]
            .map(Plain),
        );
        all.extend((1..=12).map(|n| Plain(KeyCode::F(n))));
        all.extend(('a'..='z').map(Ctrl));
        all
    }

    /// A view where every key has something to act on: rows, a process selected.
    fn view() -> Top {
        let mut t = Top::new("x".into(), false);
        t.push(crate::output::tui::tests::sample(1));
        t.selected = Some(crate::output::tui::Key::Proc(10));
        t
    }

    #[test]
    fn the_table_lists_exactly_the_keys_top_acts_on() {
        let keyboard = keyboard();
        for b in BINDINGS {
            for k in b.keys {
                assert!(
                    keyboard.contains(k),
                    "{} is not on the test's keyboard",
                    k.name()
                );
            }
        }
        for k in keyboard {
            let acts = view().key(k.event(), 10) != Action::None;
            let listed = BINDINGS.iter().any(|b| b.keys.contains(&k));
            assert_eq!(
                acts,
                listed,
                "key {}: {} by Top::key, {} in BINDINGS",
                k.name(),
                if acts { "acted on" } else { "ignored" },
                if listed { "listed" } else { "not listed" }
            );
        }
    }

    #[test]
    fn the_footer_is_the_one_the_golden_frames_show() {
        assert_eq!(
            FOOTER.as_str(),
            "q quit jk move enter expand <> sort r rev / filter f freeze d pane h hist e svg"
        );
    }
}
