//! `cargo xtask verify [NN…] [--json]`: prove every chapter, the way rustlings' `dev check`
//! and CodeCrafters' course checks do.
//!
//! Per chapter N: reference N passes every group of its chain with the exact counts; N's
//! held-out tests pass; clippy and rustfmt are clean; for every Lab k, the workspace with Labs
//! before k solved is green on those Labs and red on exactly `Lab N.k` (the first state also
//! keeps carried chapters green and its own `cargo xtask test` says so); the practice
//! workspace holds no region body of N; every entry of N's mistake catalogue is killed.

use std::io::Write as _;
use std::time::Instant;

use serde::Serialize;

use course_cli::assemble::{self, added_packages, held_out_target, Solved};
use course_cli::catalog::{Chapter, Mode};
use course_cli::guide;
use course_cli::runner::libtest::parse_test_run;
use course_cli::runner::{CargoRunner, GroupReport, LEARNER_PACKAGE};

use crate::checkout::{Course, Failure};

/// The tutor protocol every workspace carries; its commands and counts must be real too.
const TUTOR_GUIDE: &str = "chapters/_crate/AGENT_GUIDE.md";

/// A rebuild chapter's catalogue must hold at least this many realistic wrong implementations.
pub const MIN_MISTAKES: usize = 12;
/// Share of the catalogue the public tests alone must kill.
pub const MIN_PUBLIC_KILL_RATE: f64 = 0.95;

#[derive(Serialize, Default)]
struct Count {
    passed: usize,
    total: usize,
}

#[derive(Serialize)]
struct LabProof {
    lab: String,
    group: String,
    ok: bool,
    /// What the group's first failing test showed in the "solved before" state.
    first_red: String,
}

#[derive(Serialize)]
struct MistakeRow {
    name: String,
    group: String,
    /// `public`, `held-out` or `none`.
    killed_by: &'static str,
    detail: String,
}

#[derive(Serialize, Default)]
struct Mutations {
    total: usize,
    killed: usize,
    killed_public: usize,
    table: Vec<MistakeRow>,
}

#[derive(Serialize, Default)]
struct PackagesReport {
    ok: bool,
    names: Vec<String>,
    /// Tests passed across them, from libtest's per-test result lines.
    passed: usize,
}

#[derive(Serialize, Default)]
struct GuideReport {
    ok: bool,
    problems: Vec<String>,
}

#[derive(Serialize)]
struct ChapterReport {
    id: String,
    mode: &'static str,
    ok: bool,
    seconds: f64,
    reference: Count,
    held_out: Count,
    lint: bool,
    /// The tests of the packages the workspace carries besides the learner crate.
    packages: PackagesReport,
    labs: Vec<LabProof>,
    carried_green: bool,
    practice_command: bool,
    answer_free: bool,
    mutations: Mutations,
    guide: GuideReport,
    /// Why any check failed, one line each.
    problems: Vec<String>,
}

#[derive(Serialize)]
struct Report {
    ok: bool,
    seconds: f64,
    tree_problems: Vec<String>,
    chapters: Vec<ChapterReport>,
}

/// Progress goes to stdout, or to stderr when stdout carries the JSON document.
struct Out {
    json: bool,
}

impl Out {
    fn say(&self, line: &str) {
        let _ = if self.json {
            writeln!(std::io::stderr(), "{line}")
        } else {
            writeln!(std::io::stdout(), "{line}")
        };
    }
}

pub fn run(selected: &[String], json: bool) -> Result<bool, Failure> {
    let started = Instant::now();
    let out = Out { json };
    let course = Course::load()?;
    let mut tree_problems: Vec<String> = course
        .catalog
        .check_tree(&course.data, true)
        .iter()
        .map(ToString::to_string)
        .collect();
    if let Some(bytes) = course.data.get(TUTOR_GUIDE) {
        let mut problems = Vec::new();
        guide::check_commands(
            &course.catalog,
            &String::from_utf8_lossy(bytes),
            &mut problems,
        );
        tree_problems.extend(problems.into_iter().map(|p| format!("{TUTOR_GUIDE}：{p}")));
    }
    let chapters: Vec<&Chapter> = if selected.is_empty() {
        course.catalog.chapters().iter().collect()
    } else {
        selected
            .iter()
            .map(|input| course.chapter(input))
            .collect::<Result<_, _>>()?
    };

    let mut reports = Vec::new();
    if tree_problems.is_empty() {
        out.say(&format!(
            "✓ 课程清单与文件树一致（{} 章）",
            course.catalog.chapters().len()
        ));
        for chapter in chapters {
            out.say(&format!("== 第 {} 章：{}", chapter.id, chapter.title));
            let report = verify_chapter(&course, chapter, &out)?;
            reports.push(report);
        }
    } else {
        out.say("课程清单与文件树不一致：");
        for problem in &tree_problems {
            out.say(&format!("  ✗ {problem}"));
        }
    }
    let report = Report {
        ok: tree_problems.is_empty() && reports.iter().all(|r| r.ok),
        seconds: started.elapsed().as_secs_f64(),
        tree_problems,
        chapters: reports,
    };
    if json {
        let text = serde_json::to_string_pretty(&report).expect("report serialises");
        let _ = writeln!(std::io::stdout(), "{text}");
    } else {
        print_summary(&report);
    }
    Ok(report.ok)
}

fn mark(ok: bool) -> &'static str {
    if ok {
        "✓"
    } else {
        "✗"
    }
}

fn print_summary(report: &Report) {
    println!("\n== verify 汇总");
    println!("章节  参考   保留   lint  Lab 证明  无答案  错误实现（公开/全部/目录）  指南  用时");
    for chapter in &report.chapters {
        let labs_ok = chapter.labs.iter().all(|lab| lab.ok)
            && chapter.carried_green
            && chapter.practice_command;
        println!(
            "{:<5} {} {:>2}/{:<2} {} {:>2}/{:<2} {}     {} {:<6}  {}       {:>2}/{:>2}/{:<2} {}            {}     {:.1}s",
            chapter.id,
            mark(chapter.reference.passed == chapter.reference.total && chapter.reference.total > 0),
            chapter.reference.passed,
            chapter.reference.total,
            mark(chapter.held_out.passed == chapter.held_out.total && chapter.held_out.total > 0),
            chapter.held_out.passed,
            chapter.held_out.total,
            mark(chapter.lint),
            mark(labs_ok),
            chapter.labs.len(),
            mark(chapter.answer_free),
            chapter.mutations.killed_public,
            chapter.mutations.killed,
            chapter.mutations.total,
            mark(chapter.mutations.killed == chapter.mutations.total),
            mark(chapter.guide.ok),
            chapter.seconds
        );
    }
    let failed = report.chapters.iter().filter(|chapter| !chapter.ok).count();
    println!(
        "共 {} 章，{} 章失败，总用时 {:.1}s",
        report.chapters.len(),
        failed,
        report.seconds
    );
    // The plain closing line CI runners read: chapters proven, chapters failed.
    println!(
        "verify: {} passed, {failed} failed",
        report.chapters.len() - failed
    );
}

fn verify_chapter(course: &Course, chapter: &Chapter, out: &Out) -> Result<ChapterReport, Failure> {
    let started = Instant::now();
    let catalog = &course.catalog;
    let data = &course.data;
    let id = chapter.id;
    let mut problems = Vec::new();

    // Reference, with the held-out tests of the chain beside the acceptance tests.
    let reference = assemble::reference_with_held_out(catalog, data, chapter)?;
    let runner = course.materialize(&format!("{id}-reference"), &reference)?;
    let mut reference_count = Count::default();
    for step in catalog.chain(chapter) {
        match runner.run_chapter(&step.tests(), None) {
            Ok(groups) => {
                for group in groups.iter().filter(|group| !group.is_green()) {
                    problems.push(format!(
                        "参考实现：第 {} 章 {}",
                        step.id,
                        group.summary_line()
                    ));
                }
                if step.id == id {
                    reference_count.passed = groups.iter().map(GroupReport::passed).sum();
                    reference_count.total = groups.iter().map(|g| g.spec.tests).sum();
                }
            }
            Err(error) => {
                problems.push(format!("参考实现：第 {} 章测试无法运行：{error}", step.id))
            }
        }
    }
    out.say(&format!(
        "  {} 参考实现   本章 {}/{}",
        mark(problems.is_empty()),
        reference_count.passed,
        reference_count.total
    ));

    let held_out = match runner.run_tests(&held_out_target(chapter), None) {
        Ok(outcomes) => {
            for failed in outcomes.iter().filter(|o| !o.passed()) {
                problems.push(format!("保留测试 {} 失败", failed.name));
            }
            Count {
                passed: outcomes.iter().filter(|o| o.passed()).count(),
                total: outcomes.len(),
            }
        }
        Err(error) => {
            problems.push(format!("保留测试无法运行：{error}"));
            Count::default()
        }
    };
    if held_out.total == 0 {
        problems.push("本章没有保留测试".to_string());
    }
    out.say(&format!(
        "  {} 保留测试   {}/{}",
        mark(held_out.total > 0 && held_out.passed == held_out.total),
        held_out.passed,
        held_out.total
    ));

    let packages = added_packages(&reference);
    let lint_problems = lint(&runner, &packages);
    let lint_ok = lint_problems.is_empty();
    out.say(&format!(
        "  {} lint       clippy -D warnings 与 rustfmt",
        mark(lint_ok)
    ));
    problems.extend(lint_problems);

    let packages = test_packages(&runner, packages, &mut problems);
    if !packages.names.is_empty() {
        out.say(&format!(
            "  {} 附带包     {}：{} 个测试通过",
            mark(packages.ok),
            packages.names.join("、"),
            packages.passed
        ));
    }

    // The practice workspace exactly as `practice` writes it.
    let practice = assemble::practice(catalog, data, chapter)?;
    let leaks = assemble::answer_leaks(data, chapter, &practice)?;
    out.say(&format!(
        "  {} 无答案     练习目录 {} 个文件{}",
        mark(leaks.is_empty()),
        practice.len(),
        if leaks.is_empty() {
            String::new()
        } else {
            format!("：{}", leaks.join("；"))
        }
    ));
    let answer_free = leaks.is_empty();
    problems.extend(leaks);

    let practice_runner = course.materialize(&format!("{id}-practice"), &practice)?;
    let (carried_green, practice_command, mut labs) = match chapter.mode() {
        Mode::Observe => {
            let groups = practice_runner.run_chapter(&chapter.tests(), None);
            let green = groups
                .as_ref()
                .is_ok_and(|g| g.iter().all(GroupReport::is_green));
            if !green {
                problems.push("观察章节的练习目录应全部通过".to_string());
            }
            let command = practice_command(chapter, &practice_runner, &mut problems);
            (green, command, Vec::new())
        }
        Mode::Rebuild => {
            let carried = carried_chapters_green(course, chapter, &practice_runner, &mut problems);
            let command = practice_command(chapter, &practice_runner, &mut problems);
            (carried, command, Vec::new())
        }
    };
    out.say(&format!(
        "  {} 练习目录   之前各章保持绿色；练习目录里的 cargo xtask test 给出同样的结论",
        mark(carried_green && practice_command)
    ));
    for (lab, group) in chapter.labs() {
        let proof = prove_lab(course, chapter, lab, group, &mut problems)?;
        out.say(&format!(
            "  {} Lab {:<5}  完成之前的 Lab 后：{} 组以 {} 变红",
            mark(proof.ok),
            proof.lab,
            proof.group,
            proof.first_red
        ));
        labs.push(proof);
    }

    let mutations = check_mistakes(course, chapter, out, &mut problems)?;

    let guide = check_guide(course, chapter, &reference, &practice)?;
    out.say(&format!(
        "  {} 指南       学习契约：卡片、Lab 卡片、命令与计数",
        mark(guide.ok)
    ));
    problems.extend(guide.problems.iter().map(|p| format!("指南：{p}")));
    for problem in &problems {
        out.say(&format!("  ✗ {problem}"));
    }
    Ok(ChapterReport {
        id: id.to_string(),
        mode: chapter.mode().key(),
        ok: problems.is_empty(),
        seconds: started.elapsed().as_secs_f64(),
        reference: reference_count,
        held_out,
        lint: lint_ok,
        packages,
        labs,
        carried_green,
        practice_command,
        answer_free,
        mutations,
        guide,
        problems,
    })
}

/// The chapter guide against the learning contract.
fn check_guide(
    course: &Course,
    chapter: &Chapter,
    reference: &course_cli::assemble::Snapshot,
    practice: &course_cli::assemble::Snapshot,
) -> Result<GuideReport, Failure> {
    let text = course
        .data
        .get(chapter.guide().as_str())
        .map(|bytes| String::from_utf8_lossy(bytes).into_owned())
        .unwrap_or_default();
    let first_reds = match chapter.labs().next() {
        Some((lab, _)) => course_cli::learning::stub_messages(&course.data, chapter)?
            .remove(&lab)
            .unwrap_or_default(),
        None => Vec::new(),
    };
    let problems = guide::check(
        &course.catalog,
        chapter,
        &text,
        &first_reds,
        reference,
        practice,
    );
    Ok(GuideReport {
        ok: problems.is_empty(),
        problems,
    })
}

/// `cargo test` of the added packages (`pi-http`, `openai-mock`, `pi`): the given HTTP client
/// and the learner's agent as a program, run against a local server with the reference code.
fn test_packages(
    runner: &CargoRunner,
    names: Vec<String>,
    problems: &mut Vec<String>,
) -> PackagesReport {
    if names.is_empty() {
        return PackagesReport {
            ok: true,
            ..PackagesReport::default()
        };
    }
    let mut command = runner.command("test");
    for name in &names {
        command.args(["-p", name]);
    }
    let (ok, passed) = match command.output() {
        Ok(output) => {
            let passed = parse_test_run(&String::from_utf8_lossy(&output.stdout))
                .iter()
                .filter(|outcome| outcome.passed())
                .count();
            if !output.status.success() {
                problems.push(format!(
                    "附带包的测试失败：{}",
                    first_lines(&String::from_utf8_lossy(&output.stderr), 12)
                ));
            }
            (output.status.success(), passed)
        }
        Err(error) => {
            problems.push(format!("无法运行附带包的测试：{error}"));
            (false, 0)
        }
    };
    PackagesReport { ok, names, passed }
}

/// clippy `-D warnings` (learner crate and added packages) and rustfmt on the reference.
fn lint(runner: &CargoRunner, packages: &[String]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut clippy = runner.command("clippy");
    clippy.args(["--quiet", "-p", LEARNER_PACKAGE]);
    for name in packages {
        clippy.args(["-p", name]);
    }
    let clippy = clippy
        .args(["--all-targets", "--", "-D", "warnings"])
        .output();
    match clippy {
        Ok(output) if output.status.success() => {}
        Ok(output) => problems.push(format!(
            "clippy：{}",
            first_lines(&String::from_utf8_lossy(&output.stderr), 12)
        )),
        Err(error) => problems.push(format!("无法运行 clippy：{error}")),
    }
    match runner.plain("fmt").args(["--all", "--check"]).output() {
        Ok(output) if output.status.success() => {}
        Ok(output) => problems.push(format!(
            "rustfmt：{}",
            first_lines(&String::from_utf8_lossy(&output.stdout), 12)
        )),
        Err(error) => problems.push(format!("无法运行 rustfmt：{error}")),
    }
    problems
}

fn first_lines(text: &str, count: usize) -> String {
    text.lines().take(count).collect::<Vec<_>>().join("\n")
}

/// Every chapter the workspace carries besides the practised one is green.
fn carried_chapters_green(
    course: &Course,
    chapter: &Chapter,
    runner: &CargoRunner,
    problems: &mut Vec<String>,
) -> bool {
    let mut green = true;
    for step in course
        .catalog
        .chain(chapter)
        .into_iter()
        .filter(|step| step.id != chapter.id)
    {
        match runner.run_chapter(&step.tests(), None) {
            Ok(groups) => {
                for group in groups.iter().filter(|group| !group.is_green()) {
                    green = false;
                    problems.push(format!(
                        "练习目录：第 {} 章应保持绿色：{}",
                        step.id,
                        group.summary_line()
                    ));
                }
            }
            Err(error) => {
                green = false;
                problems.push(format!("练习目录：第 {} 章测试无法运行：{error}", step.id));
            }
        }
    }
    green
}

/// The workspace's own `cargo xtask test NN --group <first>` runs and tells the same story.
fn practice_command(chapter: &Chapter, runner: &CargoRunner, problems: &mut Vec<String>) -> bool {
    let Some(first) = chapter.groups.first() else {
        return false;
    };
    let mut command = runner.plain("xtask");
    command.args(["test", &chapter.id.to_string(), "--group", &first.name]);
    let output = match command.output() {
        Ok(output) => output,
        Err(error) => {
            problems.push(format!("练习目录的 cargo xtask 无法运行：{error}"));
            return false;
        }
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    let ok = match first.marker() {
        Some(marker) => output.status.code() == Some(1) && stdout.contains(&format!("{marker} ")),
        None => output.status.success(),
    };
    if !ok {
        problems.push(format!(
            "练习目录的 cargo xtask test {} --group {}：退出码 {:?}，输出：{} {}",
            chapter.id,
            first.name,
            output.status.code(),
            first_lines(&stdout, 6),
            first_lines(&String::from_utf8_lossy(&output.stderr), 6)
        ));
    }
    ok
}

/// With the Labs before `lab` solved: earlier groups green, `lab`'s group red on its own marker.
fn prove_lab(
    course: &Course,
    chapter: &Chapter,
    lab: course_cli::runner::LabId,
    group: &course_cli::runner::GroupSpec,
    problems: &mut Vec<String>,
) -> Result<LabProof, Failure> {
    let state = assemble::lab_state(&course.catalog, &course.data, chapter, Solved::Before(lab))?;
    let runner = course.materialize(&format!("{}-before-{lab}", chapter.id), &state)?;
    let mut ok = true;
    let mut first_red = String::new();
    match runner.run_chapter(&chapter.tests(), None) {
        Ok(groups) => {
            for report in &groups {
                let Some(this) = report.spec.lab else {
                    continue;
                };
                if this < lab && !report.is_green() {
                    ok = false;
                    problems.push(format!("Lab {lab} 之前应已通过：{}", report.summary_line()));
                }
                if this == lab {
                    first_red = report
                        .failures()
                        .next()
                        .and_then(|failure| failure.headline(120))
                        .unwrap_or_else(|| "（没有失败）".to_string());
                    if !report.is_red_on_own_marker() {
                        ok = false;
                        problems.push(format!(
                            "Lab {lab}：{} 组应全部以 {} 失败，实际看到 {}：{}",
                            group.name,
                            lab.marker(),
                            report.markers_hit().join("、"),
                            report.summary_line()
                        ));
                    }
                }
            }
        }
        Err(error) => {
            ok = false;
            first_red = "编译失败".to_string();
            problems.push(format!("Lab {lab} 之前的状态无法运行：{error}"));
        }
    }
    Ok(LabProof {
        lab: lab.to_string(),
        group: group.name.clone(),
        ok,
        first_red,
    })
}

fn check_mistakes(
    course: &Course,
    chapter: &Chapter,
    out: &Out,
    problems: &mut Vec<String>,
) -> Result<Mutations, Failure> {
    let mut mutations = Mutations {
        total: chapter.mistakes.len(),
        ..Mutations::default()
    };
    let tests = chapter.tests();
    for mistake in &chapter.mistakes {
        let mut snapshot =
            assemble::reference_with_held_out(&course.catalog, &course.data, chapter)?;
        let (killed_by, detail) = match assemble::apply_mistake(&mut snapshot, mistake) {
            Err(error) => ("none", error.to_string()),
            Ok(()) => {
                let runner = course.materialize(
                    &format!("{}-mistake-{}", chapter.id, mistake.name),
                    &snapshot,
                )?;
                match runner.run_chapter(&tests, Some(&mistake.group)) {
                    Err(error) => (
                        "none",
                        format!("无法编译或运行：{}", first_lines(&error.to_string(), 3)),
                    ),
                    Ok(groups) => {
                        let killing = groups
                            .iter()
                            .flat_map(|g| g.failures())
                            .find(|f| f.output.contains(&mistake.expect));
                        match killing {
                            Some(failure) => ("public", format!("{} 失败", failure.name)),
                            None => match runner.run_tests(&held_out_target(chapter), None) {
                                Ok(outcomes) if outcomes.iter().any(|o| !o.passed()) => (
                                    "held-out",
                                    format!(
                                        "公开的 {} 组没有以“{}”失败；保留测试捕获",
                                        mistake.group, mistake.expect
                                    ),
                                ),
                                _ => (
                                    "none",
                                    format!(
                                        "{} 组没有以“{}”失败，保留测试也没有",
                                        mistake.group, mistake.expect
                                    ),
                                ),
                            },
                        }
                    }
                }
            }
        };
        out.say(&format!(
            "    {} {:<40} {:<14} {}",
            match killed_by {
                "public" => "✓",
                "held-out" => "△",
                _ => "✗",
            },
            mistake.name,
            mistake.group,
            detail
        ));
        mutations.table.push(MistakeRow {
            name: mistake.name.clone(),
            group: mistake.group.clone(),
            killed_by,
            detail,
        });
    }
    mutations.killed = mutations
        .table
        .iter()
        .filter(|row| row.killed_by != "none")
        .count();
    mutations.killed_public = mutations
        .table
        .iter()
        .filter(|row| row.killed_by == "public")
        .count();
    out.say(&format!(
        "  {} 错误实现   公开测试捕获 {}/{}，加上保留测试 {}/{}",
        mark(mutations.killed == mutations.total && mutations.total > 0),
        mutations.killed_public,
        mutations.total,
        mutations.killed,
        mutations.total
    ));
    if mutations.killed < mutations.total {
        problems.push(format!(
            "错误实现未全部捕获：{}/{}",
            mutations.killed, mutations.total
        ));
    }
    let minimum = if chapter.mode() == Mode::Rebuild {
        MIN_MISTAKES
    } else {
        1
    };
    if mutations.total < minimum {
        problems.push(format!(
            "错误实现目录只有 {} 条，至少需要 {minimum} 条",
            mutations.total
        ));
    }
    if chapter.mode() == Mode::Rebuild
        && (mutations.killed_public as f64) < MIN_PUBLIC_KILL_RATE * mutations.total as f64
    {
        problems.push(format!(
            "公开测试只捕获 {}/{}，低于 {:.0}%",
            mutations.killed_public,
            mutations.total,
            MIN_PUBLIC_KILL_RATE * 100.0
        ));
    }
    Ok(mutations)
}
