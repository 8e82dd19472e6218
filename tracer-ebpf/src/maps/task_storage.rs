//! Task-local storage: a value hanging off each `task_struct`, freed with the task.

/// A BTF-defined map of type `BPF_MAP_TYPE_TASK_STORAGE` (29): a value hanging off each
/// `task_struct`, found by pointer rather than hashed by TID. The kernel needs its key
/// and value types in BTF, so it is declared the libbpf way (`.maps` section, fields
/// that encode type, key, value and flags); aya-ebpf 0.2 has no wrapper for it.
#[repr(C)]
pub struct TaskStorage<T> {
    r#type: *const [i32; 29],
    key: *const i32,
    value: *const T,
    max_entries: *const [i32; 0],
    /// BPF_F_NO_PREALLOC, which local storage requires.
    map_flags: *const [i32; 1],
}

// SAFETY: the fields are placeholders the loader reads from BTF; never dereferenced.
unsafe impl<T> Sync for TaskStorage<T> {}

impl<T> Default for TaskStorage<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> TaskStorage<T> {
    pub const fn new() -> Self {
        TaskStorage {
            r#type: core::ptr::null(),
            key: core::ptr::null(),
            value: core::ptr::null(),
            max_entries: core::ptr::null(),
            map_flags: core::ptr::null(),
        }
    }

    /// The task's value, created from `init` when it has none yet (and `init` is given).
    ///
    /// # Safety
    /// `task` must be a BTF task pointer the verifier trusts (tp_btf or fentry argument,
    /// `bpf_get_current_task_btf()`).
    #[inline(always)]
    pub unsafe fn get(&self, task: *const u8, init: Option<&mut T>) -> Option<*mut T> {
        let (v, flags) = match init {
            Some(v) => (v as *mut T as *mut core::ffi::c_void, 1u64),
            None => (core::ptr::null_mut(), 0),
        };
        let p = aya_ebpf::helpers::generated::bpf_task_storage_get(
            self as *const Self as *mut core::ffi::c_void,
            task as *mut _,
            v,
            flags,
        );
        if p.is_null() {
            None
        } else {
            Some(p as *mut T)
        }
    }

    /// The task's value, created zeroed when it has none yet.
    ///
    /// # Safety
    /// As for [`Self::get`].
    #[inline(always)]
    pub unsafe fn get_or_zero(&self, task: *const u8) -> Option<*mut T> {
        // A NULL value with BPF_LOCAL_STORAGE_GET_F_CREATE: the kernel zeroes it.
        let p = aya_ebpf::helpers::generated::bpf_task_storage_get(
            self as *const Self as *mut core::ffi::c_void,
            task as *mut _,
            core::ptr::null_mut(),
            1,
        );
        if p.is_null() {
            None
        } else {
            Some(p as *mut T)
        }
    }

    /// Frees the task's value.
    ///
    /// # Safety
    /// As for [`Self::get`].
    #[inline(always)]
    pub unsafe fn delete(&self, task: *const u8) {
        aya_ebpf::helpers::generated::bpf_task_storage_delete(
            self as *const Self as *mut core::ffi::c_void,
            task as *mut _,
        );
    }
}
