//! IBM POWER shared-processor partitions: the hypervisor's dispatch statistics
//! (`vcpudispatch_stats`), the Dispatch Trace Log, and steal time.
pub mod dtl;
pub mod hypervisor;
pub mod vcpudispatch;
