//! rondo-provider (work in progress)
