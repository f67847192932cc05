//! Text from segments and reports made safe for a terminal.
//!
//! A segment's command line, symbol names and Python file names are chosen by whoever ran
//! the program (or wrote the segment, or the report). Printed raw, an escape sequence among
//! them would act on the reader's terminal: set its title, write its clipboard (OSC 52),
//! clear the screen, or reorder what is shown (bidirectional overrides). Every text output
//! of the CLI (the summary, `syncspy report` in every format, `syncspy report A B`, budget
//! verdicts) passes through one of these functions. The monitor draws through ratatui,
//! whose buffer drops control characters (`Buffer::set_stringn`), so its screen has none.

use std::borrow::Cow;

/// Whether `c` must not reach a terminal raw: C0 controls but newline and tab, DEL, C1
/// controls (U+0080 to U+009F: U+009B is a CSI on some terminals), and the bidirectional
/// formatting characters.
fn unsafe_char(c: char, keep_lines: bool) -> bool {
    match c {
        '\n' | '\t' => !keep_lines,
        '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => {
            true
        }
        c => c.is_control(),
    }
}

fn escape(s: &str, keep_lines: bool) -> Cow<'_, str> {
    if !s.chars().any(|c| unsafe_char(c, keep_lines)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if !unsafe_char(c, keep_lines) {
            out.push(c);
        } else if (c as u32) < 0x100 {
            out.push_str(&format!("\\x{:02x}", c as u32));
        } else {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        }
    }
    Cow::Owned(out)
}

/// One field (a command line, a frame, a file name): every control character, line breaks
/// included, written as `\xNN` (`\u{NNNN}` above U+00FF).
pub fn field(s: &str) -> Cow<'_, str> {
    escape(s, false)
}

/// A whole text output: as [`field`], but newlines and tabs kept.
pub fn terminal(s: &str) -> Cow<'_, str> {
    escape(s, true)
}

/// JSON text for a terminal: the characters serde_json leaves raw that a terminal could act
/// on (DEL, C1 controls, bidirectional formatting) written as `\uNNNN`; only strings can hold
/// them, so the JSON reads the same.
pub fn json(s: &str) -> Cow<'_, str> {
    if !s.chars().any(|c| c != '\n' && unsafe_char(c, true)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if c != '\n' && unsafe_char(c, true) {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_reach_no_terminal() {
        let evil = "train.py\x1b]0;pwned\x07\x1b]52;c;cm0gLXJm\x07\x1b[2J\u{9b}2J\u{202e}cba";
        let t = terminal(evil);
        assert!(!t.chars().any(|c| c.is_control() || c == '\u{202e}'), "{t}");
        assert_eq!(
            t,
            "train.py\\x1b]0;pwned\\x07\\x1b]52;c;cm0gLXJm\\x07\\x1b[2J\\x9b2J\\u{202e}cba"
        );
        assert_eq!(terminal("a\tb\nc"), "a\tb\nc");
        assert_eq!(field("a\nb"), "a\\x0ab");
        assert!(matches!(terminal("plain"), Cow::Borrowed(_)));
        let j = json("{\n  \"a\": \"\u{9b}x\u{7f}\"\n}");
        assert_eq!(j, "{\n  \"a\": \"\\u009bx\\u007f\"\n}");
        let v: serde_json::Value = serde_json::from_str(&j).unwrap();
        assert_eq!(v["a"], "\u{9b}x\u{7f}");
    }
}
