//! Memory kinds for Rondo workflows.
//!
//! - [`CodeContext`]: chunks of source files scored by a decayed referral score and
//!   rendered (with tree-sitter) into [`CodeContextView`] for a template.
//! - [`OperationHistory`]: the operation tree (child after a good action, sibling
//!   after a bad one), its reasoning chain and lessons as a [`HistoryView`].
//! - [`Whiteboard`]: CatMaster's whiteboard, changed by [`WhiteboardOp`]s applied
//!   atomically and rendered to `whiteboard.md`.
//!
//! A view past its declared `max_bytes` is cut to it by [`fit_json`].
//!
//! Every kind is serde-serializable for the run checkpoint; views are data for
//! templates, no prompt text is produced here.

mod citation;
mod code_context;
mod fit;
mod history;
mod paths;
mod reads;
mod syntax;
mod whiteboard;

pub use citation::{Citation, parse_citations};
pub use code_context::{
    AccessReport, Activity, Chunk, CitationReport, CodeContext, CodeContextError, CodeContextView,
    FileView, ScoreParams, Skipped, ViewItem, referral_score,
};
pub use fit::{CUT_MARK, fit_json, json_len};
pub use history::{
    HistoryError, HistoryView, LessonView, OperationHistory, OperationNode, Reflection,
};
pub use paths::{PathError, normalize_workspace_path};
pub use reads::{FileRead, repo_relative, shell_reads};
pub use whiteboard::{
    ApplyReport, DeprecateOp, Entry, EntryStatus, MAX_CARRIED_ENTRIES, OpError, OpsRejected,
    Section, SectionSpec, SectionsError, UpsertOp, WHITEBOARD_FILE, Whiteboard, WhiteboardOp,
};
