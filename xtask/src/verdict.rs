//! `verify`'s typed results. Every check records what it found — counts, names, the text of a
//! failure — and its problem lines are rendered from those fields, never kept beside them; a
//! chapter passes exactly when no check renders a problem. So a check cannot fail its field
//! and still pass, and the human table, the problem lines and `--json` all say the same thing.

use std::time::Instant;

use serde::Serialize;

use course_cli::runner::GroupReport;

/// One group as a run judged it.
#[derive(Serialize, Clone, Debug)]
pub struct GroupRun {
    pub chapter: String,
    pub group: String,
    pub passed: usize,
    pub total: usize,
    /// The runner's judgement: exact count, every test passed.
    pub green: bool,
    /// The runner's one-line summary, with the first failure when red.
    pub summary: String,
}

impl GroupRun {
    pub fn new(chapter: &str, report: &GroupReport) -> Self {
        GroupRun {
            chapter: chapter.to_string(),
            group: report.spec.name.clone(),
            passed: report.passed(),
            total: report.spec.tests,
            green: report.is_green(),
            summary: report.summary_line(),
        }
    }
}

/// The groups a state must pass, and the chapters whose tests could not run at all.
#[derive(Serialize, Default, Debug)]
pub struct GreenRun {
    pub seconds: f64,
    pub groups: Vec<GroupRun>,
    /// `(chapter, why)` for each chapter whose tests did not build or start.
    pub errors: Vec<(String, String)>,
    /// The chapter whose reference verdicts stand in for the earlier chapters' groups here,
    /// because this chapter only adds modules; `None` when every group was run.
    pub reused_from: Option<String>,
}

impl GreenRun {
    fn problems(&self, what: &str) -> Vec<String> {
        let red = self
            .groups
            .iter()
            .filter(|group| !group.green)
            .map(|group| format!("{what}：第 {} 章 {}", group.chapter, group.summary));
        let errors = self
            .errors
            .iter()
            .map(|(chapter, why)| format!("{what}：第 {chapter} 章测试无法运行：{why}"));
        red.chain(errors).collect()
    }

    /// Passed and total over one chapter's groups.
    pub fn count(&self, chapter: &str) -> (usize, usize) {
        self.groups
            .iter()
            .filter(|group| group.chapter == chapter)
            .fold((0, 0), |(passed, total), group| {
                (passed + group.passed, total + group.total)
            })
    }
}

#[derive(Serialize, Default, Debug)]
pub struct HeldOut {
    pub seconds: f64,
    pub passed: usize,
    pub total: usize,
    pub failed: Vec<String>,
    pub error: Option<String>,
}

impl HeldOut {
    fn problems(&self) -> Vec<String> {
        let mut problems: Vec<String> = self
            .failed
            .iter()
            .map(|name| format!("保留测试 {name} 失败"))
            .collect();
        if let Some(error) = &self.error {
            problems.push(format!("保留测试无法运行：{error}"));
        } else if self.total == 0 {
            problems.push("本章没有保留测试".to_string());
        }
        problems
    }
}

#[derive(Serialize, Default, Debug)]
pub struct Lint {
    pub seconds: f64,
    /// clippy's first diagnostics when it refused.
    pub clippy: Option<String>,
    /// rustfmt's first diff lines when it refused.
    pub rustfmt: Option<String>,
}

impl Lint {
    fn problems(&self) -> Vec<String> {
        let clippy = self.clippy.iter().map(|text| format!("clippy：{text}"));
        let rustfmt = self.rustfmt.iter().map(|text| format!("rustfmt：{text}"));
        clippy.chain(rustfmt).collect()
    }
}

/// The tests of the packages the workspace carries besides the learner crate.
#[derive(Serialize, Default, Debug)]
pub struct Packages {
    pub seconds: f64,
    pub names: Vec<String>,
    /// Tests passed across them, from libtest's per-test result lines.
    pub passed: usize,
    pub failure: Option<String>,
}

impl Packages {
    fn problems(&self) -> Vec<String> {
        self.failure
            .iter()
            .map(|text| format!("附带包的测试失败：{text}"))
            .collect()
    }
}

/// The member set's `Cargo.lock`: extends the previous one, and cargo accepts it as it is.
#[derive(Serialize, Default, Debug)]
pub struct Lock {
    pub seconds: f64,
    /// The overlay lock checked, if the chapter carries one.
    pub file: Option<String>,
    pub problems: Vec<String>,
}

#[derive(Serialize, Default, Debug)]
pub struct AnswerFree {
    pub files: usize,
    pub leaks: Vec<String>,
}

/// The practice workspace as `practice` writes it: carried chapters stay green (an observe
/// chapter's own groups too), and its own `cargo xtask test` tells the same story.
#[derive(Serialize, Default, Debug)]
pub struct Practice {
    pub run: GreenRun,
    /// Why the workspace's `cargo xtask test NN --group <first>` disagreed, if it did.
    pub command: Option<String>,
}

impl Practice {
    fn problems(&self) -> Vec<String> {
        let mut problems = self.run.problems("练习目录");
        problems.extend(self.command.iter().cloned());
        problems
    }
}

/// One Lab in the state "Labs before it solved".
#[derive(Serialize, Debug)]
pub struct LabProof {
    pub lab: String,
    pub group: String,
    pub marker: String,
    pub seconds: f64,
    /// What the group's first failing test showed.
    pub first_red: String,
    /// Earlier Labs' groups that were not green.
    pub earlier_red: Vec<String>,
    /// Whether every test of the group failed on this Lab's own marker.
    pub own_marker: bool,
    /// The markers the group's tests hit first, with its summary, when not its own.
    pub seen: String,
    pub error: Option<String>,
}

impl LabProof {
    fn problems(&self) -> Vec<String> {
        let lab = &self.lab;
        if let Some(error) = &self.error {
            return vec![format!("Lab {lab} 之前的状态无法运行：{error}")];
        }
        let mut problems: Vec<String> = self
            .earlier_red
            .iter()
            .map(|summary| format!("Lab {lab} 之前应已通过：{summary}"))
            .collect();
        if !self.own_marker {
            problems.push(format!(
                "Lab {lab}：{} 组应全部以 {} 失败，实际看到 {}",
                self.group, self.marker, self.seen
            ));
        }
        problems
    }

    pub fn ok(&self) -> bool {
        self.problems().is_empty()
    }
}

#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum KilledBy {
    Public,
    HeldOut,
    None,
}

impl KilledBy {
    pub fn mark(self) -> &'static str {
        match self {
            KilledBy::Public => "✓",
            KilledBy::HeldOut => "△",
            KilledBy::None => "✗",
        }
    }
}

#[derive(Serialize, Debug)]
pub struct MistakeRow {
    pub name: String,
    pub group: String,
    pub killed_by: KilledBy,
    pub detail: String,
    pub seconds: f64,
}

#[derive(Serialize, Default, Debug)]
pub struct Mutations {
    pub seconds: f64,
    /// The smallest catalogue this chapter may have.
    pub minimum: usize,
    /// Share the public tests alone must kill (rebuild chapters).
    pub public_rate: Option<f64>,
    pub table: Vec<MistakeRow>,
}

impl Mutations {
    pub fn killed(&self) -> usize {
        self.count(|by| by != KilledBy::None)
    }

    pub fn killed_public(&self) -> usize {
        self.count(|by| by == KilledBy::Public)
    }

    fn count(&self, keep: impl Fn(KilledBy) -> bool) -> usize {
        self.table.iter().filter(|row| keep(row.killed_by)).count()
    }

    fn problems(&self) -> Vec<String> {
        let total = self.table.len();
        let mut problems = Vec::new();
        if self.killed() < total {
            let missed: Vec<&str> = self
                .table
                .iter()
                .filter(|row| row.killed_by == KilledBy::None)
                .map(|row| row.name.as_str())
                .collect();
            problems.push(format!(
                "错误实现未全部捕获：{}/{total}（漏掉 {}）",
                self.killed(),
                missed.join("、")
            ));
        }
        if total < self.minimum {
            problems.push(format!(
                "错误实现目录只有 {total} 条，至少需要 {} 条",
                self.minimum
            ));
        }
        if let Some(rate) = self.public_rate {
            if (self.killed_public() as f64) < rate * total as f64 {
                problems.push(format!(
                    "公开测试只捕获 {}/{total}，低于 {:.0}%",
                    self.killed_public(),
                    rate * 100.0
                ));
            }
        }
        problems
    }
}

#[derive(Serialize, Default, Debug)]
pub struct Guide {
    pub problems: Vec<String>,
}

/// Everything `verify` found for one chapter.
#[derive(Serialize, Debug)]
pub struct ChapterReport {
    pub id: String,
    pub mode: &'static str,
    pub seconds: f64,
    pub reference: GreenRun,
    pub held_out: HeldOut,
    pub lint: Lint,
    pub packages: Packages,
    pub lock: Lock,
    pub answer_free: AnswerFree,
    pub practice: Practice,
    pub labs: Vec<LabProof>,
    pub mutations: Mutations,
    pub guide: Guide,
}

/// The steps of a chapter, for the per-step problem and timing lines.
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Step {
    Reference,
    HeldOut,
    Lint,
    Packages,
    Lock,
    AnswerFree,
    Practice,
    Labs,
    Mutations,
    Guide,
}

impl Step {
    pub const ALL: [Step; 10] = [
        Step::Reference,
        Step::HeldOut,
        Step::Lint,
        Step::Packages,
        Step::Lock,
        Step::AnswerFree,
        Step::Practice,
        Step::Labs,
        Step::Mutations,
        Step::Guide,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Step::Reference => "参考实现",
            Step::HeldOut => "保留测试",
            Step::Lint => "lint",
            Step::Packages => "附带包",
            Step::Lock => "Cargo.lock",
            Step::AnswerFree => "无答案",
            Step::Practice => "练习目录",
            Step::Labs => "Lab 证明",
            Step::Mutations => "错误实现",
            Step::Guide => "指南",
        }
    }
}

impl ChapterReport {
    /// The problem lines of one step, rendered from its fields.
    pub fn step_problems(&self, step: Step) -> Vec<String> {
        match step {
            Step::Reference => self.reference.problems("参考实现"),
            Step::HeldOut => self.held_out.problems(),
            Step::Lint => self.lint.problems(),
            Step::Packages => self.packages.problems(),
            Step::Lock => self.lock.problems.clone(),
            Step::AnswerFree => self.answer_free.leaks.clone(),
            Step::Practice => self.practice.problems(),
            Step::Labs => self.labs.iter().flat_map(LabProof::problems).collect(),
            Step::Mutations => self.mutations.problems(),
            Step::Guide => self
                .guide
                .problems
                .iter()
                .map(|problem| format!("指南：{problem}"))
                .collect(),
        }
    }

    pub fn step_ok(&self, step: Step) -> bool {
        self.step_problems(step).is_empty()
    }

    /// Seconds spent in one step.
    pub fn step_seconds(&self, step: Step) -> f64 {
        match step {
            Step::Reference => self.reference.seconds,
            Step::HeldOut => self.held_out.seconds,
            Step::Lint => self.lint.seconds,
            Step::Packages => self.packages.seconds,
            Step::Lock => self.lock.seconds,
            Step::AnswerFree | Step::Guide => 0.0,
            Step::Practice => self.practice.run.seconds,
            // A fold from 0.0: `Sum` of no f64 is -0.0, which the table would print.
            Step::Labs => self.labs.iter().fold(0.0, |total, lab| total + lab.seconds),
            Step::Mutations => self.mutations.seconds,
        }
    }

    pub fn problems(&self) -> Vec<String> {
        Step::ALL
            .into_iter()
            .flat_map(|step| self.step_problems(step))
            .collect()
    }

    pub fn ok(&self) -> bool {
        self.problems().is_empty()
    }
}

/// The whole run.
#[derive(Debug)]
pub struct Report {
    pub seconds: f64,
    pub tree_problems: Vec<String>,
    pub chapters: Vec<ChapterReport>,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.tree_problems.is_empty() && self.chapters.iter().all(ChapterReport::ok)
    }

    /// The `--json` document: every typed result, with the verdicts and problem lines
    /// derived from them.
    pub fn to_json(&self) -> serde_json::Value {
        let chapters: Vec<serde_json::Value> = self
            .chapters
            .iter()
            .map(|chapter| {
                let mut value = serde_json::to_value(chapter).unwrap_or_default();
                let steps: serde_json::Map<String, serde_json::Value> = Step::ALL
                    .into_iter()
                    .map(|step| {
                        let key = serde_json::to_value(step)
                            .ok()
                            .and_then(|key| key.as_str().map(str::to_string))
                            .unwrap_or_default();
                        let verdict = serde_json::json!({
                            "ok": chapter.step_ok(step),
                            "seconds": chapter.step_seconds(step),
                        });
                        (key, verdict)
                    })
                    .collect();
                if let Some(object) = value.as_object_mut() {
                    object.insert("ok".into(), chapter.ok().into());
                    object.insert("problems".into(), chapter.problems().into());
                    object.insert("steps".into(), steps.into());
                }
                value
            })
            .collect();
        serde_json::json!({
            "ok": self.ok(),
            "seconds": self.seconds,
            "tree_problems": self.tree_problems,
            "chapters": chapters,
        })
    }
}

/// Seconds since `started`, for the timing fields.
pub fn since(started: Instant) -> f64 {
    started.elapsed().as_secs_f64()
}
