//! `cargo xtask verify`: prove every chapter, the way rustlings' `dev check` and
//! CodeCrafters' course checks do.
//!
//! Per chapter N: the manifest matches the tree; reference N passes every group of every
//! chapter up to N with the exact counts; N's held-out tests pass; clippy and rustfmt are
//! clean; practice N (built by the same code `practice` uses) compiles, fails each new group
//! with its Lab marker and keeps earlier chapters green, and its own `cargo xtask test` says
//! so; practice N holds no answer; every declared mutation is caught by its group.

use std::process::Command;
use std::time::Instant;

use course_cli::assemble::{self, held_out_path};
use course_cli::catalog::{Chapter, Mode};
use course_cli::runner::{run_chapter, run_tests, GroupReport, RunSettings, LEARNER_PACKAGE};

use crate::checkout::{cargo, Course};

/// One cell of the report.
struct Check {
    label: &'static str,
    ok: bool,
    detail: String,
}

struct ChapterReport {
    id: String,
    checks: Vec<Check>,
    seconds: f64,
}

pub fn run(selected: &[String]) -> Result<bool, String> {
    let started = Instant::now();
    let course = Course::load()?;
    let problems = course.catalog.check_tree(&course.data);
    if !problems.is_empty() {
        println!("课程清单与文件树不一致：");
        for problem in &problems {
            println!("  ✗ {problem}");
        }
        return Ok(false);
    }
    println!(
        "✓ 课程清单与文件树一致（{} 章）",
        course.catalog.chapters().len()
    );

    let chapters: Vec<&Chapter> = if selected.is_empty() {
        course.catalog.chapters().iter().collect()
    } else {
        selected
            .iter()
            .map(|input| {
                course
                    .catalog
                    .resolve(input)
                    .map_err(|error| error.to_string())
            })
            .collect::<Result<_, _>>()?
    };

    let mut reports = Vec::new();
    for chapter in chapters {
        println!("== 第 {} 章：{}", chapter.id, chapter.title);
        let chapter_started = Instant::now();
        let checks = verify_chapter(&course, chapter)?;
        for check in &checks {
            let mark = if check.ok { "✓" } else { "✗" };
            println!("  {mark} {:<8} {}", check.label, check.detail);
        }
        reports.push(ChapterReport {
            id: chapter.id.clone(),
            checks,
            seconds: chapter_started.elapsed().as_secs_f64(),
        });
    }

    print_summary(&reports, started.elapsed().as_secs_f64());
    Ok(reports
        .iter()
        .all(|report| report.checks.iter().all(|check| check.ok)))
}

fn print_summary(reports: &[ChapterReport], total_seconds: f64) {
    println!("\n== verify 汇总");
    if let Some(first) = reports.first() {
        let header: Vec<&str> = first.checks.iter().map(|check| check.label).collect();
        println!("章节  {}  用时", header.join("  "));
    }
    for report in reports {
        let cells: Vec<String> = report
            .checks
            .iter()
            .map(|check| {
                let mark = if check.ok { "✓" } else { "✗" };
                format!("{mark:<width$}", width = check.label.chars().count())
            })
            .collect();
        println!(
            "{:<5} {}  {:.1}s",
            report.id,
            cells.join("  "),
            report.seconds
        );
    }
    let failed = reports
        .iter()
        .filter(|report| report.checks.iter().any(|check| !check.ok))
        .count();
    println!(
        "共 {} 章，{} 章失败，总用时 {total_seconds:.1}s",
        reports.len(),
        failed
    );
}

fn verify_chapter(course: &Course, chapter: &Chapter) -> Result<Vec<Check>, String> {
    let id = &chapter.id;
    let catalog = &course.catalog;
    let data = &course.data;
    let text = |error: assemble::AssembleError| error.to_string();
    let mut checks = Vec::new();

    // Reference (with held-out tests beside the acceptance tests).
    let reference = assemble::reference_with_held_out(catalog, data, id).map_err(text)?;
    let settings = course.materialize(&format!("{id}-reference"), &reference)?;
    let mut reference_ok = true;
    let mut reference_detail = Vec::new();
    for step in catalog.chain(id) {
        match run_chapter(&settings, &step.tests(), None) {
            Ok(groups) => {
                let passed: usize = groups.iter().map(GroupReport::passed).sum();
                let expected: usize = groups.iter().map(|group| group.spec.count).sum();
                if !groups.iter().all(GroupReport::is_green) {
                    reference_ok = false;
                    for group in groups.iter().filter(|group| !group.is_green()) {
                        reference_detail.push(format!("{} {}", step.id, group.summary_line()));
                    }
                }
                if step.id == *id {
                    reference_detail.insert(0, format!("本章 {passed}/{expected}"));
                }
            }
            Err(error) => {
                reference_ok = false;
                reference_detail.push(format!("第 {} 章测试无法运行：{error}", step.id));
            }
        }
    }
    checks.push(Check {
        label: "参考实现",
        ok: reference_ok,
        detail: reference_detail.join("；"),
    });

    checks.push(match &chapter.held_out {
        None => Check {
            label: "保留测试",
            ok: true,
            detail: "本章没有保留测试".into(),
        },
        Some(held_out) => {
            let target = held_out_path(held_out);
            let target = target
                .rsplit('/')
                .next()
                .and_then(|file| file.strip_suffix(".rs"))
                .unwrap_or_default()
                .to_string();
            match run_tests(&settings, &target, None) {
                Ok(outcomes) => {
                    let passed = outcomes.iter().filter(|outcome| outcome.passed).count();
                    let failed: Vec<&str> = outcomes
                        .iter()
                        .filter(|outcome| !outcome.passed)
                        .map(|outcome| outcome.name.as_str())
                        .collect();
                    Check {
                        label: "保留测试",
                        ok: !outcomes.is_empty() && failed.is_empty(),
                        detail: if failed.is_empty() {
                            format!("{passed}/{} 通过", outcomes.len())
                        } else {
                            format!("失败：{}", failed.join("、"))
                        },
                    }
                }
                Err(error) => Check {
                    label: "保留测试",
                    ok: false,
                    detail: error.to_string(),
                },
            }
        }
    });

    checks.push(lint(&settings));

    // Practice: the very snapshot `practice` would write.
    let practice = assemble::practice(catalog, data, id).map_err(text)?;
    let practice_settings = course.materialize(&format!("{id}-practice"), &practice)?;
    checks.push(check_practice(
        catalog.chain(id),
        chapter,
        &practice_settings,
    ));
    checks.push(check_practice_command(chapter, &practice_settings));

    let leaks = assemble::answer_leaks(catalog, data, id, &practice).map_err(text)?;
    checks.push(Check {
        label: "无答案",
        ok: leaks.is_empty(),
        detail: if leaks.is_empty() {
            format!("{} 个文件，不含本章答案与保留测试", practice.len())
        } else {
            format!("泄露：{}", leaks.join("、"))
        },
    });

    checks.push(check_mutations(course, chapter)?);
    Ok(checks)
}

fn lint(settings: &RunSettings) -> Check {
    let run = |args: &[&str]| {
        let mut command = Command::new(cargo());
        command.args(args).current_dir(&settings.workspace);
        if let Some(target_dir) = &settings.target_dir {
            command.env("CARGO_TARGET_DIR", target_dir);
        }
        command.output()
    };
    let clippy = run(&[
        "clippy",
        "--quiet",
        "--locked",
        "-p",
        LEARNER_PACKAGE,
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]);
    let fmt = run(&["fmt", "--all", "--check"]);
    let mut problems = Vec::new();
    match clippy {
        Ok(output) if output.status.success() => {}
        Ok(output) => problems.push(format!(
            "clippy：{}",
            first_lines(&String::from_utf8_lossy(&output.stderr), 12)
        )),
        Err(error) => problems.push(format!("无法运行 clippy：{error}")),
    }
    match fmt {
        Ok(output) if output.status.success() => {}
        Ok(output) => problems.push(format!(
            "rustfmt：{}",
            first_lines(&String::from_utf8_lossy(&output.stdout), 12)
        )),
        Err(error) => problems.push(format!("无法运行 rustfmt：{error}")),
    }
    Check {
        label: "lint",
        ok: problems.is_empty(),
        detail: if problems.is_empty() {
            "clippy -D warnings 与 rustfmt 通过".into()
        } else {
            problems.join("；")
        },
    }
}

fn first_lines(text: &str, count: usize) -> String {
    text.lines().take(count).collect::<Vec<_>>().join("\n")
}

/// New groups red with their markers (rebuild) or green (observe); earlier chapters green.
fn check_practice(chain: Vec<&Chapter>, chapter: &Chapter, settings: &RunSettings) -> Check {
    let mut ok = true;
    let mut details = Vec::new();
    for step in chain {
        let is_new = step.id == chapter.id && chapter.mode == Mode::Rebuild;
        match run_chapter(settings, &step.tests(), None) {
            Ok(groups) => {
                for group in &groups {
                    let good = if is_new {
                        group.is_red_with_marker()
                    } else {
                        group.is_green()
                    };
                    if !good {
                        ok = false;
                        let expectation = if is_new {
                            "应以 Lab 标记失败"
                        } else {
                            "应保持绿色"
                        };
                        details.push(format!(
                            "{} {}（{expectation}）",
                            step.id,
                            group.summary_line()
                        ));
                    }
                }
                if is_new && ok {
                    let markers: Vec<&str> = groups
                        .iter()
                        .map(|group| group.spec.marker.as_str())
                        .collect();
                    details.push(format!(
                        "本章各组以 {} 变红，之前各章保持绿色",
                        markers.join(" / ")
                    ));
                }
            }
            Err(error) => {
                ok = false;
                details.push(format!("第 {} 章测试无法运行：{error}", step.id));
            }
        }
    }
    if ok && details.is_empty() {
        details.push("全部测试组通过（观察模式）".into());
    }
    Check {
        label: "练习",
        ok,
        detail: details.join("；"),
    }
}

/// The practice workspace's own `cargo xtask test` works and tells the same story.
fn check_practice_command(chapter: &Chapter, settings: &RunSettings) -> Check {
    let Some(first) = chapter.groups.first() else {
        return Check {
            label: "练习命令",
            ok: false,
            detail: "本章没有测试组".into(),
        };
    };
    let mut command = Command::new(cargo());
    command
        .args(["xtask", "test", &chapter.id, "--group", &first.name])
        .current_dir(&settings.workspace);
    if let Some(target_dir) = &settings.target_dir {
        command.env("CARGO_TARGET_DIR", target_dir);
    }
    match command.output() {
        Ok(output) => {
            let stdout = String::from_utf8_lossy(&output.stdout);
            let rebuild = chapter.mode == Mode::Rebuild;
            let ok = if rebuild {
                output.status.code() == Some(1) && stdout.contains(&first.marker)
            } else {
                output.status.success()
            };
            let shown = stdout.lines().nth(1).unwrap_or_default().trim().to_string();
            Check {
                label: "练习命令",
                ok,
                detail: if ok {
                    format!(
                        "cargo xtask test {} --group {} → {shown}",
                        chapter.id, first.name
                    )
                } else {
                    format!(
                        "退出码 {:?}，输出：{} {}",
                        output.status.code(),
                        first_lines(&stdout, 6),
                        first_lines(&String::from_utf8_lossy(&output.stderr), 6)
                    )
                },
            }
        }
        Err(error) => Check {
            label: "练习命令",
            ok: false,
            detail: format!("无法运行：{error}"),
        },
    }
}

fn check_mutations(course: &Course, chapter: &Chapter) -> Result<Check, String> {
    let mut caught = 0;
    let mut details = Vec::new();
    for mutation in &chapter.mutations {
        let mut snapshot = assemble::reference(&course.catalog, &course.data, &chapter.id)
            .map_err(|error| error.to_string())?;
        if let Err(error) = assemble::apply_mutation(&mut snapshot, mutation) {
            details.push(error.to_string());
            continue;
        }
        let settings = course.materialize(
            &format!("{}-mutant-{}", chapter.id, mutation.name),
            &snapshot,
        )?;
        match run_chapter(&settings, &chapter.tests(), Some(&mutation.group)) {
            Ok(groups) => {
                let killed = groups.iter().any(|group| {
                    !group.is_green()
                        && group
                            .failures()
                            .any(|failure| failure.output.contains(&mutation.expect))
                });
                if killed {
                    caught += 1;
                    details.push(format!("{} 被 {} 组捕获", mutation.name, mutation.group));
                } else {
                    details.push(format!(
                        "{} 未被捕获：{} 组没有出现含“{}”的失败",
                        mutation.name, mutation.group, mutation.expect
                    ));
                }
            }
            Err(error) => details.push(format!("{} 无法运行：{error}", mutation.name)),
        }
    }
    Ok(Check {
        label: "变异",
        ok: caught == chapter.mutations.len() && caught > 0,
        detail: format!(
            "{caught}/{} 捕获；{}",
            chapter.mutations.len(),
            details.join("；")
        ),
    })
}
