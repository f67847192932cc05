//! Counts with the word that agrees with them, for every view's text: `1 stall`, `3 stalls`,
//! `0 stalls`; `1 record was lost`, `2 records were lost`. Every count the summary, reports,
//! budget verdicts and the monitor print before a noun goes through here, so none says
//! "1 stalls".

use std::fmt::Display;

/// `one` when `n` is exactly 1, else `many`: the noun (or verb) alone, for a count printed
/// apart (`{} EVENTS DROPPED` with a formatted count) or a verb that follows it.
pub fn word<'a, N: PartialEq + From<u8>>(n: N, one: &'a str, many: &'a str) -> &'a str {
    if n == N::from(1) {
        one
    } else {
        many
    }
}

/// `n` and its noun: `count(1, "stall", "stalls")` is `1 stall`, `count(0, ...)` `0 stalls`.
pub fn count<N: PartialEq + From<u8> + Display + Copy>(n: N, one: &str, many: &str) -> String {
    format!("{n} {}", word(n, one, many))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_takes_the_singular_every_other_count_the_plural() {
        assert_eq!(count(1u64, "stall", "stalls"), "1 stall");
        assert_eq!(count(0u64, "stall", "stalls"), "0 stalls");
        assert_eq!(count(2usize, "rank", "ranks"), "2 ranks");
        assert_eq!(count(11u32, "process", "processes"), "11 processes");
        assert_eq!(count(1usize, "process", "processes"), "1 process");
        assert_eq!(word(1u64, "was", "were"), "was");
        assert_eq!(word(3u64, "was", "were"), "were");
        // An average per iteration: exactly 1 is one, 1.5 is not.
        assert_eq!(word(1.0f64, "event", "events"), "event");
        assert_eq!(word(1.5f64, "event", "events"), "events");
    }
}
