//! rondo-memory (work in progress)
