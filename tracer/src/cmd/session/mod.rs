//! What every tracing command shares between its configuration and its output: the
//! start (targets, the held command, privileges: `start`), the one signal path
//! (`signals`) and the one loop that ends a run (`ends`). run, top, record, slow,
//! offcpu, serve and floor are a configuration, a program family and a [`ends::Work`]
//! over these.
pub(crate) mod ends;
pub(crate) mod signals;
pub(crate) mod start;
