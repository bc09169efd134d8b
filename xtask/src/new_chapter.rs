//! `cargo xtask new-chapter NN slug [--title …]`: writes the files an author fills in for a
//! new chapter (see [`course_cli::scaffold`]) and appends its manifest entry. It refuses to
//! overwrite anything: every target is checked before the first byte is written.

use std::io::Write as _;

use course_cli::catalog::MANIFEST;
use course_cli::scaffold::{next_steps, scaffold, NewChapter};

use crate::checkout::{self, Failure};
use crate::out;

pub fn run(id: &str, slug: &str, title: Option<&str>) -> Result<bool, Failure> {
    let root = checkout::repo_root()?;
    let data = course_cli::files::load_checkout(&root)
        .map_err(|error| Failure(format!("读取课程数据失败：{error}")))?;
    let catalog = course_cli::catalog::Catalog::from_files(&data)?;
    let new = NewChapter {
        id: id.parse()?,
        slug: slug.to_string(),
        title: title.unwrap_or(slug).to_string(),
    };
    let scaffold = scaffold(&catalog, &new)?;
    let taken: Vec<String> = scaffold
        .files
        .keys()
        .filter(|path| root.join(path.as_str()).exists())
        .map(ToString::to_string)
        .collect();
    if !taken.is_empty() {
        return Err(Failure(format!(
            "这些文件已经存在，什么也没有写：{}",
            taken.join("、")
        )));
    }
    for (path, text) in &scaffold.files {
        let target = root.join(path.as_str());
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)?;
        }
        // `create_new`: a file that appeared since the check above is still never replaced.
        std::fs::File::create_new(&target)
            .and_then(|mut file| file.write_all(text.as_bytes()))
            .map_err(|error| Failure(format!("写入 {path} 失败：{error}")))?;
        out::say(format!("写入 {path}"));
    }
    std::fs::OpenOptions::new()
        .append(true)
        .open(root.join(MANIFEST))
        .and_then(|mut manifest| manifest.write_all(scaffold.manifest_entry.as_bytes()))
        .map_err(|error| Failure(format!("追加 {MANIFEST} 失败：{error}")))?;
    out::say(format!("在 {MANIFEST} 末尾加上第 {} 章的条目", new.id));
    out::say("接下来：");
    for (index, step) in next_steps(&new).iter().enumerate() {
        out::say(format!("  {}. {step}", index + 1));
    }
    Ok(true)
}
