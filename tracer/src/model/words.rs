//! Small pieces of English every report uses, and the one escaping of names for output.

/// `one` for 1, else `many`.
pub fn plural(n: usize, one: &'static str, many: &'static str) -> &'static str {
    if n == 1 {
        one
    } else {
        many
    }
}

/// A name or path from the kernel (thread and process names are whatever their program
/// set with `prctl(PR_SET_NAME)`; cgroup and file names whatever their creator chose) as
/// text that is safe on a terminal and in a line-oriented or XML file: nothing in it can
/// move the cursor, set a window title or the clipboard (OSC 52), start a new line or
/// reorder what follows (bidi overrides), and it is valid UTF-8 and valid XML character
/// data. Every output meant for a terminal or a text file goes through this one function
/// (JSON escapes by its own rules and keeps the real characters).
///
/// Escaped: C0 controls and DEL (`\t`, `\n`, `\r`, else `\xNN`), bytes that are not
/// UTF-8 (`\xNN`), C1 controls, the bidi controls (U+061C, U+200E-U+200F,
/// U+202A-U+202E, U+2066-U+206F), the line and paragraph separators (U+2028-U+2029) and
/// the noncharacters XML refuses (U+FFFE-U+FFFF), as `\u{NNNN}`. A backslash is left as
/// it is, so escaping twice changes nothing: the point is safety, not a reversible
/// encoding (JSON has the exact text).
pub fn escape(raw: impl AsRef<[u8]>) -> String {
    let raw = raw.as_ref();
    let mut out = String::with_capacity(raw.len());
    for chunk in raw.utf8_chunks() {
        for c in chunk.valid().chars() {
            push_char(&mut out, c);
        }
        for b in chunk.invalid() {
            push_hex(&mut out, *b);
        }
    }
    out
}

/// Bytes as text, keeping every valid character (controls included, for JSON to escape
/// in its own way) and writing each byte that is not UTF-8 as `\xNN`, so a name that is
/// not UTF-8 keeps its bytes visible instead of turning into U+FFFD.
/// `escape(from_bytes(b)) == escape(b)`.
pub fn from_bytes(raw: &[u8]) -> String {
    crate::sys::procfs::text_of(raw)
}

/// A NUL-padded kernel name (`comm[16]`) up to its first NUL, as [`from_bytes`].
pub fn from_comm(c: &[u8]) -> String {
    let end = c.iter().position(|&b| b == 0).unwrap_or(c.len());
    from_bytes(&c[..end])
}

/// Whether [`escape`] rewrites this character.
pub fn needs_escape(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{1f}'
        | '\u{7f}'..='\u{9f}'
        | '\u{61c}'
        | '\u{200e}'..='\u{200f}'
        | '\u{2028}'..='\u{202e}'
        | '\u{2066}'..='\u{206f}'
        | '\u{fffe}'..='\u{ffff}')
}

fn push_char(out: &mut String, c: char) {
    use std::fmt::Write as _;
    match c {
        '\t' => out.push_str("\\t"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        c if (c as u32) < 0x80 && needs_escape(c) => push_hex(out, c as u8),
        c if needs_escape(c) => {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
        c => out.push(c),
    }
}

fn push_hex(out: &mut String, b: u8) {
    use std::fmt::Write as _;
    let _ = write!(out, "\\x{b:02x}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_names_come_out_inert() {
        let cases: &[(&[u8], &str)] = &[
            (b"plain name", "plain name"),
            (b"\x1b]2;OWNED\x07", "\\x1b]2;OWNED\\x07"),
            (b"\x1b]52;c;cm0K\x07", "\\x1b]52;c;cm0K\\x07"),
            (b"a\r\nb\tc\x7f", "a\\r\\nb\\tc\\x7f"),
            (b"\x1b[2J\x1b]0", "\\x1b[2J\\x1b]0"),
            ("evil\u{202e}txt.exe".as_bytes(), "evil\\u{202e}txt.exe"),
            ("csi\u{9b}31m".as_bytes(), "csi\\u{9b}31m"),
            (
                "\u{2066}x\u{2069}\u{200f}".as_bytes(),
                "\\u{2066}x\\u{2069}\\u{200f}",
            ),
            ("\u{2028}\u{fffe}".as_bytes(), "\\u{2028}\\u{fffe}"),
            (b"bad\xff\xfe utf8 \xc3", "bad\\xff\\xfe utf8 \\xc3"),
            (
                "caf\u{e9} \u{65e5}\u{672c}".as_bytes(),
                "caf\u{e9} \u{65e5}\u{672c}",
            ),
            (b"back\\slash", "back\\slash"),
        ];
        for (raw, want) in cases {
            let got = escape(raw);
            assert_eq!(&got, want, "{raw:?}");
            assert!(!got.chars().any(needs_escape), "{got:?}");
            assert_eq!(escape(&got), got, "escaping twice changes nothing");
            assert_eq!(escape(from_bytes(raw)), got, "{raw:?}");
        }
        assert_eq!(escape("str too"), "str too");
        assert_eq!(from_bytes(b"a\xffb\x1b"), "a\\xffb\x1b");
        assert_eq!(from_comm(b"w\xff\0\0junk"), "w\\xff");
    }
}
