//! `practice 06 <dir>`: hand a learner a fresh, isolated workspace for one chapter.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::Parser;

use course_cli::assemble;
use course_cli::catalog::{Catalog, Chapter, Mode};
use course_cli::files;
use course_cli::learning;

#[derive(Parser, Debug)]
#[command(
    name = "practice",
    about = "生成 pi-course 某一章的独立练习工作区",
    help_template = "{about}\n\n用法：{usage}\n\n{all-args}",
    disable_help_flag = true,
    disable_version_flag = true,
    allow_negative_numbers = true
)]
struct Cli {
    /// 章节编号，例如 06 或 6
    #[arg(help_heading = "参数")]
    chapter: Option<String>,
    /// 输出目录（必须不存在或为空）；默认 ../pi-practice-NN
    #[arg(help_heading = "参数")]
    dir: Option<PathBuf>,
    /// 列出所有章节、标题与模式
    #[arg(long, help_heading = "选项")]
    list: bool,
    /// 显示帮助
    #[arg(short, long, action = clap::ArgAction::Help, help_heading = "选项")]
    help: Option<bool>,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) if error.kind() == ErrorKind::DisplayHelp => {
            print!("{error}");
            return ExitCode::SUCCESS;
        }
        Err(error) => return fail(&usage_error(&error)),
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => fail(&message),
    }
}

fn fail(message: &str) -> ExitCode {
    eprintln!("错误：{message}");
    ExitCode::from(2)
}

/// clap's own messages are English; a learner gets one Chinese line instead.
fn usage_error(error: &clap::Error) -> String {
    let detail = match error.kind() {
        ErrorKind::UnknownArgument => "有无法识别的参数",
        ErrorKind::TooManyValues | ErrorKind::ArgumentConflict => "参数过多",
        _ => "参数无效",
    };
    format!(
        "{detail}。用法：practice <章节> [目录] 或 practice --list；运行 practice --help 查看说明"
    )
}

fn run(cli: Cli) -> Result<(), String> {
    let data = files::embedded();
    let catalog = Catalog::from_files(&data).map_err(|error| error.to_string())?;

    if cli.list {
        if cli.chapter.is_some() {
            return Err("--list 不接受章节参数；去掉章节编号再运行".to_string());
        }
        print_list(&catalog);
        return Ok(());
    }
    let Some(chapter_arg) = cli.chapter else {
        return Err(format!(
            "请指定章节编号，例如 practice 06 ../pi-practice-06；可选章节：{}",
            catalog.ids().join(" ")
        ));
    };
    let chapter = catalog
        .resolve(&chapter_arg)
        .map_err(|error| error.to_string())?;
    let target = cli
        .dir
        .unwrap_or_else(|| PathBuf::from(format!("../pi-practice-{}", chapter.id)));

    let snapshot =
        assemble::practice(&catalog, &data, chapter).map_err(|error| error.to_string())?;
    let written = course_cli::write::write_new_workspace(&snapshot, &target)
        .map_err(|error| error.to_string())?;
    print_summary(chapter, &written);
    Ok(())
}

fn print_list(catalog: &Catalog) {
    println!("{:<4} {:<6} 标题", "章节", "模式");
    for chapter in catalog.chapters() {
        println!(
            "{:<6} {:<6} {}",
            chapter.id,
            chapter.mode().label(),
            chapter.title
        );
    }
}

fn print_summary(chapter: &Chapter, dir: &std::path::Path) {
    println!("已生成第 {} 章练习工作区：{}", chapter.id, chapter.title);
    println!("  模式：{}", chapter.mode().label());
    println!("  目录：{}", dir.display());
    if !chapter.edit().is_empty() {
        let files: Vec<String> = chapter
            .edit()
            .iter()
            .map(|file| file.in_workspace().to_string())
            .collect();
        println!("  要编辑的文件：{}", files.join("、"));
    }
    let first = match (chapter.mode(), chapter.groups.first()) {
        (Mode::Rebuild, Some(group)) => {
            format!("cargo xtask test {} --group {}", chapter.id, group.name)
        }
        _ => "cargo run -p pi-course --example prologue".to_string(),
    };
    println!("  第一步：cd {} && {first}", dir.display());
    println!("  完整说明见 {}", dir.join(learning::FILE_NAME).display());
}
