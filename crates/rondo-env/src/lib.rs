//! rondo-env (work in progress)
