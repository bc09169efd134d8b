//! The course data an assembly reads: the files, with every Lab-region source parsed once.
//!
//! Every view of a reference file — reference, skeleton, "Labs before k solved", stub
//! messages, answer bodies — comes from its parsed regions; parsing them up front means one
//! assembly (or one whole `verify` run) never reads the same source twice.

use std::collections::BTreeMap;
use std::fmt;

use course_runner::LabId;

use crate::catalog::{Catalog, Chapter};
use crate::files::FileSet;
use crate::paths::{CrateFile, RepoPath};
use crate::regions::RegionSource;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceError {
    MissingFile(RepoPath),
    Regions { path: RepoPath, problem: String },
}

impl fmt::Display for SourceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SourceError::MissingFile(path) => write!(f, "课程数据缺少文件 {path}"),
            SourceError::Regions { path, problem } => {
                write!(f, "{path} 的 Lab 区域有误：{problem}")
            }
        }
    }
}

impl std::error::Error for SourceError {}

/// The files of the course and the parsed regions of every chapter's edit files.
pub struct Sources<'a> {
    data: &'a FileSet,
    parsed: BTreeMap<RepoPath, RegionSource>,
}

impl<'a> Sources<'a> {
    /// Parses the Rust edit files of every chapter in `catalog`.
    pub fn new(catalog: &Catalog, data: &'a FileSet) -> Result<Self, SourceError> {
        let mut parsed = BTreeMap::new();
        for chapter in catalog.chapters() {
            for file in chapter.edit().iter().filter(|file| file.is_rust()) {
                let path = chapter.source(file);
                let source = parse(data, &path)?;
                parsed.insert(path, source);
            }
        }
        Ok(Sources { data, parsed })
    }

    pub fn data(&self) -> &'a FileSet {
        self.data
    }

    /// A file of the course data, or why it is missing.
    pub fn read(&self, path: &RepoPath) -> Result<&'a [u8], SourceError> {
        self.data
            .get(path.as_str())
            .map(Vec::as_slice)
            .ok_or_else(|| SourceError::MissingFile(path.clone()))
    }

    /// The regions of one of `chapter`'s edit files.
    pub fn regions(
        &self,
        chapter: &Chapter,
        file: &CrateFile,
    ) -> Result<&RegionSource, SourceError> {
        let path = chapter.source(file);
        self.parsed.get(&path).ok_or(SourceError::MissingFile(path))
    }

    /// One chapter file as the finished chapter has it: markers stripped from edit files.
    pub fn reference(&self, chapter: &Chapter, file: &CrateFile) -> Result<Vec<u8>, SourceError> {
        if chapter.is_edit(file) && file.is_rust() {
            Ok(self.regions(chapter, file)?.reference().into_bytes())
        } else {
            Ok(self.read(&chapter.source(file))?.to_vec())
        }
    }

    /// The stub messages of each Lab of `chapter`, in file order: what its first red can say.
    pub fn stub_messages(
        &self,
        chapter: &Chapter,
    ) -> Result<BTreeMap<LabId, Vec<String>>, SourceError> {
        let files = chapter.edit().iter().filter(|file| file.is_rust());
        let parsed = files
            .map(|file| self.regions(chapter, file))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(stub_messages_of(parsed))
    }
}

/// The stub messages of each Lab over some parsed files, in file order.
pub fn stub_messages_of<'r>(
    files: impl IntoIterator<Item = &'r RegionSource>,
) -> BTreeMap<LabId, Vec<String>> {
    let mut messages: BTreeMap<LabId, Vec<String>> = BTreeMap::new();
    for source in files {
        for region in source.regions() {
            if region.stub_panics() {
                messages
                    .entry(region.lab)
                    .or_default()
                    .push(region.stub_message());
            }
        }
    }
    messages
}

/// Parses one reference source.
pub fn parse(data: &FileSet, path: &RepoPath) -> Result<RegionSource, SourceError> {
    let bytes = data
        .get(path.as_str())
        .ok_or_else(|| SourceError::MissingFile(path.clone()))?;
    RegionSource::parse(&String::from_utf8_lossy(bytes)).map_err(|error| SourceError::Regions {
        path: path.clone(),
        problem: error.to_string(),
    })
}
