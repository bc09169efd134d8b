//! What one workspace carries and where it starts, computed once from the catalog.
//!
//! A practice workspace, a "Labs before k solved" state, a reference snapshot: each is the
//! base workspace plus, for every chapter of a chain, its overlay, its files and its tests. The
//! chain, the starting point, the solved Labs and the packages the overlays add are decided
//! here, in one value that the CLI hands to assembly, to `LEARNING.md` and to the stamp, so
//! nothing downstream derives the chain again.

use course_runner::LabId;

use crate::catalog::{Catalog, Chapter, Kind};

/// Which Labs of the practised chapter count as solved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Solved {
    /// The practice workspace: every Lab region stubbed.
    Nothing,
    /// Every Lab before this one: the state a learner has when starting it.
    Before(LabId),
    /// The finished chapter: the reference, markers stripped.
    All,
}

impl Solved {
    /// Whether `lab`'s regions keep their reference bodies.
    pub fn covers(self, lab: LabId) -> bool {
        match self {
            Solved::Nothing => false,
            Solved::Before(first_open) => lab < first_open,
            Solved::All => true,
        }
    }
}

/// What the workspace holds before the practised chapter's own files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start<'a> {
    /// The base workspace with an empty learner crate.
    EmptyCrate,
    /// The finished code of this chapter.
    Reference(&'a Chapter),
}

/// One workspace, decided: the chapter, the chapters it carries and how far it is solved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkspacePlan<'a> {
    pub chapter: &'a Chapter,
    /// The chapters whose code and tests the workspace carries, in course order, `chapter`
    /// last (see [`Catalog::chain`]).
    pub chain: Vec<&'a Chapter>,
    pub start: Start<'a>,
    /// Always [`Solved::All`] for an observe chapter, which has no Labs.
    pub solved: Solved,
    /// The chapters of the chain that lay files over the workspace root, in order.
    pub overlays: Vec<&'a Chapter>,
    /// The packages those overlays add (`crates/<name>`), sorted by name.
    pub packages: Vec<String>,
}

impl<'a> WorkspacePlan<'a> {
    pub fn new(catalog: &'a Catalog, chapter: &'a Chapter, solved: Solved) -> Self {
        let chain = catalog.chain(chapter);
        let (start, solved) = match chapter.kind {
            Kind::Observe { shows } => (
                catalog
                    .get(shows)
                    .map_or(Start::EmptyCrate, Start::Reference),
                Solved::All,
            ),
            Kind::Rebuild { .. } => (
                chain
                    .len()
                    .checked_sub(2)
                    .map_or(Start::EmptyCrate, |index| Start::Reference(chain[index])),
                solved,
            ),
        };
        let overlays: Vec<&Chapter> = chain
            .iter()
            .copied()
            .filter(|step| !step.overlay.is_empty())
            .collect();
        let mut packages: Vec<String> = overlays.iter().flat_map(|step| step.packages()).collect();
        packages.sort();
        packages.dedup();
        WorkspacePlan {
            chapter,
            chain,
            start,
            solved,
            overlays,
            packages,
        }
    }

    /// The state label the stamp records: what kind of workspace this is.
    pub fn state(&self) -> String {
        match (&self.chapter.kind, self.solved) {
            (Kind::Observe { .. }, _) => "observe".to_string(),
            (Kind::Rebuild { .. }, Solved::Nothing) => "rebuild".to_string(),
            (Kind::Rebuild { .. }, Solved::Before(lab)) => format!("solved before Lab {lab}"),
            (Kind::Rebuild { .. }, Solved::All) => "reference".to_string(),
        }
    }

    /// Whether the learner still has Labs to write here (`LEARNING.md` and `CHAPTER.md` go
    /// with it); a finished reference is an instructor's view.
    pub fn is_practice(&self) -> bool {
        matches!(self.chapter.kind, Kind::Observe { .. }) || self.solved != Solved::All
    }

    /// The chain's chapters before the practised one.
    pub fn carried(&self) -> impl Iterator<Item = &'a Chapter> + '_ {
        self.chain
            .iter()
            .copied()
            .filter(move |step| step.id != self.chapter.id)
    }
}
