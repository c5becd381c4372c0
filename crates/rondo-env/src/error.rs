use std::path::PathBuf;

/// Everything that can go wrong in an environment. A command that fails or times out is
/// *not* an error: it is reported in [`crate::ExecOutput`].
#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    #[error(
        "Docker unavailable at {host}: {source} (is the engine running? DOCKER_HOST is honoured)"
    )]
    DockerUnavailable {
        host: String,
        #[source]
        source: bollard::errors::Error,
    },

    #[error("image `{image}` is not present in the local engine (no pull is attempted){hint}")]
    ImageMissing { image: String, hint: String },

    #[error("Docker API error while {action}: {source}")]
    Docker {
        action: String,
        #[source]
        source: bollard::errors::Error,
    },

    #[error("Kubernetes API error while {action}: {source}")]
    Kube {
        action: String,
        #[source]
        source: Box<kube::Error>,
    },

    /// A pod that will not run, an exec that broke off, an answer that did not come.
    #[error("Kubernetes: {0}")]
    Kubernetes(String),

    #[error("I/O error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("cannot start `{program}`: {source}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },

    #[error("invalid request: {0}")]
    InvalidRequest(String),

    /// Local tools cannot be confined (no Landlock, or no private mount namespace).
    #[error("cannot confine local tool processes: {0}")]
    Confinement(String),

    #[error("environment already shut down")]
    ShutDown,

    /// The sandbox or the machine it ran on is gone (a Swarm node lost, its engine
    /// unreachable or past a deadline): the run may go on in a new sandbox.
    #[error("sandbox {sandbox} lost: {reason}")]
    SandboxLost { sandbox: String, reason: String },

    #[error(transparent)]
    Spec(#[from] crate::tool::SpecError),

    #[error(transparent)]
    Install(Box<InstallFailure>),
}

/// A tool install step that failed.
#[derive(Debug, thiserror::Error)]
#[error(
    "{location}: installing tool `{tool}` failed at step `{step}` (exit code {exit_code}; log {})\n{tail}",
    log.display()
)]
pub struct InstallFailure {
    /// `spec-file:line:col: field `x`` (or the inline tool) the failing step comes from.
    pub location: String,
    pub tool: String,
    pub step: String,
    pub exit_code: String,
    pub log: PathBuf,
    /// The end of the step's output.
    pub tail: String,
}

impl EnvError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        EnvError::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn kube(action: impl Into<String>, source: kube::Error) -> Self {
        EnvError::Kube {
            action: action.into(),
            source: Box::new(source),
        }
    }

    pub(crate) fn docker(action: impl Into<String>, source: bollard::errors::Error) -> Self {
        EnvError::Docker {
            action: action.into(),
            source,
        }
    }
}
