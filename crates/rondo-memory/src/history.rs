//! Operation-history memory: a tree of operations where a node follows a good
//! action as its child and a bad action as its sibling.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// One operation: what the agent decided, what happened, and its later reflection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperationNode {
    /// Position in push order, from 0.
    pub id: usize,
    /// `None` for a root (the first node, or a sibling of a bad root).
    pub parent: Option<usize>,
    pub children: Vec<usize>,
    pub thought: String,
    pub action_type: String,
    pub action_params: String,
    /// Output of the action, once executed.
    pub observation: Option<String>,
    /// `None` until the node is reflected on.
    pub bad_action: Option<bool>,
    pub summary: String,
    /// One lesson per line.
    pub lessons: String,
}

/// The reflection on the last operation, as the agent emits it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reflection {
    pub bad_action: bool,
    #[serde(default)]
    pub summary: String,
    #[serde(default)]
    pub lessons: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum HistoryError {
    #[error("the operation history is empty: push an operation before setting its {0}")]
    Empty(&'static str),
}

/// A lesson with the node that learned it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LessonView {
    pub node: usize,
    pub text: String,
}

/// What a template receives to render the operation history.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryView {
    /// The reasoning chain, root first.
    pub chain: Vec<OperationNode>,
    /// Lessons of every node (chain or not), in push order, one per line of `lessons`.
    pub lessons: Vec<LessonView>,
    /// `bad_action` of the last node: picks the alternative-action prompt (true)
    /// or the next-step prompt (false / not reflected).
    pub last_bad_action: Option<bool>,
    pub n_nodes: usize,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperationHistory {
    nodes: Vec<OperationNode>,
}

impl OperationHistory {
    pub fn new() -> OperationHistory {
        OperationHistory::default()
    }

    pub fn nodes(&self) -> &[OperationNode] {
        &self.nodes
    }

    pub fn last(&self) -> Option<&OperationNode> {
        self.nodes.last()
    }

    /// Appends an operation: child of the previous node unless the previous one
    /// was reflected as a bad action, in which case it becomes its sibling.
    /// Returns the new node's id.
    pub fn push(
        &mut self,
        thought: impl Into<String>,
        action_type: impl Into<String>,
        action_params: impl Into<String>,
    ) -> usize {
        let id = self.nodes.len();
        let parent = match self.nodes.last() {
            None => None,
            Some(prev) if prev.bad_action == Some(true) => prev.parent,
            Some(prev) => Some(prev.id),
        };
        if let Some(p) = parent {
            self.nodes[p].children.push(id);
        }
        self.nodes.push(OperationNode {
            id,
            parent,
            children: Vec::new(),
            thought: thought.into(),
            action_type: action_type.into(),
            action_params: action_params.into(),
            observation: None,
            bad_action: None,
            summary: String::new(),
            lessons: String::new(),
        });
        id
    }

    /// Sets the observation of the last node.
    pub fn set_observation(&mut self, observation: impl Into<String>) -> Result<(), HistoryError> {
        let last = self
            .nodes
            .last_mut()
            .ok_or(HistoryError::Empty("observation"))?;
        last.observation = Some(observation.into());
        Ok(())
    }

    /// Sets (or replaces) the reflection of the last node.
    pub fn reflect(&mut self, reflection: Reflection) -> Result<(), HistoryError> {
        let last = self
            .nodes
            .last_mut()
            .ok_or(HistoryError::Empty("reflection"))?;
        last.bad_action = Some(reflection.bad_action);
        last.summary = reflection.summary;
        last.lessons = reflection.lessons;
        Ok(())
    }

    /// Ids of the reasoning chain: from the first root, a node with a child is
    /// included and the walk moves to its first child; a node without one is
    /// passed over for its next sibling. The last node is always included.
    pub fn chain(&self) -> Vec<usize> {
        let roots: Vec<usize> = self
            .nodes
            .iter()
            .filter(|n| n.parent.is_none())
            .map(|n| n.id)
            .collect();
        let mut chain = Vec::new();
        let mut cur = roots.first().copied();
        while let Some(id) = cur {
            let node = &self.nodes[id];
            cur = if let Some(&child) = node.children.first() {
                chain.push(id);
                Some(child)
            } else {
                let siblings = match node.parent {
                    Some(p) => &self.nodes[p].children,
                    None => &roots,
                };
                let pos = siblings.iter().position(|&s| s == id);
                pos.and_then(|p| siblings.get(p + 1)).copied()
            };
        }
        if let Some(last) = self.nodes.last()
            && chain.last() != Some(&last.id)
        {
            chain.push(last.id);
        }
        chain
    }

    /// Every non-empty lesson line, in push order.
    pub fn lessons(&self) -> Vec<LessonView> {
        self.nodes
            .iter()
            .flat_map(|n| {
                n.lessons
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .map(|l| LessonView {
                        node: n.id,
                        text: l.to_string(),
                    })
            })
            .collect()
    }

    pub fn view(&self) -> HistoryView {
        HistoryView {
            chain: self
                .chain()
                .into_iter()
                .map(|id| self.nodes[id].clone())
                .collect(),
            lessons: self.lessons(),
            last_bad_action: self.nodes.last().and_then(|n| n.bad_action),
            n_nodes: self.nodes.len(),
        }
    }
}
