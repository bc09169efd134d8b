//! Files a later chapter extends are checked copies.
//!
//! Each chapter folder stays self-contained and every reference file readable Rust, so when
//! chapter 05 extends 03's `types.rs` it carries a whole `types.rs` of its own. What keeps the
//! two honest is this rule: the later copy, markers stripped, contains the earlier copy,
//! markers stripped, as a *line subsequence* — every earlier line, in order, possibly with new
//! lines between. A fix to 03 that did not reach 05 breaks it, and so does any edit that is
//! not an addition, which the course promises its chapters are. A deliberate rewrite is
//! declared in the manifest (`rewrites`), and only then is the file exempt.

/// The first line of `earlier` (1-based, with its text) that `later` does not carry in order,
/// or `None` when `later` contains all of `earlier` as a line subsequence. Trailing white
/// space does not count.
pub fn first_missing_line<'e>(earlier: &'e str, later: &str) -> Option<(usize, &'e str)> {
    let mut later_lines = later.lines().map(str::trim_end);
    for (index, line) in earlier.lines().enumerate() {
        let wanted = line.trim_end();
        if !later_lines.any(|candidate| candidate == wanted) {
            return Some((index + 1, line));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn additions_keep_the_subsequence_and_edits_break_it() {
        let earlier = "a\nb\n\nc\n";
        assert_eq!(first_missing_line(earlier, "a\nb\n\nc\n"), None);
        assert_eq!(
            first_missing_line(earlier, "a\nnew\nb\n\nmore\nc  \nend\n"),
            None
        );
        assert_eq!(first_missing_line(earlier, "a\nB\n\nc\n"), Some((2, "b")));
        assert_eq!(
            first_missing_line(earlier, "a\nc\nb\n\n"),
            Some((4, "c")),
            "order counts"
        );
        assert_eq!(first_missing_line("", "x\n"), None);
    }
}
