//! The Perfetto messages we write, with the field numbers of Perfetto's `.proto` files
//! (protos/perfetto/trace/...): hand-written `prost` structs (see the parent module).
#[derive(Clone, PartialEq, prost::Message)]
pub struct TracePacket {
    #[prost(uint64, optional, tag = "8")]
    pub timestamp: Option<u64>,
    #[prost(uint32, optional, tag = "10")]
    pub trusted_packet_sequence_id: Option<u32>,
    #[prost(message, optional, tag = "1")]
    pub ftrace_events: Option<FtraceEventBundle>,
    #[prost(message, optional, tag = "2")]
    pub process_tree: Option<ProcessTree>,
    #[prost(message, optional, tag = "34")]
    pub ftrace_stats: Option<FtraceStats>,
    #[prost(message, optional, tag = "45")]
    pub system_info: Option<SystemInfo>,
    /// A zlib stream of more packets, each encoded as a `Trace.packet` (field 1), as
    /// Perfetto's own `traced` writes them with `COMPRESSION_TYPE_DEFLATE`.
    #[prost(bytes = "vec", optional, tag = "50")]
    pub compressed_packets: Option<Vec<u8>>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct FtraceEventBundle {
    #[prost(uint32, optional, tag = "1")]
    pub cpu: Option<u32>,
    #[prost(bool, optional, tag = "3")]
    pub lost_events: Option<bool>,
    #[prost(message, optional, tag = "4")]
    pub compact_sched: Option<CompactSched>,
    /// Events other than switches and wakings, in timestamp order.
    #[prost(message, repeated, tag = "2")]
    pub event: Vec<FtraceEvent>,
}

/// One ftrace event: `pid` is the task that was running (ftrace's common_pid);
/// exactly one of the event fields (a oneof in the .proto) is set.
#[derive(Clone, PartialEq, prost::Message)]
pub struct FtraceEvent {
    #[prost(uint64, optional, tag = "1")]
    pub timestamp: Option<u64>,
    #[prost(uint32, optional, tag = "2")]
    pub pid: Option<u32>,
    #[prost(message, optional, tag = "235")]
    pub task_newtask: Option<TaskNewtask>,
    #[prost(message, optional, tag = "236")]
    pub task_rename: Option<TaskRename>,
    #[prost(message, optional, tag = "237")]
    pub sched_process_exec: Option<SchedProcessExec>,
    #[prost(message, optional, tag = "238")]
    pub sched_process_exit: Option<SchedProcessExit>,
    #[prost(message, optional, tag = "491")]
    pub sched_migrate_task: Option<SchedMigrateTask>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TaskNewtask {
    #[prost(int32, optional, tag = "1")]
    pub pid: Option<i32>,
    #[prost(string, optional, tag = "2")]
    pub comm: Option<String>,
    #[prost(uint64, optional, tag = "3")]
    pub clone_flags: Option<u64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TaskRename {
    #[prost(int32, optional, tag = "1")]
    pub pid: Option<i32>,
    #[prost(string, optional, tag = "2")]
    pub oldcomm: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub newcomm: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SchedProcessExec {
    #[prost(string, optional, tag = "1")]
    pub filename: Option<String>,
    #[prost(int32, optional, tag = "2")]
    pub pid: Option<i32>,
    #[prost(int32, optional, tag = "3")]
    pub old_pid: Option<i32>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SchedProcessExit {
    #[prost(string, optional, tag = "1")]
    pub comm: Option<String>,
    #[prost(int32, optional, tag = "2")]
    pub pid: Option<i32>,
    #[prost(int32, optional, tag = "3")]
    pub tgid: Option<i32>,
    #[prost(int32, optional, tag = "4")]
    pub prio: Option<i32>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SchedMigrateTask {
    #[prost(string, optional, tag = "1")]
    pub comm: Option<String>,
    #[prost(int32, optional, tag = "2")]
    pub pid: Option<i32>,
    #[prost(int32, optional, tag = "3")]
    pub prio: Option<i32>,
    #[prost(int32, optional, tag = "4")]
    pub orig_cpu: Option<i32>,
    #[prost(int32, optional, tag = "5")]
    pub dest_cpu: Option<i32>,
}

/// Parallel arrays; timestamps delta-encoded (the first absolute). Numeric arrays
/// are packed, as the .proto declares them.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CompactSched {
    #[prost(string, repeated, tag = "5")]
    pub intern_table: Vec<String>,
    #[prost(uint64, repeated, packed = "true", tag = "1")]
    pub switch_timestamp: Vec<u64>,
    #[prost(int64, repeated, packed = "true", tag = "2")]
    pub switch_prev_state: Vec<i64>,
    #[prost(int32, repeated, packed = "true", tag = "3")]
    pub switch_next_pid: Vec<i32>,
    #[prost(int32, repeated, packed = "true", tag = "4")]
    pub switch_next_prio: Vec<i32>,
    #[prost(uint32, repeated, packed = "true", tag = "6")]
    pub switch_next_comm_index: Vec<u32>,
    #[prost(uint64, repeated, packed = "true", tag = "7")]
    pub waking_timestamp: Vec<u64>,
    #[prost(int32, repeated, packed = "true", tag = "8")]
    pub waking_pid: Vec<i32>,
    #[prost(int32, repeated, packed = "true", tag = "9")]
    pub waking_target_cpu: Vec<i32>,
    #[prost(int32, repeated, packed = "true", tag = "10")]
    pub waking_prio: Vec<i32>,
    #[prost(uint32, repeated, packed = "true", tag = "11")]
    pub waking_comm_index: Vec<u32>,
    #[prost(uint32, repeated, packed = "true", tag = "12")]
    pub waking_common_flags: Vec<u32>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ProcessTree {
    #[prost(message, repeated, tag = "1")]
    pub processes: Vec<Process>,
    #[prost(message, repeated, tag = "2")]
    pub threads: Vec<Thread>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Process {
    #[prost(int32, optional, tag = "1")]
    pub pid: Option<i32>,
    #[prost(int32, optional, tag = "2")]
    pub ppid: Option<i32>,
    #[prost(string, repeated, tag = "3")]
    pub cmdline: Vec<String>,
    /// `cmdline` holds the comm, not the real command line.
    #[prost(bool, optional, tag = "9")]
    pub cmdline_is_comm: Option<bool>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Thread {
    #[prost(int32, optional, tag = "1")]
    pub tid: Option<i32>,
    #[prost(string, optional, tag = "2")]
    pub name: Option<String>,
    #[prost(int32, optional, tag = "3")]
    pub tgid: Option<i32>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct FtraceStats {
    /// 1: START_OF_TRACE, 2: END_OF_TRACE.
    #[prost(int32, optional, tag = "1")]
    pub phase: Option<i32>,
    #[prost(message, repeated, tag = "2")]
    pub cpu_stats: Vec<FtraceCpuStats>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct FtraceCpuStats {
    #[prost(uint64, optional, tag = "1")]
    pub cpu: Option<u64>,
    #[prost(uint64, optional, tag = "2")]
    pub entries: Option<u64>,
    /// Events lost: the ring buffer was full.
    #[prost(uint64, optional, tag = "3")]
    pub overrun: Option<u64>,
    #[prost(uint64, optional, tag = "9")]
    pub read_events: Option<u64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SystemInfo {
    #[prost(message, optional, tag = "1")]
    pub utsname: Option<Utsname>,
    #[prost(uint32, optional, tag = "6")]
    pub page_size: Option<u32>,
    #[prost(uint32, optional, tag = "8")]
    pub num_cpus: Option<u32>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Utsname {
    #[prost(string, optional, tag = "1")]
    pub sysname: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub version: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub release: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub machine: Option<String>,
}

/// `Trace.packet`'s field number.
pub const TRACE_PACKET_TAG: u32 = 1;
