//! Giving freed heap pages back to the kernel.

/// Returns free heap pages to the kernel. What loading (the kernel's BTF, the eBPF
/// object: ~20 MiB parsed and dropped) and each report (snapshots of every thread)
/// allocate and free is scattered through the heap, and glibc only shrinks it from the
/// top: without this the resident size is the largest moment's high-water mark rather
/// than what is live. Cheap (a walk of glibc's bins); a no-op on other C libraries.
pub fn give_back() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only releases free memory; it has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}
