//! Judging one group: exact count, green, or red with its own Lab marker.

use crate::libtest::{TestOutcome, Verdict};
use crate::spec::GroupSpec;

/// Widest a shown assertion line gets before it is shortened.
const HEADLINE_WIDTH: usize = 160;

/// How one group fared in one run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupReport {
    pub spec: GroupSpec,
    /// How many listed tests the group's prefix selects.
    pub selected: usize,
    pub outcomes: Vec<TestOutcome>,
}

impl GroupReport {
    pub fn passed(&self) -> usize {
        self.outcomes.iter().filter(|o| o.passed()).count()
    }

    pub fn ignored(&self) -> usize {
        self.outcomes
            .iter()
            .filter(|o| o.verdict == Verdict::Ignored)
            .count()
    }

    pub fn failures(&self) -> impl Iterator<Item = &TestOutcome> {
        self.outcomes.iter().filter(|o| o.verdict.is_failure())
    }

    /// The failure to show first: a crash or timeout (it explains the other reds of its run),
    /// else the first failing test by name.
    pub fn first_failure(&self) -> Option<&TestOutcome> {
        self.failures()
            .find(|o| o.reason().is_some())
            .or_else(|| self.failures().next())
    }

    /// A filtered `cargo test` exits 0 on no match, so the count is checked on its own.
    pub fn count_matches(&self) -> bool {
        self.selected == self.spec.tests && self.outcomes.len() == self.spec.tests
    }

    pub fn is_green(&self) -> bool {
        self.count_matches() && self.passed() == self.spec.tests
    }

    /// The state of a Lab not yet done: every test ran and failed, and the first Lab stub each
    /// one hit is this group's own Lab — not an earlier one, not a later one.
    pub fn is_red_on_own_marker(&self) -> bool {
        let Some(lab) = self.spec.lab else {
            return false;
        };
        self.count_matches()
            && self.passed() == 0
            && self.ignored() == 0
            && self.failures().all(|outcome| {
                outcome.verdict == Verdict::Failed
                    && outcome.first_lab_stub().map(|(hit, _)| hit) == Some(lab)
            })
    }

    /// The marker each failing test hit first, for reports (`Lab 6.2` where `Lab 6.3` was due).
    pub fn markers_hit(&self) -> Vec<String> {
        let mut markers: Vec<String> = self
            .failures()
            .map(|o| match (o.verdict, o.first_lab_stub()) {
                (Verdict::Crashed(_), _) => "进程中途退出".to_string(),
                (Verdict::TimedOut(_), _) => "超时".to_string(),
                (_, Some((lab, _))) => lab.marker(),
                (_, None) => "断言失败".to_string(),
            })
            .collect();
        markers.dedup();
        markers
    }

    /// `validator      Lab 6.1  3/3 ✓`, then why it is red, if it is.
    pub fn summary_line(&self) -> String {
        let mark = if self.is_green() { "✓" } else { "✗" };
        let lab = self
            .spec
            .lab
            .map(|lab| format!("Lab {lab:<5}"))
            .unwrap_or_else(|| " ".repeat(9));
        let mut line = format!(
            "{:<14} {lab} {}/{} {mark}",
            self.spec.name,
            self.passed(),
            self.spec.tests
        );
        if self.selected != self.spec.tests {
            line.push_str(&format!(
                "  （筛选 `{}` 选中了 {} 个测试，本章清单要求 {} 个：测试文件被改动过吗？）",
                self.spec.prefix(),
                self.selected,
                self.spec.tests
            ));
        } else if let Some(first) = self.first_failure() {
            let headline = first
                .headline(HEADLINE_WIDTH)
                .unwrap_or_else(|| "没有找到 panic 信息，见完整输出".to_string());
            line.push_str(&format!("\n      首个失败 {}：{headline}", first.name));
            // Every other crash or timeout gets its own line: each names a test to look at.
            for other in self.failures().filter(|o| o.name != first.name) {
                if let Some(reason) = other.reason() {
                    line.push_str(&format!("\n      {reason}"));
                }
            }
        }
        if self.ignored() > 0 {
            line.push_str(&format!(
                "\n      {} 个测试被 #[ignore] 跳过，没有运行：去掉 #[ignore] 才能算通过",
                self.ignored()
            ));
        }
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::libtest::parse_test_run;

    fn outcome(name: &str, verdict: Verdict, panic: &str) -> TestOutcome {
        TestOutcome {
            name: name.into(),
            verdict,
            output: if panic.is_empty() {
                String::new()
            } else {
                format!("thread '{name}' panicked at src/x.rs:1:1:\n{panic}\nnote: run with\n")
            },
        }
    }

    fn report(lab: &str, tests: usize, outcomes: Vec<TestOutcome>) -> GroupReport {
        GroupReport {
            spec: GroupSpec {
                name: "g".into(),
                lab: Some(lab.parse().unwrap()),
                tests,
                summary: String::new(),
                timeout: None,
            },
            selected: outcomes.len(),
            outcomes,
        }
    }

    #[test]
    fn green_needs_the_exact_count_all_passing() {
        let pass = || outcome("g::a", Verdict::Passed, "");
        assert!(report("6.1", 1, vec![pass()]).is_green());
        assert!(
            !report("6.1", 2, vec![pass()]).is_green(),
            "a missing test is red"
        );
        let ignored = report(
            "6.1",
            2,
            vec![pass(), outcome("g::b", Verdict::Ignored, "")],
        );
        assert!(!ignored.is_green(), "an ignored test is not a pass");
        assert!(
            ignored.summary_line().contains("#[ignore]"),
            "{}",
            ignored.summary_line()
        );
    }

    #[test]
    fn red_on_own_marker_refuses_another_labs_marker_and_plain_assertions() {
        let stub = |lab: &str| outcome("g::a", Verdict::Failed, &format!("Lab {lab} x 尚未实现"));
        assert!(report("6.3", 1, vec![stub("6.3")]).is_red_on_own_marker());
        assert!(!report("6.3", 1, vec![stub("6.2")]).is_red_on_own_marker());
        assert!(
            !report("6.1", 1, vec![stub("6.12")]).is_red_on_own_marker(),
            "6.12 is not 6.1"
        );
        let assertion = outcome("g::a", Verdict::Failed, "assertion failed: 规则");
        assert!(!report("6.3", 1, vec![assertion]).is_red_on_own_marker());
        assert_eq!(
            report("6.3", 1, vec![stub("6.2")]).markers_hit(),
            ["Lab 6.2"]
        );
    }

    #[test]
    fn summary_shows_count_and_first_failure() {
        let run = parse_test_run(
            "test g::a ... FAILED\n\nfailures:\n\n---- g::a stdout ----\n\
thread 'g::a' panicked at src/t.rs:1:1:\nLab 6.1 object_schema 尚未实现\n",
        );
        let line = report("6.1", 1, run).summary_line();
        assert!(line.starts_with("g              Lab 6.1   0/1 ✗"), "{line}");
        assert!(
            line.contains("首个失败 g::a：Lab 6.1 object_schema 尚未实现"),
            "{line}"
        );
    }
}
