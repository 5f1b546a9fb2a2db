//! The process's allocator: the system's, except that blocks of a mebibyte or more are mapped on their own, in
//! whole 2 MiB pages advised as transparent huge pages.
//!
//! Why: an open makes a few big arrays (every line's record, the id index, the line table), and in a new process
//! every 4 KiB page of them is a fault that takes, charges and zeroes one page. For the kept open of the 40 MB
//! session that is about 750 faults and a third of its time; in 2 MiB pages the same arrays take a handful (a
//! kept open in 2.2 ms against 3.6, medians of 25 alternated new processes). The system allocator does this only
//! when told from outside the process (glibc's `GLIBC_TUNABLES=glibc.malloc.hugetlb=1`, which measured the same),
//! and the allocator crates that can (mimalloc, jemalloc) are whole allocators that reserve and commit ahead:
//! mimalloc held 58 MiB where the system allocator holds 17 for that open. So this is the one piece written here:
//! small blocks stay the system's, big ones are `mmap`, `mremap` and `munmap`, which is what glibc does for them
//! anyway, plus the alignment and the advice.
//!
//! Where transparent huge pages are off, the advice is refused and the blocks are ordinary mappings. Rounding a
//! block up to whole huge pages costs memory once touched, so only blocks that fill at least three quarters of
//! their huge pages are mapped this way (a records list of 1.6 MiB is; a 1 MiB read buffer, of which a streamed
//! answer holds several, is not).

use std::alloc::{GlobalAlloc, Layout, System};
use std::ffi::c_void;
use std::ptr;

use rustix::mm::{madvise, mmap_anonymous, mremap, munmap, Advice, MapFlags, MremapFlags, ProtFlags};

/// Gives the system back what freed small blocks leave in the heap: glibc keeps it for the process otherwise (it
/// returns only the top of an arena, and only past a threshold), so a web view that showed a big session and
/// closed it stayed 170 MB above its start with no page open. Called when a session is closed for good, which is
/// rare and is when most of the heap a session took becomes free at once; a few milliseconds there.
pub fn give_back_freed() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory of the allocator's own arenas.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The size of a transparent huge page on x86-64 and most arm64 kernels.
pub const HUGE_PAGE: usize = 2 << 20;

/// Blocks of at least this many bytes are mapped on their own in huge pages; smaller ones are the system
/// allocator's. Below a mebibyte the rounding would cost more memory than the faults it saves are worth.
pub const BIG_FROM: usize = 1 << 20;

/// The allocator (see the module documentation). The binary installs it with `#[global_allocator]`.
#[derive(Debug, Default, Clone, Copy)]
pub struct HugeBlocks;

/// Whether a block is mapped in huge pages: big enough, and filling at least three quarters of the whole huge
/// pages it needs. Rounding costs memory as soon as the block is touched, so a block that would waste more (a
/// buffer of just over 1 or 2 MiB, of which a stream may hold several) stays the system's, as it was.
fn is_big(size: usize, align: usize) -> bool {
    size >= BIG_FROM && align <= HUGE_PAGE && mapped_len(size).is_some_and(|len| (len - size).saturating_mul(4) <= len)
}

/// How many items of `item_size` bytes a list reserving room for `count` of them should make room for: `count`,
/// or, when that room is a big block, as many as fill its huge pages. Room a list reserves but never fills is
/// never touched, so it costs no memory; but a block that [`is_big`] refuses for the rounding it would waste is
/// the system's, in 4 KiB pages, each a fault on first touch. An open's records are reserved from an estimate
/// (the whole 40 MB session's: 2.2 MB, over three quarters of nothing) and filled on one thread as the other
/// waits: rounded, they take one huge page instead of 400 faults.
pub fn room_in_whole_huge_pages(count: usize, item_size: usize) -> usize {
    match count.checked_mul(item_size) {
        Some(size) if size >= BIG_FROM && item_size > 0 => match mapped_len(size) {
            Some(len) => len / item_size,
            None => count,
        },
        _ => count,
    }
}

/// The length of the mapping that holds a big block of `size` bytes.
fn mapped_len(size: usize) -> Option<usize> {
    size.checked_next_multiple_of(HUGE_PAGE)
}

/// Maps a block of `size` bytes (zeroed, as fresh anonymous pages are) at a huge-page boundary; null on failure.
unsafe fn map_big(size: usize) -> *mut u8 {
    let Some((len, span)) = mapped_len(size).and_then(|len| Some((len, len.checked_add(HUGE_PAGE)?))) else {
        return ptr::null_mut();
    };
    // Map one huge page more than needed and give back the ends, so the block starts on a boundary whatever
    // address the kernel picks (newer kernels align big anonymous mappings themselves, older ones do not).
    let prot = ProtFlags::READ | ProtFlags::WRITE;
    let Ok(raw) = (unsafe { mmap_anonymous(ptr::null_mut(), span, prot, MapFlags::PRIVATE) }) else {
        return ptr::null_mut();
    };
    let raw = raw as usize;
    let start = raw.next_multiple_of(HUGE_PAGE);
    let head = start - raw;
    let tail = span - head - len;
    unsafe {
        if head > 0 {
            let _ = munmap(raw as *mut c_void, head);
        }
        if tail > 0 {
            let _ = munmap((start + len) as *mut c_void, tail);
        }
        // Advice, not a requirement: refused where huge pages are off, and the block works the same.
        let _ = madvise(start as *mut c_void, len, Advice::LinuxHugepage);
    }
    start as *mut u8
}

// Every allocation in the program goes through these. Kept out of line (one call, then one compare on the way to
// the system allocator): inlined at every allocation site with the system allocator's own code, they made the
// binary 1.4 MB larger.
unsafe impl GlobalAlloc for HugeBlocks {
    #[inline(never)]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() < BIG_FROM {
            unsafe { System.alloc(layout) }
        } else {
            unsafe { alloc_big(layout, false) }
        }
    }

    #[inline(never)]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() < BIG_FROM {
            unsafe { System.alloc_zeroed(layout) }
        } else {
            unsafe { alloc_big(layout, true) }
        }
    }

    #[inline(never)]
    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        if layout.size() < BIG_FROM {
            unsafe { System.dealloc(block, layout) }
        } else {
            unsafe { dealloc_big(block, layout) }
        }
    }

    #[inline(never)]
    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if layout.size() < BIG_FROM && new_size < BIG_FROM {
            unsafe { System.realloc(block, layout, new_size) }
        } else {
            unsafe { realloc_big(block, layout, new_size) }
        }
    }
}

#[cold]
#[inline(never)]
unsafe fn alloc_big(layout: Layout, zeroed: bool) -> *mut u8 {
    if is_big(layout.size(), layout.align()) {
        unsafe { map_big(layout.size()) }
    } else if zeroed {
        unsafe { System.alloc_zeroed(layout) }
    } else {
        unsafe { System.alloc(layout) }
    }
}

#[cold]
#[inline(never)]
unsafe fn dealloc_big(block: *mut u8, layout: Layout) {
    if is_big(layout.size(), layout.align()) {
        if let Some(len) = mapped_len(layout.size()) {
            let _ = unsafe { munmap(block.cast(), len) };
        }
    } else {
        unsafe { System.dealloc(block, layout) }
    }
}

#[cold]
#[inline(never)]
unsafe fn realloc_big(block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
    let align = layout.align();
    match (is_big(layout.size(), align), is_big(new_size, align)) {
        (false, false) => unsafe { System.realloc(block, layout, new_size) },
        (true, true) => {
            let (Some(old_len), Some(new_len)) = (mapped_len(layout.size()), mapped_len(new_size)) else {
                return ptr::null_mut();
            };
            if new_len == old_len {
                return block;
            }
            if align > MREMAP_KEEPS_ALIGNMENT {
                return unsafe { move_block(block, layout, new_size) };
            }
            // The kernel moves the pages without copying them, as glibc's realloc of a mapped block does. A moved
            // block may start off a huge-page boundary; its pages stay, and new ones come huge wherever a whole
            // huge page fits.
            match unsafe { mremap(block.cast(), old_len, new_len, MremapFlags::MAYMOVE) } {
                Ok(moved) => moved.cast(),
                Err(_) => ptr::null_mut(),
            }
        }
        // Across the threshold: a new block of the other kind, and a copy.
        _ => unsafe { move_block(block, layout, new_size) },
    }
}

/// `mremap` may move a block to any page boundary: blocks asking for more alignment are moved by copying.
const MREMAP_KEEPS_ALIGNMENT: usize = 4096;

/// Reallocates by allocating anew, copying and freeing.
unsafe fn move_block(block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
    let heap = HugeBlocks;
    let Ok(new_layout) = Layout::from_size_align(new_size, layout.align()) else {
        return ptr::null_mut();
    };
    let new = unsafe { heap.alloc(new_layout) };
    if !new.is_null() {
        unsafe {
            ptr::copy_nonoverlapping(block, new, layout.size().min(new_size));
            heap.dealloc(block, layout);
        }
    }
    new
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `VmFlags` of the mapping that holds `address`, from `/proc/self/smaps`.
    fn vm_flags_at(address: usize) -> String {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ').filter(|(r, _)| r.contains('-') && !r.ends_with(':')) {
                let (from, to) = range.split_once('-').unwrap();
                let (from, to) =
                    (usize::from_str_radix(from, 16).unwrap_or(usize::MAX), usize::from_str_radix(to, 16).unwrap_or(0));
                inside = (from..to).contains(&address);
            } else if inside {
                if let Some(flags) = line.strip_prefix("VmFlags:") {
                    return flags.trim().to_owned();
                }
            }
        }
        panic!("no mapping holds {address:#x}");
    }

    #[test]
    fn a_big_block_starts_on_a_huge_page_is_zeroed_and_is_advised_huge() {
        let layout = Layout::from_size_align(HUGE_PAGE - 12_345, 64).unwrap();
        let block = unsafe { HugeBlocks.alloc_zeroed(layout) };
        assert!(!block.is_null());
        assert_eq!(block as usize % HUGE_PAGE, 0);
        let bytes = unsafe { std::slice::from_raw_parts_mut(block, layout.size()) };
        assert!(bytes.iter().all(|&b| b == 0));
        bytes.fill(7);
        let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
        if !thp.contains("[never]") && !thp.is_empty() {
            let flags = vm_flags_at(block as usize);
            assert!(flags.split(' ').any(|f| f == "hg"), "advised huge: {flags}");
        }
        unsafe { HugeBlocks.dealloc(block, layout) };
    }

    #[test]
    fn a_small_block_and_one_that_would_waste_a_quarter_of_its_huge_pages_are_the_system_allocators() {
        for size in [BIG_FROM - 1, BIG_FROM + 4096, HUGE_PAGE + 4096] {
            let layout = Layout::from_size_align(size, 8).unwrap();
            let block = unsafe { HugeBlocks.alloc(layout) };
            assert!(!block.is_null());
            let flags = vm_flags_at(block as usize);
            assert!(!flags.split(' ').any(|f| f == "hg"), "{size}: not advised: {flags}");
            unsafe { HugeBlocks.dealloc(block, layout) };
        }
        assert!(is_big(HUGE_PAGE * 3 / 4, 8) && !is_big(HUGE_PAGE * 3 / 4 - 1, 8));
        assert!(is_big(7 * HUGE_PAGE / 2, 8) && !is_big(3 * HUGE_PAGE, 4 * HUGE_PAGE));
    }

    #[test]
    fn room_for_a_big_list_fills_its_huge_pages_and_room_for_a_small_one_is_what_was_asked() {
        let record = 184;
        // The 40 MB session's estimate: 2.2 MB, which alone would be the system's (over a quarter wasted).
        let asked = 11_830;
        assert!(!is_big(asked * record, 8));
        let room = room_in_whole_huge_pages(asked, record);
        assert!(room >= asked && is_big(room * record, 8), "{room}");
        assert!((room + 1) * record > 2 * HUGE_PAGE, "fills the two huge pages: {room}");
        let small = (BIG_FROM - 1) / record;
        assert_eq!(room_in_whole_huge_pages(small, record), small);
        assert_eq!(room_in_whole_huge_pages(usize::MAX / 2, record), usize::MAX / 2, "no overflow");
        assert_eq!(room_in_whole_huge_pages(5, 0), 5);
    }

    #[test]
    fn a_big_block_aligned_past_a_page_keeps_its_alignment_when_it_grows() {
        let layout = Layout::from_size_align(2 * HUGE_PAGE, 1 << 16).unwrap();
        let block = unsafe { HugeBlocks.alloc(layout) };
        unsafe { block.write_bytes(9, layout.size()) };
        let grown = unsafe { HugeBlocks.realloc(block, layout, 8 * HUGE_PAGE) };
        assert_eq!(grown as usize % (1 << 16), 0);
        assert!(unsafe { std::slice::from_raw_parts(grown, 2 * HUGE_PAGE) }.iter().all(|&b| b == 9));
        unsafe { HugeBlocks.dealloc(grown, Layout::from_size_align(8 * HUGE_PAGE, 1 << 16).unwrap()) };
    }

    #[test]
    fn growing_and_shrinking_across_the_threshold_keeps_every_byte() {
        let sizes = [
            1000,
            BIG_FROM - 8,
            HUGE_PAGE - 8,
            BIG_FROM + 1,
            4 * HUGE_PAGE - 5,
            9 * HUGE_PAGE,
            HUGE_PAGE,
            2 * HUGE_PAGE + 3,
            64,
        ];
        let mut layout = Layout::from_size_align(100, 8).unwrap();
        let mut block = unsafe { HugeBlocks.alloc(layout) };
        let pattern = |i: usize| (i % 251) as u8;
        for i in 0..layout.size() {
            unsafe { *block.add(i) = pattern(i) };
        }
        for &size in &sizes {
            block = unsafe { HugeBlocks.realloc(block, layout, size) };
            assert!(!block.is_null());
            let kept = layout.size().min(size);
            for i in 0..kept {
                assert_eq!(unsafe { *block.add(i) }, pattern(i), "byte {i} after a realloc to {size}");
            }
            layout = Layout::from_size_align(size, 8).unwrap();
            for i in kept..size {
                unsafe { *block.add(i) = pattern(i) };
            }
        }
        unsafe { HugeBlocks.dealloc(block, layout) };
    }
}
