//! Tool specs (`config/tools/<name>.yaml`) and their installation into an environment.

mod install;
mod spec;

pub use install::{InstalledTool, InstalledTools, StepRecord};
pub(crate) use install::{ToolLayout, install_all, installed_paths, tools_hash};
pub use spec::{Installation, IssueKind, SpecError, SpecIssue, SpecOrigin, ToolSpec, load_dir};

/// Where Debian's python3-venv / python3-*-whl packages put their wheels; installs are
/// offline (`pip --no-index --find-links`), so build backends come from here.
pub const DEFAULT_WHEELHOUSE: &str = "/usr/share/python-wheels";
