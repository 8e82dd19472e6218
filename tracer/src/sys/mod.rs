//! The operating system underneath: BTF, tracefs, procfs, the root for fixture trees,
//! launching the traced command, privileges, clocks, binary output files and the parsers
//! of user input.
pub mod birth;
pub mod bounded;
pub mod btf;
pub mod cgroups;
pub mod child;
pub mod clock;
pub mod files;
pub mod heap;
pub mod kick;
pub mod launch;
pub mod nofile;
pub mod outfile;
pub mod parse;
pub mod privileges;
pub mod procfs;
pub mod root;
pub mod selfstat;
pub mod startup;
pub mod symbolize;
pub mod tracefs;
pub mod unwind;
pub mod webconfig;
