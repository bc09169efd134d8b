//! Chapter and Lab numbers: the one rule for reading them, shared by every front end.

use std::fmt;
use std::str::FromStr;

/// A chapter number, 0–99, written with two digits (`06`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ChapterId(u8);

/// A Lab: chapter 6, third Lab → `6.3`; its failure marker is `Lab 6.3`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LabId {
    pub chapter: ChapterId,
    /// 1-based position of the Lab within its chapter.
    pub index: u8,
}

/// Why a chapter or Lab argument was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IdError {
    /// Not one or two ASCII digits. Holds a shortened echo of the input.
    MalformedChapter(String),
    /// Not `N.k` with a chapter number and a Lab index ≥ 1.
    MalformedLab(String),
}

/// An input echoed in a message: one line (control characters become `?`) and at most
/// `max` characters, so a pasted wall of digits or a name with a newline cannot flood or split
/// the one-line refusal.
pub fn one_line(input: &str, max: usize) -> String {
    let single_line: String = input
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    crate::libtest::shorten(&single_line, max)
}

fn echo(input: &str) -> String {
    one_line(input, 16)
}

impl fmt::Display for IdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdError::MalformedChapter(input) => write!(
                f,
                "章节编号 `{input}` 格式无效：请写一到两位数字，例如 06 或 6"
            ),
            IdError::MalformedLab(input) => {
                write!(f, "Lab 编号 `{input}` 格式无效：请写成 章.序号，例如 6.2")
            }
        }
    }
}

impl std::error::Error for IdError {}

impl ChapterId {
    pub const fn new(number: u8) -> Option<Self> {
        if number < 100 {
            Some(ChapterId(number))
        } else {
            None
        }
    }

    pub fn number(self) -> u8 {
        self.0
    }

    /// The Lab at 1-based `index` of this chapter.
    pub fn lab(self, index: u8) -> LabId {
        LabId {
            chapter: self,
            index,
        }
    }
}

impl FromStr for ChapterId {
    type Err = IdError;

    /// Accepts `06` and `6` (surrounding blanks ignored); refuses `abc`, `6.0`, `-1`, `123`, ``.
    fn from_str(input: &str) -> Result<Self, IdError> {
        let trimmed = input.trim();
        let well_formed =
            (1..=2).contains(&trimmed.len()) && trimmed.bytes().all(|byte| byte.is_ascii_digit());
        match trimmed.parse::<u8>() {
            Ok(number) if well_formed => Ok(ChapterId(number)),
            _ => Err(IdError::MalformedChapter(echo(input))),
        }
    }
}

impl fmt::Display for ChapterId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&format!("{:02}", self.0))
    }
}

impl LabId {
    /// `Lab 6.3`: the text every stub of this Lab panics with, derived, never typed.
    pub fn marker(self) -> String {
        format!("Lab {self}")
    }
}

impl FromStr for LabId {
    type Err = IdError;

    /// `6.2` or `06.2`.
    fn from_str(input: &str) -> Result<Self, IdError> {
        let malformed = || IdError::MalformedLab(echo(input));
        let (chapter, index) = input.trim().split_once('.').ok_or_else(malformed)?;
        let chapter: ChapterId = chapter.parse().map_err(|_| malformed())?;
        let index_ok = (1..=2).contains(&index.len()) && index.bytes().all(|b| b.is_ascii_digit());
        match index.parse::<u8>() {
            Ok(index) if index_ok && index >= 1 => Ok(chapter.lab(index)),
            _ => Err(malformed()),
        }
    }
}

impl fmt::Display for LabId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&format!("{}.{}", self.chapter.0, self.index))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chapter_ids_accept_one_or_two_digits_only() {
        assert_eq!(
            "6".parse::<ChapterId>().map(|id| id.to_string()),
            Ok("06".into())
        );
        assert_eq!(" 07 ".parse::<ChapterId>().map(|id| id.number()), Ok(7));
        for bad in ["", "abc", "6.0", "-1", "123", "+6", "٦"] {
            assert!(bad.parse::<ChapterId>().is_err(), "`{bad}` must be refused");
        }
    }

    #[test]
    fn a_long_input_is_echoed_shortened_on_one_line() {
        let error = "9".repeat(100_000).parse::<ChapterId>().unwrap_err();
        let text = error.to_string();
        assert!(text.chars().count() < 80, "message stays short: {text}");
        let error = "a\nb".parse::<ChapterId>().unwrap_err().to_string();
        assert!(!error.contains('\n'), "one line: {error}");
    }

    #[test]
    fn lab_ids_and_markers_are_derived() {
        let lab: LabId = "06.3".parse().unwrap();
        assert_eq!(lab.to_string(), "6.3");
        assert_eq!(lab.marker(), "Lab 6.3");
        assert_eq!(lab, ChapterId::new(6).unwrap().lab(3));
        for bad in ["6", "6.0", "6.", ".2", "x.1", "6.2.1"] {
            assert!(bad.parse::<LabId>().is_err(), "`{bad}` must be refused");
        }
    }
}
