//! Where a run's sandboxes come from. Every engine starts the same sandbox from the same
//! [`DockerConfig`], and commands reach every one of them the same way: the line-JSON
//! runner protocol (`runner.py`) over a byte stream the engine provides (an exec on the
//! local engine or on a Swarm node's, an exec through the Kubernetes API, or a local
//! child process's pipes).

use std::fmt;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;

use crate::{DockerConfig, DockerEnv, EnvError, Environment, ProcessEnv};

/// See the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxEngine {
    /// A container on this machine's Docker engine.
    #[default]
    Docker,
    /// A runner process on this machine, no container: for benchmarks and tests. It
    /// isolates nothing (see [`ProcessEnv`]).
    Process,
    /// A service task placed by Docker Swarm on one of its nodes.
    Swarm,
    /// A pod on a Kubernetes cluster.
    Kubernetes,
}

/// The names `--engine` takes, in the order of the variants.
pub const ENGINE_NAMES: [&str; 4] = ["docker", "process", "swarm", "kubernetes"];

impl SandboxEngine {
    pub fn name(self) -> &'static str {
        match self {
            SandboxEngine::Docker => ENGINE_NAMES[0],
            SandboxEngine::Process => ENGINE_NAMES[1],
            SandboxEngine::Swarm => ENGINE_NAMES[2],
            SandboxEngine::Kubernetes => ENGINE_NAMES[3],
        }
    }

    /// Starts a sandbox. `scratch` is a folder of the run on this machine the engine may
    /// create its own folders in (the process engine's sandbox roots).
    pub async fn start(
        self,
        config: DockerConfig,
        scratch: &Path,
    ) -> Result<Arc<dyn Environment>, EnvError> {
        match self {
            SandboxEngine::Docker => Ok(Arc::new(DockerEnv::start(config).await?)),
            SandboxEngine::Process => Ok(Arc::new(ProcessEnv::start(config, scratch).await?)),
            SandboxEngine::Swarm => Ok(Arc::new(
                crate::SwarmEnv::start(crate::SwarmConfig::from_env(config)?).await?,
            )),
            // The cluster from KUBECONFIG / ~/.kube/config / in-cluster; RONDO_KUBE_* options.
            SandboxEngine::Kubernetes => Ok(Arc::new(
                crate::KubeEnv::start(
                    crate::kube_config().await?,
                    config,
                    crate::KubeOptions::from_env()?,
                )
                .await?,
            )),
        }
    }
}

impl SandboxEngine {
    /// Whether a batch's sandboxes outlive a crashed driver on this engine, so the batch
    /// must remove them by its label at its start and end.
    pub fn reaps_batches(self) -> bool {
        matches!(self, SandboxEngine::Swarm | SandboxEngine::Kubernetes)
    }

    /// Removes every sandbox labelled with `batch`; the number removed.
    pub async fn reap_batch(self, batch: &str) -> Result<usize, EnvError> {
        match self {
            SandboxEngine::Swarm => crate::reap_swarm_batch(batch).await,
            SandboxEngine::Kubernetes => crate::reap_kube_batch(batch).await,
            // Docker containers are removed by `cleanup_stale` when their owner is gone;
            // process sandboxes die with their driver.
            SandboxEngine::Docker | SandboxEngine::Process => Ok(0),
        }
    }
}

impl fmt::Display for SandboxEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for SandboxEngine {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let all = [
            SandboxEngine::Docker,
            SandboxEngine::Process,
            SandboxEngine::Swarm,
            SandboxEngine::Kubernetes,
        ];
        all.into_iter()
            .find(|e| e.name() == text.trim().to_ascii_lowercase())
            .ok_or_else(|| {
                format!(
                    "unknown engine `{text}`: one of {}",
                    ENGINE_NAMES.join(", ")
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_ones_are_refused() {
        for name in ENGINE_NAMES {
            assert_eq!(name.parse::<SandboxEngine>().unwrap().name(), name);
        }
        assert_eq!("Docker".parse::<SandboxEngine>(), Ok(SandboxEngine::Docker));
        let err = "podman".parse::<SandboxEngine>().unwrap_err();
        assert!(err.contains("docker, process, swarm, kubernetes"), "{err}");
    }
}
