//! Shipping the tracer: `cargo xtask install`/`uninstall`, `cargo xtask deb` and the
//! static binary (`cargo xtask build --release --static`).
//!
//! Install and the package lay out the same files (one list, [`files`]): the binary,
//! the man pages and the bash, zsh and fish completions, the last two rendered by the
//! binary itself (`tracer __generate`, from its clap definitions), so they describe
//! exactly the binary they ship with and the eBPF object is built once.
//!
//! The package is laid out by hand for `dpkg-deb` rather than by cargo-deb: dpkg-deb is
//! on every Debian machine, works offline, and the layout is the one `install` already
//! writes; cargo-deb would be one more tool to build from crates.io. Its dependencies
//! come from Debian's own `dpkg-shlibdeps` (dpkg-dev, installed when missing).
//!
//! A systemd unit (disabled by default) joins the files once `tracer serve` exists.

mod deb;
mod install;
mod layout;
mod static_bin;

pub use deb::{deb, prepare_e2e, DebArgs};
pub use install::{install, uninstall, InstallArgs, UninstallArgs};
pub use static_bin::{build_static, static_target};
