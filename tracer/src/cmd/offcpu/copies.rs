//! `tracer offcpu --unwind dwarf`: the periods whose user stacks the kernel copied
//! arrive one record each (and, with `--wakers`, their waker's copy just before); they
//! are unwound as they come, while the process lives, and summed by the stacks found, as
//! the kernel sums the frame-pointer stacks. Each unwound stack gets an id above every
//! stack map id, so the report reads both kinds alike.
use std::collections::{HashMap, HashSet};

use aya::maps::{MapData, RingBuf};
use tracer_common::offcpu::{
    CopyHead, OffKey, COPY_HEAD, COPY_HEADER, COPY_WAITER, COPY_WAKER, STACK_COPIED, STACK_EMPTY,
};

use crate::{
    bpf::stacks::{Sum, WakerSum},
    sys::{symbolize::Symbolizer, unwind::Unwinders},
};

/// Ids of unwound stacks start here: stack map ids are below `--stack-entries`.
pub const FIRST_ID: u32 = 1 << 30;

// The three kinds of stack id never meet: the stack map's stay below `--stack-entries`'
// largest value, the spill map's (no larger) carry `SPILL_ID`, unwound ones start here.
const _: () = assert!(
    crate::sys::parse::MAX_STACK_ENTRIES <= tracer_common::offcpu::SPILL_ID
        && tracer_common::offcpu::SPILL_ID < FIRST_ID
        && tracer_common::offcpu::SPILL_ID + (crate::sys::parse::MAX_STACK_ENTRIES - 1) < FIRST_ID
);

/// A waker as a sum's key has it: (tgid, tid, user stack, kernel stack).
type WakerKey = (u32, u32, i32, i32);

/// A waker's half, waiting for its waiter's record.
struct Pending {
    sum: WakerSum,
}

/// The copies' records, unwound and summed.
pub struct Copies {
    ring: RingBuf<MapData>,
    unwinders: Unwinders,
    /// Ids of the stacks whose walk stopped before a thread's first function.
    pub cut: HashSet<u32>,
    /// The id of each unwound (process, stack) (leaf first).
    ids: HashMap<(u32, Vec<u64>), u32>,
    sums: HashMap<(OffKey, Option<WakerKey>), Sum>,
    wakers: HashMap<(u32, u64), Pending>,
    /// Records read, and those too short to be one (never expected: counted).
    pub records: u64,
    pub malformed: u64,
}

impl Copies {
    pub fn new(ring: RingBuf<MapData>, unwinders: Unwinders) -> Self {
        Copies {
            ring,
            unwinders,
            cut: HashSet::new(),
            ids: HashMap::new(),
            sums: HashMap::new(),
            wakers: HashMap::new(),
            records: 0,
            malformed: 0,
        }
    }

    /// Reads the records waiting in the ring, until it is empty or, with a `budget`, that
    /// long has passed: system-wide the programs can copy stacks faster than they are
    /// unwound, and a drain to the end ran a `-d 200ms` window to 1 s (a hostile test
    /// pass, 2026-12-07). What is left waits for the next drain. `sym` knows the
    /// processes' mappings (read again for a process it has not seen). Returns whether
    /// the ring was left empty.
    pub fn drain(&mut self, sym: &mut Symbolizer, budget: Option<std::time::Duration>) -> bool {
        let started = std::time::Instant::now();
        loop {
            if budget.is_some_and(|b| started.elapsed() >= b) {
                return false;
            }
            // Copied out (12 KiB at most) so the ring is free while the record is used.
            let Some(bytes) = self.ring.next().map(|item| item.to_vec()) else {
                return true;
            };
            self.records += 1;
            if bytes.len() < COPY_HEADER {
                self.malformed += 1;
                continue;
            }
            // SAFETY: at least COPY_HEAD bytes of a #[repr(C)] plain-data header.
            let head: CopyHead = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) };
            let regs = &bytes[COPY_HEAD..COPY_HEADER];
            let stack = &bytes[COPY_HEADER..];
            let stack = &stack[..(head.len as usize).min(stack.len())];
            let user = if head.user_stack == STACK_COPIED {
                if !sym.knows(head.owner_tgid) {
                    sym.remember(head.owner_tgid);
                }
                let (ips, whole) = self.unwinders.unwind(sym, head.owner_tgid, regs, stack);
                log::debug!(
                    "copy of {} ({} bytes, whole {whole}): {:x?}",
                    head.owner_tid,
                    stack.len(),
                    ips
                );
                self.id_of(head.owner_tgid, ips, whole)
            } else {
                head.user_stack
            };
            match head.kind {
                COPY_WAKER => {
                    self.wakers.insert(
                        (head.tid, head.at_ns),
                        Pending {
                            sum: WakerSum {
                                tgid: head.owner_tgid,
                                tid: head.owner_tid,
                                user_stack: user,
                                kernel_stack: head.kernel_stack,
                                comm: head.comm,
                            },
                        },
                    );
                }
                COPY_WAITER => {
                    let waker = self.wakers.remove(&(head.tid, head.at_ns)).map(|p| p.sum);
                    self.add(&head, user, waker);
                }
                _ => self.malformed += 1,
            }
        }
    }

    fn id_of(&mut self, tgid: u32, ips: Vec<u64>, whole: bool) -> i32 {
        if ips.is_empty() {
            return STACK_EMPTY;
        }
        let next = FIRST_ID + self.ids.len() as u32;
        let id = *self.ids.entry((tgid, ips)).or_insert(next);
        if !whole {
            self.cut.insert(id);
        }
        id as i32
    }

    fn add(&mut self, h: &CopyHead, user: i32, waker: Option<WakerSum>) {
        let key = OffKey {
            tgid: h.tgid,
            tid: h.tid,
            user_stack: user,
            kernel_stack: h.kernel_stack,
            state: h.state,
            _pad: 0,
        };
        let wk = waker.map(|w| (w.tgid, w.tid, w.user_stack, w.kernel_stack));
        let s = self.sums.entry((key, wk)).or_insert(Sum {
            key,
            total_ns: 0,
            count: 0,
            comm: h.comm,
            waker,
        });
        s.total_ns += h.total_ns;
        s.count += 1;
        s.comm = h.comm;
    }

    /// The sums so far (the records still in the ring are read first by the caller).
    pub fn sums(&self) -> Vec<Sum> {
        self.sums.values().copied().collect()
    }

    /// The unwound stacks by id.
    pub fn stacks(&self) -> impl Iterator<Item = (u32, &Vec<u64>)> + '_ {
        self.ids.iter().map(|((_, ips), &id)| (id, ips))
    }

    /// The processes whose stacks arrived (their mappings must be kept).
    pub fn tgids(&self) -> impl Iterator<Item = u32> + '_ {
        self.ids.keys().map(|(t, _)| *t)
    }
}
