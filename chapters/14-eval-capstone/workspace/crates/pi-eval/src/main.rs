//! `pi-eval [DIR] [--json] [--real]`: runs eval case files through chapter 14's runner.
//!
//! Without `DIR` it runs the cases shipped beside this crate (`cases/`). Each `*.json` file
//! in the directory is one case (format in `case.rs`); they run one after another, in file
//! name order, each in a fresh workspace under the system temp dir with chapter 08's tools
//! and chapter 13's runtime. Offline (the default) a case's `script` is played by an
//! openai-mock server on 127.0.0.1 started for that run; `--real` talks to the endpoint the
//! `OPENAI_COMPATIBLE_*` variables name, exactly as `pi` does.
//!
//! Output: one line per case (the report's `Display`: fixed words and counts only) and a
//! summary, or with `--json` the reports as a JSON array. Exit 0 when every case passed, 1
//! when one did not, 2 when the input is unusable (one Chinese line on stderr).

mod case;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use case::{parse_case, CaseFile};
use openai_mock::MockServer;
use pi_course::coding_tools::CodingTools;
use pi_course::context_compaction::Budget;
use pi_course::eval::{run_eval_suite, EvalCase, EvalStatus, EvalWorkspace, Fault, PreparedEval};
use pi_course::http_transport::{Endpoint, DEFAULT_BASE_URL};
use pi_course::runtime_modes::{create_runtime, ContextBudget, RuntimeConfig, RuntimeDeps};
use pi_course::session_tree::InMemorySessionStore;
use pi_course::types::Model;

const USAGE: &str = "用法：pi-eval [目录] [--json] [--real]";
const SYSTEM_PROMPT: &str = "你是一个编码助手：在工作区里用 read、write、edit、bash 完成任务。";

/// Where the model of every run comes from.
#[derive(Clone)]
enum Source {
    /// Each run starts its own openai-mock with the case's script.
    Offline,
    Real {
        endpoint: Endpoint,
        model: String,
    },
}

struct Options {
    dir: PathBuf,
    json: bool,
    real: bool,
}

fn parse_args(args: impl Iterator<Item = String>) -> Result<Option<Options>, String> {
    let mut options = Options {
        dir: Path::new(env!("CARGO_MANIFEST_DIR")).join("cases"),
        json: false,
        real: false,
    };
    let mut dir_given = false;
    for arg in args {
        match arg.as_str() {
            "-h" | "--help" => return Ok(None),
            "--json" => options.json = true,
            "--real" => options.real = true,
            flag if flag.starts_with('-') => {
                return Err(format!("不认识的选项 {flag}；{USAGE}"));
            }
            dir if !dir_given => {
                options.dir = PathBuf::from(dir);
                dir_given = true;
            }
            _ => return Err(format!("只能给一个目录；{USAGE}")),
        }
    }
    Ok(Some(options))
}

/// Every `*.json` file of `dir`, parsed, in file name order; ids must be unique.
fn load_cases(dir: &Path, source: &Source) -> Result<Vec<CaseFile>, String> {
    let entries = std::fs::read_dir(dir)
        .map_err(|error| format!("读不了 case 目录 {}：{error}", dir.display()))?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "json") && path.is_file())
        .collect();
    paths.sort();
    if paths.is_empty() {
        return Err(format!("{} 里没有 case 文件（*.json）", dir.display()));
    }
    let mut cases = Vec::new();
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    for path in paths {
        let name = path
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        let text =
            std::fs::read_to_string(&path).map_err(|error| format!("{name}：读不了：{error}"))?;
        let case = parse_case(&text).map_err(|problem| format!("{name}：{problem}"))?;
        if let Some(first) = seen.insert(case.id.clone(), name.clone()) {
            return Err(format!("{name}：id {:?} 和 {first} 重复", case.id));
        }
        if matches!(source, Source::Offline) && case.script.is_none() {
            return Err(format!(
                "{name}：离线运行需要 script；要用真模型请加 --real"
            ));
        }
        cases.push(case);
    }
    Ok(cases)
}

fn real_source() -> Result<Source, String> {
    let var = |name: &str| {
        std::env::var(name)
            .ok()
            .filter(|value| !value.trim().is_empty())
    };
    let key =
        var("OPENAI_COMPATIBLE_API_KEY").ok_or("--real 需要设置 OPENAI_COMPATIBLE_API_KEY")?;
    let model = var("OPENAI_COMPATIBLE_MODEL").ok_or("--real 需要设置 OPENAI_COMPATIBLE_MODEL")?;
    let base = var("OPENAI_COMPATIBLE_BASE_URL").unwrap_or_else(|| DEFAULT_BASE_URL.to_string());
    Ok(Source::Real {
        endpoint: Endpoint::new(base, key),
        model,
    })
}

/// A workspace directory name from a case id: letters, digits, `-` and `_` only.
fn dir_name(id: &str, run: usize) -> String {
    let safe: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{safe}-{run}")
}

/// The runtime over a fresh `workspace`, and what must live as long as it.
async fn runtime_in(
    case: &CaseFile,
    source: &Source,
    workspace: &EvalWorkspace,
) -> Result<(pi_course::runtime_modes::Runtime, Option<MockServer>), Fault> {
    let (model, server): (Arc<dyn Model>, Option<MockServer>) = match source {
        Source::Offline => {
            let script = case.script.clone().unwrap_or_default();
            let server = MockServer::start(script).await?;
            let endpoint = Endpoint::new(server.base_url(), "pi-eval-offline-key");
            let model = pi_http::openai_compatible_model(endpoint, "openai-mock")?;
            (Arc::new(model), Some(server))
        }
        Source::Real { endpoint, model } => {
            let model = pi_http::openai_compatible_model(endpoint.clone(), model)?;
            (Arc::new(model), None)
        }
    };
    let tools = CodingTools::new(workspace.root())
        .map_err(|error| Fault::from(error.to_string()))?
        .registry()
        .map_err(|error| Fault::from(format!("{error:?}")))?;
    let next_id = Arc::new(AtomicUsize::new(0));
    let mut config = RuntimeConfig::new(
        None,
        ContextBudget {
            budget: Budget {
                context_window: 1_000_000,
                reserved_output: 0,
                safety_margin: 0,
            },
            estimate: Arc::new(|_| 1),
        },
    );
    config.system_prompt = Some(SYSTEM_PROMPT.to_string());
    let runtime = create_runtime(
        config,
        RuntimeDeps {
            model,
            tools,
            session: Arc::new(InMemorySessionStore::new()),
            resources: None,
            extensions: None,
            create_id: Arc::new(move || {
                format!("entry-{}", next_id.fetch_add(1, Ordering::SeqCst))
            }),
            now: Arc::new(|| {
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|elapsed| elapsed.as_millis() as u64)
                    .unwrap_or(0)
            }),
        },
    )?;
    Ok((runtime, server))
}

/// One run of `case`: a fresh workspace with its files, a fresh runtime (and mock server).
async fn prepare(
    case: Arc<CaseFile>,
    source: Source,
    base: PathBuf,
    run: usize,
) -> Result<PreparedEval, Fault> {
    let files: Vec<(&str, &str)> = case
        .files
        .iter()
        .map(|(path, content)| (path.as_str(), content.as_str()))
        .collect();
    let workspace = EvalWorkspace::create(&base, &dir_name(&case.id, run), &files)?;
    let (runtime, server) = match runtime_in(&case, &source, &workspace).await {
        Ok(built) => built,
        Err(fault) => {
            // Nothing will clean up a workspace the runner never received.
            let _ = workspace.remove();
            return Err(fault);
        }
    };
    let mut prepared = workspace.prepared(runtime);
    let remove = prepared.cleanup.take();
    prepared.cleanup = Some(Box::new(move || {
        drop(server);
        remove.map_or(Ok(()), |remove| remove())
    }));
    Ok(prepared)
}

fn eval_case(case: CaseFile, source: &Source, base: &Path) -> EvalCase {
    let case = Arc::new(case);
    let runs = Arc::new(AtomicUsize::new(0));
    let (for_prepare, source, base) = (Arc::clone(&case), source.clone(), base.to_path_buf());
    let for_judge = Arc::clone(&case);
    EvalCase::new(
        &case.id,
        &case.prompt,
        &case.expect.declared(),
        move || {
            let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
            prepare(Arc::clone(&for_prepare), source.clone(), base.clone(), run)
        },
        move |observation| Ok(for_judge.expect.judge(observation)),
    )
}

async fn run(options: Options) -> Result<bool, String> {
    let source = match options.real {
        true => real_source()?,
        false => Source::Offline,
    };
    let cases = load_cases(&options.dir, &source)?;
    let base = std::env::temp_dir().join(format!("pi-eval-{}", std::process::id()));
    std::fs::create_dir(&base)
        .map_err(|error| format!("建不了临时目录 {}：{error}", base.display()))?;
    let cases: Vec<EvalCase> = cases
        .into_iter()
        .map(|case| eval_case(case, &source, &base))
        .collect();
    let reports = run_eval_suite(&cases).await;
    // Only our own directory, created above; each run's cleanup already emptied it.
    let _ = std::fs::remove_dir_all(&base);
    let passed = reports
        .iter()
        .filter(|report| report.status == EvalStatus::Passed)
        .count();
    if options.json {
        let json = serde_json::to_string_pretty(&reports).map_err(|error| error.to_string())?;
        println!("{json}");
    } else {
        for report in &reports {
            println!("{report}");
        }
        println!("通过 {passed}/{}", reports.len());
    }
    Ok(passed == reports.len())
}

#[tokio::main]
async fn main() -> ExitCode {
    let options = match parse_args(std::env::args().skip(1)) {
        Ok(Some(options)) => options,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(line) => {
            eprintln!("pi-eval：{line}");
            return ExitCode::from(2);
        }
    };
    match run(options).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(line) => {
            eprintln!("pi-eval：{line}");
            ExitCode::from(2)
        }
    }
}
