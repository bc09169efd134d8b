//! `cargo xtask verify [NN…] [--json]`: prove every chapter, the way rustlings' `dev check`
//! and CodeCrafters' course checks do.
//!
//! Per chapter N: clippy (riding on the reference's own build) and rustfmt are clean;
//! reference N passes every group of its chain with the exact counts; N's held-out tests
//! pass; the packages the workspace carries pass their own tests; an overlay's `Cargo.lock`
//! extends the previous one and cargo accepts it; the practice workspace holds no region body
//! of N, keeps carried chapters green and its own `cargo xtask test` says so; for every Lab k,
//! the workspace with Labs before k solved is green on those Labs and red on exactly
//! `Lab N.k`; every entry of N's mistake catalogue is killed; the guide meets the learning
//! contract.
//!
//! The results are typed ([`crate::verdict`]); the verdict and every problem line derive from
//! them. Each state is materialised once and each of its test targets is built in one cargo
//! call, so cargo compiles them in parallel; the practice workspace doubles as the state of
//! the first Lab.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Instant;

use course_cli::assemble::{self, add_held_out, held_out_target, Snapshot};
use course_cli::catalog::{Chapter, Mistake, Mode, LOCK_FILE};
use course_cli::guide;
use course_cli::handout::handout;
use course_cli::plan::{Solved, WorkspacePlan};
use course_cli::runner::libtest::parse_test_run;
use course_cli::runner::{
    CargoRunner, ChapterTests, GroupReport, GroupSpec, LabId, LEARNER_PACKAGE,
};
use course_cli::sources::Sources;

use crate::checkout::{Course, Failure, Lane};
use crate::lockfile;
use crate::out;
use crate::verdict::{
    since, AnswerFree, ChapterReport, GreenRun, GroupRun, Guide, HeldOut, KilledBy, LabProof, Lint,
    Lock, MistakeRow, Mutations, Packages, Practice, Report, Step,
};

/// The tutor protocol every workspace carries; its commands and counts must be real too.
const TUTOR_GUIDE: &str = "chapters/_crate/AGENT_GUIDE.md";

/// A rebuild chapter's catalogue must hold at least this many realistic wrong implementations.
pub const MIN_MISTAKES: usize = 12;
/// Share of the catalogue the public tests alone must kill.
pub const MIN_PUBLIC_KILL_RATE: f64 = 0.95;

/// A state judged after the reference, in any lane: a Lab's "earlier Labs solved" state or
/// the reference with one catalogued mistake.
#[derive(Clone, Copy)]
enum SideState<'c> {
    Lab(LabId, &'c GroupSpec),
    Mistake(&'c Mistake),
}

/// What judging a [`SideState`] gives.
enum SideRow {
    Lab(LabProof),
    Mistake(MistakeRow),
}

/// Progress goes to stdout, or to stderr when stdout carries the JSON document.
struct Progress {
    json: bool,
}

impl Progress {
    fn say(&self, line: &str) {
        if self.json {
            out::note(line);
        } else {
            out::say(line);
        }
    }
}

fn mark(ok: bool) -> &'static str {
    if ok {
        "✓"
    } else {
        "✗"
    }
}

pub fn run(selected: &[String], json: bool) -> Result<bool, Failure> {
    let started = Instant::now();
    let progress = Progress { json };
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
        progress.say(&format!(
            "✓ 课程清单与文件树一致（{} 章）",
            course.catalog.chapters().len()
        ));
        let verifier = Verifier {
            course: &course,
            sources: Sources::new(&course.catalog, &course.data)?,
            progress: &progress,
        };
        // Each chapter's reference verdicts, kept when its whole chain was green.
        let mut proven: BTreeMap<String, Vec<GroupRun>> = BTreeMap::new();
        for chapter in chapters {
            progress.say(&format!("== 第 {} 章：{}", chapter.id, chapter.title));
            let reuse = course
                .catalog
                .previous(chapter)
                .filter(|_| course.catalog.only_adds_modules(chapter))
                .and_then(|previous| {
                    let id = previous.id.to_string();
                    proven.get(&id).map(|groups| Reuse { from: id, groups })
                });
            let report = verifier.chapter(chapter, reuse)?;
            if report.reference.errors.is_empty()
                && report.reference.groups.iter().all(|group| group.green)
            {
                proven.insert(report.id.clone(), report.reference.groups.clone());
            }
            reports.push(report);
        }
    } else {
        progress.say("课程清单与文件树不一致：");
        for problem in &tree_problems {
            progress.say(&format!("  ✗ {problem}"));
        }
    }
    let report = Report {
        seconds: since(started),
        tree_problems,
        chapters: reports,
    };
    if json {
        let text = serde_json::to_string_pretty(&report.to_json())
            .map_err(|error| Failure(format!("报告无法序列化：{error}")))?;
        out::say(text);
    } else {
        print_summary(&report);
    }
    Ok(report.ok())
}

fn print_summary(report: &Report) {
    out::say("\n== verify 汇总");
    out::say("章节  参考   保留   lint  Lab 证明  无答案  错误实现（公开/全部/目录）  指南  用时");
    for chapter in &report.chapters {
        let (passed, total) = chapter.reference.count(&chapter.id);
        let mutations = &chapter.mutations;
        out::say(format!(
            "{:<5} {} {:>2}/{:<2} {} {:>2}/{:<2} {}     {} {:<6}  {}       {:>2}/{:>2}/{:<2} {}            {}     {:.1}s",
            chapter.id,
            mark(chapter.step_ok(Step::Reference)),
            passed,
            total,
            mark(chapter.step_ok(Step::HeldOut)),
            chapter.held_out.passed,
            chapter.held_out.total,
            mark(chapter.step_ok(Step::Lint)),
            mark(chapter.step_ok(Step::Labs) && chapter.step_ok(Step::Practice)),
            chapter.labs.len(),
            mark(chapter.step_ok(Step::AnswerFree)),
            mutations.killed_public(),
            mutations.killed(),
            mutations.table.len(),
            mark(chapter.step_ok(Step::Mutations)),
            mark(chapter.step_ok(Step::Guide)),
            chapter.seconds
        ));
    }
    out::say("\n用时（秒）");
    let steps: Vec<Step> = Step::ALL
        .into_iter()
        .filter(|step| !matches!(step, Step::AnswerFree | Step::Guide))
        .collect();
    out::say(format!(
        "章节  {}",
        steps
            .iter()
            .map(|step| format!("{:>8}", step.label()))
            .collect::<Vec<_>>()
            .join(" ")
    ));
    for chapter in &report.chapters {
        out::say(format!(
            "{:<5} {}",
            chapter.id,
            steps
                .iter()
                .map(|step| format!("{:>8.1}", chapter.step_seconds(*step)))
                .collect::<Vec<_>>()
                .join(" ")
        ));
    }
    let failed = report
        .chapters
        .iter()
        .filter(|chapter| !chapter.ok())
        .count();
    out::say(format!(
        "共 {} 章，{} 章失败，总用时 {:.1}s",
        report.chapters.len(),
        failed,
        report.seconds
    ));
    // The plain closing line CI runners read: chapters proven, chapters failed.
    out::say(format!(
        "verify: {} passed, {failed} failed",
        report.chapters.len() - failed
    ));
}

fn first_lines(text: &str, count: usize) -> String {
    text.lines().take(count).collect::<Vec<_>>().join("\n")
}

struct Verifier<'a> {
    course: &'a Course,
    sources: Sources<'a>,
    progress: &'a Progress,
}

/// Earlier chapters' verdicts a state takes over instead of running their tests again: the
/// predecessor's green reference run, from this same `verify`, when the chapter only adds
/// modules (`Catalog::only_adds_modules`). Run alone, a chapter proves its whole chain.
struct Reuse<'r> {
    from: String,
    groups: &'r [GroupRun],
}

impl Reuse<'_> {
    /// Puts the reused groups in front of `run`'s own, in chain order.
    fn apply_to(&self, run: &mut GreenRun) {
        run.groups.splice(0..0, self.groups.iter().cloned());
        run.reused_from = Some(self.from.clone());
    }
}

/// The tail of a green-run line that says which verdicts were taken over.
fn reused_note(run: &GreenRun) -> String {
    match &run.reused_from {
        Some(from) => format!(
            "；之前各章沿用第 {from} 章参考实现的结论（本章只新增模块，之前的代码碰不到它们）"
        ),
        None => String::new(),
    }
}

impl Verifier<'_> {
    fn say(&self, line: &str) {
        self.progress.say(line);
    }

    fn chapter(&self, chapter: &Chapter, reuse: Option<Reuse>) -> Result<ChapterReport, Failure> {
        let started = Instant::now();
        let catalog = &self.course.catalog;
        let id = chapter.id.to_string();

        // Reference, with the held-out tests of the chain beside the acceptance tests.
        let plan = WorkspacePlan::new(catalog, chapter, Solved::All);
        let mut reference = assemble::workspace(&self.sources, &plan)?;
        add_held_out(&self.sources, &plan, &mut reference)?;
        let mut runner = self
            .course
            .materialize(&format!("{id}-reference"), &reference)?;
        runner.member_compiler = clippy_driver();
        let held_out_target = held_out_target(chapter);
        let judged: &[&Chapter] = match reuse {
            Some(_) => &[chapter],
            None => &plan.chain,
        };

        // First the state's one build, through clippy-driver: the lint, and every target the
        // runs below need.
        let learner_targets: Vec<String> = judged
            .iter()
            .map(|step| step.test_target())
            .chain([held_out_target.clone()])
            .collect();
        let lint = lint(&runner, &learner_targets, &plan.packages);
        self.say(&format!(
            "  {} lint       clippy -D warnings 与 rustfmt，同时构建本章要运行的目标（{:.1}s）",
            mark(lint.clippy.is_none() && lint.rustfmt.is_none()),
            lint.seconds
        ));

        let mut reference_run = green_run(&runner, judged);
        if let Some(reuse) = &reuse {
            reuse.apply_to(&mut reference_run);
        }
        let (passed, total) = reference_run.count(&id);
        self.say(&format!(
            "  {} 参考实现   本章 {passed}/{total}（{:.1}s）{}",
            mark(reference_run.groups.iter().all(|g| g.green) && reference_run.errors.is_empty()),
            reference_run.seconds,
            reused_note(&reference_run)
        ));

        let held_out = held_out_run(&runner, &held_out_target);
        self.say(&format!(
            "  {} 保留测试   {}/{}（{:.1}s）",
            mark(held_out.error.is_none() && held_out.failed.is_empty() && held_out.total > 0),
            held_out.passed,
            held_out.total,
            held_out.seconds
        ));

        let packages = test_packages(&runner, &plan.packages);
        if !packages.names.is_empty() {
            self.say(&format!(
                "  {} 附带包     {}：{} 个测试通过（{:.1}s）",
                mark(packages.failure.is_none()),
                packages.names.join("、"),
                packages.passed,
                packages.seconds
            ));
        }

        let lock = self.lock(&plan, &runner);
        if let Some(file) = &lock.file {
            self.say(&format!(
                "  {} Cargo.lock {file} 只增不改，cargo --locked 接受（{:.1}s）",
                mark(lock.problems.is_empty()),
                lock.seconds
            ));
        }

        // The practice workspace exactly as `practice` writes it.
        let practice_plan = WorkspacePlan::new(catalog, chapter, Solved::Nothing);
        let practice = handout(&self.sources, &practice_plan)?;
        let leaks = assemble::answer_leaks(&self.sources, chapter, &practice)?;
        self.say(&format!(
            "  {} 无答案     练习目录 {} 个文件{}",
            mark(leaks.is_empty()),
            practice.len(),
            if leaks.is_empty() {
                String::new()
            } else {
                format!("：{}", leaks.join("；"))
            }
        ));
        let answer_free = AnswerFree {
            files: practice.len(),
            leaks,
        };

        let (practice_check, first_lab) =
            self.practice(&practice_plan, &practice, reuse.as_ref())?;
        let carried = match &practice_check.run.reused_from {
            Some(_) => "",
            None => "之前各章保持绿色；",
        };
        self.say(&format!(
            "  {} 练习目录   {carried}练习目录里的 cargo xtask test 给出同样的结论（{:.1}s）{}",
            mark(
                practice_check.run.groups.iter().all(|g| g.green)
                    && practice_check.run.errors.is_empty()
                    && practice_check.command.is_none()
            ),
            practice_check.run.seconds,
            reused_note(&practice_check.run)
        ));

        // The first Lab was proven in the practice state (rebuild chapters); the later Labs'
        // states and the catalogue's are all the reference with some files changed, so one
        // pool of lanes judges them side by side.
        let mut labs: Vec<LabProof> = first_lab.into_iter().collect();
        labs.iter().for_each(|proof| self.say_lab(proof));
        let later_labs = chapter
            .labs()
            .skip(labs.len())
            .map(|(lab, group)| SideState::Lab(lab, group))
            .collect();
        let mutations = self.side_states(chapter, &reference, later_labs, &mut labs)?;

        let guide = self.guide(chapter, &reference, &practice)?;
        self.say(&format!(
            "  {} 指南       学习契约：卡片、Lab 卡片、命令与计数",
            mark(guide.problems.is_empty())
        ));
        let report = ChapterReport {
            id,
            mode: chapter.mode().key(),
            seconds: since(started),
            reference: reference_run,
            held_out,
            lint,
            packages,
            lock,
            answer_free,
            practice: practice_check,
            labs,
            mutations,
            guide,
        };
        for problem in report.problems() {
            self.say(&format!("  ✗ {problem}"));
        }
        Ok(report)
    }

    /// The member set's lock: a superset of the previous member set's with no version changed,
    /// and exactly what cargo wants for the workspace (`cargo metadata --locked`).
    fn lock(&self, plan: &WorkspacePlan, runner: &CargoRunner) -> Lock {
        let started = Instant::now();
        let chapter = plan.chapter;
        if !chapter.overlay.iter().any(|path| path == LOCK_FILE) {
            return Lock::default();
        }
        let file = format!("{}/{}", chapter.overlay_dir(), LOCK_FILE);
        let previous = lockfile::previous_lock(plan);
        let read = |path: &str| {
            self.course
                .data
                .get(path)
                .map(|bytes| String::from_utf8_lossy(bytes).into_owned())
                .unwrap_or_default()
        };
        let mut problems: Vec<String> = lockfile::changed_entries(&read(&previous), &read(&file))
            .into_iter()
            .map(|entry| format!("{file} 改动了 {previous} 里已有的依赖：{entry}"))
            .collect();
        if let Err(error) = lockfile::check_locked(runner) {
            problems.push(format!(
                "{file} 与工作区不符：{}；运行 cargo xtask lock {}",
                first_lines(&error, 3),
                chapter.id
            ));
        }
        Lock {
            seconds: since(started),
            file: Some(file),
            problems,
        }
    }

    /// The practice workspace: carried chapters green (an observe chapter's own groups too),
    /// its `cargo xtask test` for the first group agrees; for a rebuild chapter it is also the
    /// state "no Lab solved", so the first Lab is proven here without a second build.
    fn practice(
        &self,
        plan: &WorkspacePlan,
        practice: &Snapshot,
        reuse: Option<&Reuse>,
    ) -> Result<(Practice, Option<LabProof>), Failure> {
        let chapter = plan.chapter;
        let runner = self
            .course
            .materialize(&format!("{}-practice", chapter.id), practice)?;
        let started = Instant::now();
        // An observe chapter's practice code is its reference, whose chain was judged above:
        // its own groups are what is new here.
        // A chapter that only adds modules stubs nothing earlier code can reach: the carried
        // chapters' verdicts are the predecessor's reference verdicts.
        let (must_be_green, own_red): (Vec<&Chapter>, bool) = match (chapter.mode(), reuse) {
            (Mode::Observe, _) => (vec![chapter], false),
            (Mode::Rebuild, Some(_)) => (Vec::new(), true),
            (Mode::Rebuild, None) => (plan.carried().collect(), true),
        };
        let targets: Vec<String> = must_be_green
            .iter()
            .map(|step| step.test_target())
            .chain(own_red.then(|| chapter.test_target()))
            .collect();
        prebuild(&runner, &targets);
        let mut run = green_run(&runner, &must_be_green);
        if let Some(reuse) = reuse {
            reuse.apply_to(&mut run);
        }
        let first_lab = match chapter.labs().next() {
            Some((lab, group)) if own_red => {
                let proof_started = Instant::now();
                let mut proof = judge_lab(&runner, chapter, lab, group);
                proof.seconds = since(proof_started);
                Some(proof)
            }
            _ => None,
        };
        let command = practice_command(chapter, &runner);
        run.seconds = since(started) - first_lab.as_ref().map_or(0.0, |proof| proof.seconds);
        Ok((Practice { run, command }, first_lab))
    }

    /// With the Labs before `lab` solved: earlier groups green, `lab`'s group red on its own
    /// marker.
    fn prove_lab(
        &self,
        lane: Lane,
        chapter: &Chapter,
        lab: LabId,
        group: &GroupSpec,
    ) -> Result<LabProof, Failure> {
        let started = Instant::now();
        let plan = WorkspacePlan::new(&self.course.catalog, chapter, Solved::Before(lab));
        let state = assemble::workspace(&self.sources, &plan)?;
        let runner =
            self.course
                .materialize_in(lane, &format!("{}-before-{lab}", chapter.id), &state)?;
        let mut proof = judge_lab(&runner, chapter, lab, group);
        proof.seconds = since(started);
        Ok(proof)
    }

    fn say_lab(&self, proof: &LabProof) {
        self.say(&format!(
            "  {} Lab {:<5}  完成之前的 Lab 后：{} 组以 {} 变红（{:.1}s）",
            mark(proof.ok()),
            proof.lab,
            proof.group,
            proof.first_red,
            proof.seconds
        ));
    }

    fn say_mistake(&self, row: &MistakeRow) {
        self.say(&format!(
            "    {} {:<40} {:<14} {}（{:.1}s）",
            row.killed_by.mark(),
            row.name,
            row.group,
            row.detail,
            row.seconds
        ));
    }

    /// Judges the given Lab states, then every catalogue entry, several at a time (one
    /// [`Lane`] each): each state is the reference with some files changed, so lanes never
    /// share files. Lab proofs are pushed onto `labs`; rows are printed and kept in this order
    /// whatever order they finish in. The mistakes' seconds run from the pool's start, since
    /// the first mistakes are judged while the last Labs still are.
    fn side_states(
        &self,
        chapter: &Chapter,
        reference: &Snapshot,
        lab_states: Vec<SideState<'_>>,
        labs: &mut Vec<LabProof>,
    ) -> Result<Mutations, Failure> {
        let started = Instant::now();
        let rebuild = chapter.mode() == Mode::Rebuild;
        let mut mutations = Mutations {
            minimum: if rebuild { MIN_MISTAKES } else { 1 },
            public_rate: rebuild.then_some(MIN_PUBLIC_KILL_RATE),
            ..Mutations::default()
        };
        let states: Vec<SideState> = lab_states
            .into_iter()
            .chain(chapter.mistakes.iter().map(SideState::Mistake))
            .collect();
        let tests = chapter.tests();
        let next = AtomicUsize::new(0);
        let lanes = Lane::count().min(states.len()).max(1);
        // Seeded here, before any lane builds, never while lane 0 writes `build`.
        self.course.seed_lanes(lanes)?;
        let (sender, receiver) = mpsc::channel::<(usize, Result<SideRow, Failure>)>();
        std::thread::scope(|scope| {
            for lane in 0..lanes {
                let sender = sender.clone();
                let (next, tests, states) = (&next, &tests, &states);
                scope.spawn(move || loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    let Some(state) = states.get(index) else {
                        break;
                    };
                    let lane = Lane(lane);
                    let row = match *state {
                        SideState::Lab(lab, group) => {
                            self.prove_lab(lane, chapter, lab, group).map(SideRow::Lab)
                        }
                        SideState::Mistake(mistake) => self
                            .mistake(lane, chapter, reference, tests, mistake)
                            .map(SideRow::Mistake),
                    };
                    let failed = row.is_err();
                    if sender.send((index, row)).is_err() || failed {
                        break;
                    }
                });
            }
            drop(sender);
            let mut finished: BTreeMap<usize, Result<SideRow, Failure>> = BTreeMap::new();
            let mut printed = 0;
            for (index, row) in receiver {
                finished.insert(index, row);
                while let Some(row) = finished.remove(&printed) {
                    printed += 1;
                    match row? {
                        SideRow::Lab(proof) => {
                            self.say_lab(&proof);
                            labs.push(proof);
                        }
                        SideRow::Mistake(row) => {
                            self.say_mistake(&row);
                            mutations.table.push(row);
                        }
                    }
                }
            }
            Ok::<(), Failure>(())
        })?;
        mutations.seconds = since(started);
        let total = mutations.table.len();
        self.say(&format!(
            "  {} 错误实现   公开测试捕获 {}/{total}，加上保留测试 {}/{total}（{:.1}s，{lanes} 路并行）",
            mark(mutations.killed() == total && total > 0),
            mutations.killed_public(),
            mutations.killed(),
            mutations.seconds
        ));
        Ok(mutations)
    }

    /// One catalogue entry: the reference with the mistake applied, judged in `lane`.
    fn mistake(
        &self,
        lane: Lane,
        chapter: &Chapter,
        reference: &Snapshot,
        tests: &ChapterTests,
        mistake: &Mistake,
    ) -> Result<MistakeRow, Failure> {
        let started = Instant::now();
        let mut snapshot = reference.clone();
        let (killed_by, detail) = match assemble::apply_mistake(&mut snapshot, mistake) {
            Err(error) => (KilledBy::None, error.to_string()),
            Ok(()) => {
                let mut runner = self.course.materialize_in(
                    lane,
                    &format!("{}-mistake-{}", chapter.id, mistake.name),
                    &snapshot,
                )?;
                runner.all_at_once = true;
                judge_mistake(&runner, chapter, tests, mistake)
            }
        };
        Ok(MistakeRow {
            name: mistake.name.clone(),
            group: mistake.group.clone(),
            killed_by,
            detail,
            seconds: since(started),
        })
    }

    /// The chapter guide against the learning contract.
    fn guide(
        &self,
        chapter: &Chapter,
        reference: &Snapshot,
        practice: &Snapshot,
    ) -> Result<Guide, Failure> {
        let text = self
            .course
            .data
            .get(chapter.guide().as_str())
            .map(|bytes| String::from_utf8_lossy(bytes).into_owned())
            .unwrap_or_default();
        let first_reds = match chapter.labs().next() {
            Some((lab, _)) => self
                .sources
                .stub_messages(chapter)?
                .remove(&lab)
                .unwrap_or_default(),
            None => Vec::new(),
        };
        Ok(Guide {
            problems: guide::check(
                &self.course.catalog,
                chapter,
                &text,
                &first_reds,
                reference,
                practice,
            ),
        })
    }
}

/// Judges each chapter's groups from its test binary, built beforehand with the state's other
/// targets in one cargo call ([`prebuild`], or the reference's lint build), so cargo compiled
/// them in parallel; a target not built yet is built here.
fn green_run(runner: &CargoRunner, chapters: &[&Chapter]) -> GreenRun {
    let started = Instant::now();
    let mut run = GreenRun::default();
    for step in chapters {
        let id = step.id.to_string();
        match runner.run_chapter(&step.tests(), None) {
            Ok(groups) => run
                .groups
                .extend(groups.iter().map(|group| GroupRun::new(&id, group))),
            Err(error) => run.errors.push((id, first_lines(&error.to_string(), 12))),
        }
    }
    run.seconds = since(started);
    run
}

/// One `cargo test --no-run` for several test targets. Its failure needs no report here: each
/// target's own build, which follows and finds the rest fresh, reports its diagnostics.
fn prebuild(runner: &CargoRunner, targets: &[String]) {
    if targets.len() < 2 {
        return;
    }
    let mut command = runner.command("test");
    command.args(["--no-run", "--quiet", "-p", LEARNER_PACKAGE]);
    for target in targets {
        command.args(["--test", target]);
    }
    let _ = command.output();
}

fn held_out_run(runner: &CargoRunner, target: &str) -> HeldOut {
    let started = Instant::now();
    let mut held_out = HeldOut::default();
    match runner.run_tests(target, None) {
        Ok(outcomes) => {
            held_out.total = outcomes.len();
            held_out.passed = outcomes.iter().filter(|o| o.passed()).count();
            held_out.failed = outcomes
                .iter()
                .filter(|o| !o.passed())
                .map(|o| o.name.clone())
                .collect();
        }
        Err(error) => held_out.error = Some(first_lines(&error.to_string(), 12)),
    }
    held_out.seconds = since(started);
    held_out
}

/// `cargo test` of the added packages (`pi-http`, `openai-mock`, `pi`): the given HTTP client
/// and the learner's agent as a program, run against a local server with the reference code.
fn test_packages(runner: &CargoRunner, names: &[String]) -> Packages {
    let started = Instant::now();
    let mut packages = Packages {
        names: names.to_vec(),
        ..Packages::default()
    };
    if names.is_empty() {
        return packages;
    }
    let mut command = runner.command("test");
    for name in names {
        command.args(["-p", name]);
    }
    // The lint build's targets, so nothing builds again; no rustdoc run, since the added
    // packages have no doctests (a tidy test keeps it so).
    command.arg("--all-targets");
    match command.output() {
        Ok(output) => {
            packages.passed = parse_test_run(&String::from_utf8_lossy(&output.stdout))
                .iter()
                .filter(|outcome| outcome.passed())
                .count();
            if !output.status.success() {
                packages.failure = Some(first_lines(&String::from_utf8_lossy(&output.stderr), 12));
            }
        }
        Err(error) => packages.failure = Some(format!("无法运行：{error}")),
    }
    packages.seconds = since(started);
    packages
}

/// clippy `-D warnings` (learner crate and added packages) and rustfmt on the reference.
///
/// The clippy half is the reference state's own test build: `runner` compiles the workspace
/// members through clippy-driver ([`CargoRunner::member_compiler`]), which lints them on the
/// way, and the green run, the held-out run and the packages' tests that follow find every
/// target built. Any warning refuses, as `-D warnings` would; cargo replays a fresh target's
/// warnings, so a target built earlier is judged too.
///
/// The learner crate's targets are the ones the reference runs (`learner_targets`), and its
/// library with them. Not the library's unit-test harness: the learner crate has no unit
/// tests (a tidy test keeps it so). Not the earlier chapters' held-out tests: they were run
/// and linted in their own chapter, and nothing runs them here.
fn lint(runner: &CargoRunner, learner_targets: &[String], packages: &[String]) -> Lint {
    let started = Instant::now();
    let mut lint = Lint::default();
    let mut findings = lint_build(runner, learner_targets, packages);
    if runner.member_compiler.is_none() {
        // The build above was plain rustc: the state's build all the same, but no lint.
        findings.insert(
            0,
            "找不到 clippy-driver，无法 lint：先运行 rustup component add clippy".to_string(),
        );
    }
    if !findings.is_empty() {
        lint.clippy = Some(first_lines(&findings.join("\n"), 12));
    }
    match runner.plain("fmt").args(["--all", "--check"]).output() {
        Ok(output) if output.status.success() => {}
        Ok(output) => {
            lint.rustfmt = Some(first_lines(&String::from_utf8_lossy(&output.stdout), 12))
        }
        Err(error) => lint.rustfmt = Some(format!("无法运行：{error}")),
    }
    lint.seconds = since(started);
    lint
}

/// The reference state's one build, which [`lint`] judges, in two cargo calls: the learner crate's targets, then the added
/// packages' (`--all-targets`, the ones their tests need). What refuses: each member
/// diagnostic, or cargo's own error when it failed without one.
fn lint_build(
    runner: &CargoRunner,
    learner_targets: &[String],
    packages: &[String],
) -> Vec<String> {
    let mut learner = runner.command("test");
    learner.args(["-p", LEARNER_PACKAGE]);
    for target in learner_targets {
        learner.args(["--test", target]);
    }
    let mut builds = vec![learner];
    if !packages.is_empty() {
        let mut added = runner.command("test");
        for name in packages {
            added.args(["-p", name]);
        }
        added.arg("--all-targets");
        builds.push(added);
    }
    let mut findings = Vec::new();
    for mut build in builds {
        match build
            .args(["--no-run", "--quiet", "--message-format=json"])
            .output()
        {
            Ok(output) => {
                let diagnostics = member_diagnostics(&String::from_utf8_lossy(&output.stdout));
                if diagnostics.is_empty() && !output.status.success() {
                    findings.push(String::from_utf8_lossy(&output.stderr).into_owned());
                }
                findings.extend(diagnostics);
            }
            Err(error) => findings.push(format!("无法运行：{error}")),
        }
    }
    findings
}

/// The rendered warnings and errors in cargo's `--message-format=json` output. Only the
/// workspace members can have any: cargo caps the lints of dependencies.
fn member_diagnostics(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|message| message["reason"] == "compiler-message")
        .filter(|message| {
            matches!(
                message["message"]["level"].as_str(),
                Some("warning" | "error")
            )
        })
        .filter_map(|message| message["message"]["rendered"].as_str().map(str::to_string))
        .collect()
}

/// The toolchain's clippy-driver: beside the cargo running this xtask (cargo tells the
/// programs it runs where it is, in `CARGO`), so it matches the rustc that compiles the
/// dependencies; else the first on the PATH; `None` when clippy is not installed.
fn clippy_driver() -> Option<PathBuf> {
    let file = format!("clippy-driver{}", std::env::consts::EXE_SUFFIX);
    let cargo_dir = std::env::var_os("CARGO")
        .and_then(|cargo| Some(PathBuf::from(cargo).parent()?.to_path_buf()));
    let path_dirs = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .unwrap_or_default();
    cargo_dir
        .into_iter()
        .chain(path_dirs)
        .map(|dir| dir.join(&file))
        .find(|driver| driver.is_file())
}

/// The workspace's own `cargo xtask test NN --group <first>` runs and tells the same story;
/// `None` when it does.
fn practice_command(chapter: &Chapter, runner: &CargoRunner) -> Option<String> {
    let Some(first) = chapter.groups.first() else {
        return Some("本章没有测试组".to_string());
    };
    let mut command = runner.plain("xtask");
    command.args(["test", &chapter.id.to_string(), "--group", &first.name]);
    let output = match command.output() {
        Ok(output) => output,
        Err(error) => return Some(format!("练习目录的 cargo xtask 无法运行：{error}")),
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    let agrees = match first.marker() {
        Some(marker) => output.status.code() == Some(1) && stdout.contains(&format!("{marker} ")),
        None => output.status.success(),
    };
    (!agrees).then(|| {
        format!(
            "练习目录的 cargo xtask test {} --group {}：退出码 {:?}，输出：{} {}",
            chapter.id,
            first.name,
            output.status.code(),
            first_lines(&stdout, 6),
            first_lines(&String::from_utf8_lossy(&output.stderr), 6)
        )
    })
}

/// Judges one Lab in a materialised "Labs before it solved" state.
fn judge_lab(runner: &CargoRunner, chapter: &Chapter, lab: LabId, group: &GroupSpec) -> LabProof {
    let mut proof = LabProof {
        lab: lab.to_string(),
        group: group.name.clone(),
        marker: lab.marker(),
        seconds: 0.0,
        first_red: String::new(),
        earlier_red: Vec::new(),
        own_marker: false,
        seen: String::new(),
        error: None,
    };
    match runner.run_chapter(&chapter.tests(), None) {
        Ok(groups) => {
            for report in &groups {
                let Some(this) = report.spec.lab else {
                    continue;
                };
                if this < lab && !report.is_green() {
                    proof.earlier_red.push(report.summary_line());
                }
                if this == lab {
                    proof.first_red = first_red(report);
                    proof.own_marker = report.is_red_on_own_marker();
                    proof.seen = format!(
                        "{}：{}",
                        report.markers_hit().join("、"),
                        report.summary_line()
                    );
                }
            }
        }
        Err(error) => {
            proof.first_red = "编译失败".to_string();
            proof.error = Some(first_lines(&error.to_string(), 12));
        }
    }
    proof
}

fn first_red(report: &GroupReport) -> String {
    report
        .failures()
        .next()
        .and_then(|failure| failure.headline(120))
        .unwrap_or_else(|| "（没有失败）".to_string())
}

/// Runs a mistake's group (and, if the public tests miss it, the held-out tests) in its
/// materialised state.
fn judge_mistake(
    runner: &CargoRunner,
    chapter: &Chapter,
    tests: &ChapterTests,
    mistake: &Mistake,
) -> (KilledBy, String) {
    let groups = match runner.run_chapter(tests, Some(&mistake.group)) {
        Err(error) => {
            return (
                KilledBy::None,
                format!("无法编译或运行：{}", first_lines(&error.to_string(), 3)),
            )
        }
        Ok(groups) => groups,
    };
    let killing = groups
        .iter()
        .flat_map(|g| g.failures())
        .find(|f| f.output.contains(&mistake.expect));
    if let Some(failure) = killing {
        return (KilledBy::Public, format!("{} 失败", failure.name));
    }
    match runner.run_tests(&held_out_target(chapter), None) {
        Ok(outcomes) if outcomes.iter().any(|o| !o.passed()) => (
            KilledBy::HeldOut,
            format!(
                "公开的 {} 组没有以“{}”失败；保留测试捕获",
                mistake.group, mistake.expect
            ),
        ),
        _ => (
            KilledBy::None,
            format!(
                "{} 组没有以“{}”失败，保留测试也没有",
                mistake.group, mistake.expect
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::member_diagnostics;

    /// Lines as cargo prints them with `--message-format=json`, shortened.
    const BUILD_OUTPUT: &str = r#"{"reason":"compiler-artifact","package_id":"path+file:///w/pi-course#0.1.0","target":{"name":"pi_course"},"fresh":false}
{"reason":"compiler-message","package_id":"path+file:///w/pi-course#0.1.0","target":{"name":"14_eval_capstone"},"message":{"level":"warning","code":{"code":"clippy::clone_on_copy"},"rendered":"warning: using `clone` on type `u8` which implements the `Copy` trait\n"}}
{"reason":"compiler-message","package_id":"path+file:///w/pi#0.1.0","target":{"name":"pi"},"message":{"level":"note","code":null,"rendered":"note: a note alone refuses nothing\n"}}
{"reason":"compiler-message","package_id":"path+file:///w/pi#0.1.0","target":{"name":"pi"},"message":{"level":"error","code":{"code":"E0308"},"rendered":"error[E0308]: mismatched types\n"}}
not json: cargo's own words on stderr never reach stdout, but a stray line must not stop the scan
{"reason":"build-finished","success":false}"#;

    #[test]
    fn warnings_and_errors_refuse_and_nothing_else_does() {
        assert_eq!(
            member_diagnostics(BUILD_OUTPUT),
            [
                "warning: using `clone` on type `u8` which implements the `Copy` trait\n",
                "error[E0308]: mismatched types\n",
            ],
            "the lint build refuses on each warning or error a member's compile reports, as clippy -D warnings does"
        );
        assert!(
            member_diagnostics(r#"{"reason":"build-finished","success":true}"#).is_empty(),
            "a clean build has no finding"
        );
    }
}
