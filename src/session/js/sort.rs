//! `Array.prototype.sort` with a comparator, exactly as V8 runs it.
//!
//! pi sorts with comparators such as
//! `(a, b) => new Date(a.t).getTime() - new Date(b.t).getTime()`, which return `NaN` when a timestamp is
//! invalid. Such comparators are not consistent orderings, so the spec leaves the result
//! implementation-defined and it depends on the exact steps of the engine's algorithm. To reproduce pi's
//! output we have to run the same algorithm with the same comparisons in the same order: this module is a
//! line-by-line port of V8's TimSort, `third_party/v8/builtins/array-sort.tq`, as shipped in V8 11.3
//! (Node.js 20, `deps/v8/third_party/v8/builtins/array-sort.tq` in `nodejs/node`).
//!
//! Newer V8 (the current `v8/v8` main branch) adds a shortcut that sorts arrays shorter than
//! `kMinTimSortLen` (10) by binary insertion alone, skipping run detection. That changes which pairs get
//! compared and therefore the outcome for NaN-returning comparators, so it is deliberately *not* ported:
//! Node 20 always goes through `ArrayTimSortImpl`. Everything else ported here is identical in both.
//!
//! What was ported, and what was left out:
//!
//! * `SortCompareUserFn`: V8 calls the comparator, applies `ToNumber`, and turns `NaN` into `+0`. All
//!   tests afterwards are `order < 0` or `order >= 0` on that number, so `NaN` behaves exactly like `0`
//!   ("not less"), and `-0` is not less than zero either. Our comparator already returns an `f64`, which
//!   stands for the result after `ToNumber`.
//! * `ArrayTimSort` / `ArrayTimSortImpl`: run detection with reversal of strictly descending runs, minrun
//!   computation, binary insertion to extend short runs, the merge-collapse invariants, `MergeAt`,
//!   `GallopLeft`/`GallopRight`, `MergeLow`/`MergeHigh` and the `minGallop` adaptation that persists
//!   across merges.
//! * Not ported: `CompactReceiverElementsIntoWorkArray` copies the elements into a work array, drops
//!   holes, and moves every `undefined` to the end without ever passing it to the comparator. Rust slices
//!   have neither holes nor `undefined`, and pi's callers never sort arrays containing `undefined`, so
//!   every element here takes part in the sort. Also left out: the bail-out to generic element accessors
//!   when the comparator mutates the array, which a Rust comparator cannot do.
//!
//! The port sorts a work array of indices rather than the elements themselves, so `T` needs no `Clone`;
//! the final order is then applied to the slice with swaps.

/// `kMinGallopWins`: the initial `minGallop`, and how many consecutive wins keep a merge in galloping mode.
const MIN_GALLOP_WINS: isize = 7;

/// Sorts `items` in place exactly as V8's `Array.prototype.sort(comparefn)` would, for any comparator,
/// including inconsistent ones and ones that return NaN.
///
/// `compare(a, b)` plays the role of the JavaScript comparator after `ToNumber`: negative means `a` sorts
/// before `b`. A `NaN` result is treated as `+0`, as V8 does. The comparator is called with the same
/// arguments, in the same order, as V8 would call the JavaScript one, so even a comparator with side
/// effects observes the same sequence of calls. Runs in O(n log n) comparisons.
pub fn sort_like_v8<T>(items: &mut [T], mut compare: impl FnMut(&T, &T) -> f64) {
    let length = items.len();
    // `ArrayPrototypeSort` returns before creating any sort state when `len < 2`.
    if length < 2 {
        return;
    }
    let order = {
        let items: &[T] = items;
        let mut state = SortState {
            compare_indices: |x: usize, y: usize| compare(&items[x], &items[y]),
            work: (0..length).collect(),
            temp: Vec::new(),
            pending_runs: Vec::new(),
            min_gallop: MIN_GALLOP_WINS,
        };
        state.tim_sort(to_isize(length));
        state.work
    };
    apply_order(items, order);
}

/// Converts a length or index to the signed type the port uses; slices never exceed `isize::MAX`
/// elements, so this cannot fail for real inputs.
fn to_isize(value: usize) -> isize {
    isize::try_from(value).expect("slice lengths fit in isize")
}

/// Rearranges `items` so that position `k` holds the element that was at `order[k]`, by following the
/// permutation's cycles with swaps (no `Clone` and no extra copy of the elements).
fn apply_order<T>(items: &mut [T], mut order: Vec<usize>) {
    for start in 0..order.len() {
        let mut current = start;
        loop {
            let source = order[current];
            // Marking the slot as done lets later iterations skip already placed cycles.
            order[current] = current;
            if source == start {
                break;
            }
            items.swap(current, source);
            current = source;
        }
    }
}

/// Which of the two buffers a gallop searches; V8 passes `workArray` or `tempArray` as a parameter.
#[derive(Clone, Copy)]
enum Buffer {
    Work,
    Temp,
}

/// How a merge loop ended: the `Succeed` and `CopyA`/`CopyB` labels of the Torque code.
enum MergeExit {
    Succeed,
    CopyRest,
}

/// V8's `SortState`, reduced to what the algorithm needs. Elements are indices into the caller's slice.
///
/// Indices are `isize` because V8 uses (signed) Smis and several cursors legitimately step to `-1`
/// before the loop that used them ends.
struct SortState<F: FnMut(usize, usize) -> f64> {
    /// The user's comparator, applied to the elements at two slice indices.
    compare_indices: F,
    /// `workArray`: the array being sorted.
    work: Vec<usize>,
    /// `tempArray`: scratch space holding the smaller run during a merge.
    temp: Vec<usize>,
    /// `pendingRuns`: the stack of `(base, length)` runs waiting to be merged.
    pending_runs: Vec<(isize, isize)>,
    /// `minGallop`: adapts across merges, so it lives in the state rather than in one merge.
    min_gallop: isize,
}

impl<F: FnMut(usize, usize) -> f64> SortState<F> {
    /// `SortCompareUserFn`: the comparator's number, with `NaN` replaced by `+0`.
    fn compare(&mut self, x: usize, y: usize) -> f64 {
        let order = (self.compare_indices)(x, y);
        if order.is_nan() {
            0.0
        } else {
            order
        }
    }

    /// Reads element `index` of the work array.
    fn work_at(&self, index: isize) -> usize {
        self.work[index as usize]
    }

    /// Reads element `index` of the temp array.
    fn temp_at(&self, index: isize) -> usize {
        self.temp[index as usize]
    }

    /// Writes element `index` of the work array.
    fn set_work(&mut self, index: isize, value: usize) {
        self.work[index as usize] = value;
    }

    /// Reads element `index` of the given buffer.
    fn buffer_at(&self, buffer: Buffer, index: isize) -> usize {
        match buffer {
            Buffer::Work => self.work_at(index),
            Buffer::Temp => self.temp_at(index),
        }
    }

    /// `Copy(workArray, from, workArray, to, length)`; V8 copies in the direction that makes overlapping
    /// ranges safe, which is what `copy_within` does.
    fn move_within_work(&mut self, from: isize, to: isize, length: isize) {
        let from = from as usize;
        self.work.copy_within(from..from + length as usize, to as usize);
    }

    /// `Copy(tempArray, from, workArray, to, length)`.
    fn copy_temp_to_work(&mut self, from: isize, to: isize, length: isize) {
        let (from, to, length) = (from as usize, to as usize, length as usize);
        self.work[to..to + length].copy_from_slice(&self.temp[from..from + length]);
    }

    /// `BinaryInsertionSort`: sorts `[low, high)` given that `[low, start)` is already sorted.
    fn binary_insertion_sort(&mut self, low: isize, start_arg: isize, high: isize) {
        let mut start = if low == start_arg { start_arg + 1 } else { start_arg };
        while start < high {
            let mut left = low;
            let mut right = start;
            let pivot = self.work_at(right);
            while left < right {
                let mid = left + ((right - left) >> 1);
                let order = self.compare(pivot, self.work_at(mid));
                if order < 0.0 {
                    right = mid;
                } else {
                    left = mid + 1;
                }
            }
            // Slide `[left, start)` one slot right and drop the pivot into the gap.
            self.work[left as usize..=start as usize].rotate_right(1);
            start += 1;
        }
    }

    /// `CountAndMakeRun`: length of the run starting at `low_arg` within `[low_arg, high)`. A run is
    /// non-descending or strictly descending (`compare(next, previous) < 0` throughout); descending
    /// runs are reversed in place.
    fn count_and_make_run(&mut self, low_arg: isize, high: isize) -> isize {
        let low = low_arg + 1;
        if low == high {
            return 1;
        }
        let mut run_length = 2;
        let element_low = self.work_at(low);
        let element_low_pred = self.work_at(low - 1);
        let order = self.compare(element_low, element_low_pred);
        let is_descending = order < 0.0;

        let mut previous = element_low;
        let mut index = low + 1;
        while index < high {
            let current = self.work_at(index);
            let order = self.compare(current, previous);
            // `order >= 0` and `!(order < 0)` agree here because `compare` never returns NaN.
            if is_descending {
                if order >= 0.0 {
                    break;
                }
            } else if order < 0.0 {
                break;
            }
            previous = current;
            run_length += 1;
            index += 1;
        }

        if is_descending {
            self.work[low_arg as usize..(low_arg + run_length) as usize].reverse();
        }
        run_length
    }

    /// `MergeAt`: merges the pending runs at stack indices `i` and `i + 1`.
    fn merge_at(&mut self, i: usize) {
        let (mut base_a, mut length_a) = self.pending_runs[i];
        let (base_b, mut length_b) = self.pending_runs[i + 1];

        // Same stack effect as V8: run i grows, run i + 1 disappears, a run at i + 2 slides down.
        self.pending_runs[i].1 = length_a + length_b;
        self.pending_runs.remove(i + 1);

        // Elements of A before where B's first element belongs are already in place.
        let key_right = self.work_at(base_b);
        let k = self.gallop_right(Buffer::Work, key_right, base_a, length_a, 0);
        base_a += k;
        length_a -= k;
        if length_a == 0 {
            return;
        }

        // Elements of B after where A's last element belongs are already in place.
        let key_left = self.work_at(base_a + length_a - 1);
        length_b = self.gallop_left(Buffer::Work, key_left, base_b, length_b, length_b - 1);
        if length_b == 0 {
            return;
        }

        if length_a <= length_b {
            self.merge_low(base_a, length_a, base_b, length_b);
        } else {
            self.merge_high(base_a, length_a, base_b, length_b);
        }
    }

    /// `GallopLeft`: the offset in `0..=length` where `key` belongs in the sorted range at `base`,
    /// left of any elements equal to it, searching outward from `hint`.
    fn gallop_left(&mut self, buffer: Buffer, key: usize, base: isize, length: isize, hint: isize) -> isize {
        let mut last_offset: isize = 0;
        let mut offset: isize = 1;

        let base_hint_element = self.buffer_at(buffer, base + hint);
        let order = self.compare(base_hint_element, key);

        if order < 0.0 {
            // a[base + hint] < key: gallop right.
            let max_offset = length - hint;
            while offset < max_offset {
                let element = self.buffer_at(buffer, base + hint + offset);
                let order = self.compare(element, key);
                if order >= 0.0 {
                    break;
                }
                last_offset = offset;
                offset = (offset << 1) + 1;
                if offset <= 0 {
                    offset = max_offset;
                }
            }
            if offset > max_offset {
                offset = max_offset;
            }
            last_offset += hint;
            offset += hint;
        } else {
            // key <= a[base + hint]: gallop left.
            let max_offset = hint + 1;
            while offset < max_offset {
                let element = self.buffer_at(buffer, base + hint - offset);
                let order = self.compare(element, key);
                if order < 0.0 {
                    break;
                }
                last_offset = offset;
                offset = (offset << 1) + 1;
                if offset <= 0 {
                    offset = max_offset;
                }
            }
            if offset > max_offset {
                offset = max_offset;
            }
            let previous_last = last_offset;
            last_offset = hint - offset;
            offset = hint - previous_last;
        }

        // Binary search in (last_offset, offset].
        last_offset += 1;
        while last_offset < offset {
            let m = last_offset + ((offset - last_offset) >> 1);
            let element = self.buffer_at(buffer, base + m);
            let order = self.compare(element, key);
            if order < 0.0 {
                last_offset = m + 1;
            } else {
                offset = m;
            }
        }
        offset
    }

    /// `GallopRight`: like [`SortState::gallop_left`] but right of any elements equal to `key`. Note
    /// the comparator's argument order differs from `gallop_left` (`key` comes first), as in V8.
    fn gallop_right(&mut self, buffer: Buffer, key: usize, base: isize, length: isize, hint: isize) -> isize {
        let mut last_offset: isize = 0;
        let mut offset: isize = 1;

        let base_hint_element = self.buffer_at(buffer, base + hint);
        let order = self.compare(key, base_hint_element);

        if order < 0.0 {
            // key < a[base + hint]: gallop left.
            let max_offset = hint + 1;
            while offset < max_offset {
                let element = self.buffer_at(buffer, base + hint - offset);
                let order = self.compare(key, element);
                if order >= 0.0 {
                    break;
                }
                last_offset = offset;
                offset = (offset << 1) + 1;
                if offset <= 0 {
                    offset = max_offset;
                }
            }
            if offset > max_offset {
                offset = max_offset;
            }
            let previous_last = last_offset;
            last_offset = hint - offset;
            offset = hint - previous_last;
        } else {
            // a[base + hint] <= key: gallop right.
            let max_offset = length - hint;
            while offset < max_offset {
                let element = self.buffer_at(buffer, base + hint + offset);
                let order = self.compare(key, element);
                if order < 0.0 {
                    break;
                }
                last_offset = offset;
                offset = (offset << 1) + 1;
                if offset <= 0 {
                    offset = max_offset;
                }
            }
            if offset > max_offset {
                offset = max_offset;
            }
            last_offset += hint;
            offset += hint;
        }

        last_offset += 1;
        while last_offset < offset {
            let m = last_offset + ((offset - last_offset) >> 1);
            let element = self.buffer_at(buffer, base + m);
            let order = self.compare(key, element);
            if order < 0.0 {
                offset = m;
            } else {
                last_offset = m + 1;
            }
        }
        offset
    }

    /// `MergeLow`: merges adjacent runs A and B front to back, copying A (the shorter) to the temp
    /// array. `minGallop` is written back to the state exactly where V8 writes it.
    fn merge_low(&mut self, base_a: isize, length_a_arg: isize, base_b: isize, length_b_arg: isize) {
        let mut length_a = length_a_arg;
        let mut length_b = length_b_arg;

        self.temp.clear();
        self.temp.extend_from_slice(&self.work[base_a as usize..(base_a + length_a) as usize]);

        let mut dest = base_a;
        let mut cursor_temp: isize = 0;
        let mut cursor_b = base_b;

        self.set_work(dest, self.work_at(cursor_b));
        dest += 1;
        cursor_b += 1;

        let exit = 'merge: {
            length_b -= 1;
            if length_b == 0 {
                break 'merge MergeExit::Succeed;
            }
            if length_a == 1 {
                break 'merge MergeExit::CopyRest;
            }

            let mut min_gallop = self.min_gallop;
            loop {
                let mut wins_a: isize = 0;
                let mut wins_b: isize = 0;

                // One element at a time until one run wins `min_gallop` times in a row.
                loop {
                    let order = self.compare(self.work_at(cursor_b), self.temp_at(cursor_temp));
                    if order < 0.0 {
                        self.set_work(dest, self.work_at(cursor_b));
                        dest += 1;
                        cursor_b += 1;
                        wins_b += 1;
                        length_b -= 1;
                        wins_a = 0;
                        if length_b == 0 {
                            break 'merge MergeExit::Succeed;
                        }
                        if wins_b >= min_gallop {
                            break;
                        }
                    } else {
                        self.set_work(dest, self.temp_at(cursor_temp));
                        dest += 1;
                        cursor_temp += 1;
                        wins_a += 1;
                        length_a -= 1;
                        wins_b = 0;
                        if length_a == 1 {
                            break 'merge MergeExit::CopyRest;
                        }
                        if wins_a >= min_gallop {
                            break;
                        }
                    }
                }

                // Galloping mode, until neither run wins kMinGallopWins times in a row.
                min_gallop += 1;
                let mut first_iteration = true;
                while wins_a >= MIN_GALLOP_WINS || wins_b >= MIN_GALLOP_WINS || first_iteration {
                    first_iteration = false;
                    min_gallop = (min_gallop - 1).max(1);
                    self.min_gallop = min_gallop;

                    let key = self.work_at(cursor_b);
                    wins_a = self.gallop_right(Buffer::Temp, key, cursor_temp, length_a, 0);
                    if wins_a > 0 {
                        self.copy_temp_to_work(cursor_temp, dest, wins_a);
                        dest += wins_a;
                        cursor_temp += wins_a;
                        length_a -= wins_a;
                        if length_a == 1 {
                            break 'merge MergeExit::CopyRest;
                        }
                        // Impossible for a consistent comparator, but comparators here are not.
                        if length_a == 0 {
                            break 'merge MergeExit::Succeed;
                        }
                    }
                    self.set_work(dest, self.work_at(cursor_b));
                    dest += 1;
                    cursor_b += 1;
                    length_b -= 1;
                    if length_b == 0 {
                        break 'merge MergeExit::Succeed;
                    }

                    let key = self.temp_at(cursor_temp);
                    wins_b = self.gallop_left(Buffer::Work, key, cursor_b, length_b, 0);
                    if wins_b > 0 {
                        self.move_within_work(cursor_b, dest, wins_b);
                        dest += wins_b;
                        cursor_b += wins_b;
                        length_b -= wins_b;
                        if length_b == 0 {
                            break 'merge MergeExit::Succeed;
                        }
                    }
                    self.set_work(dest, self.temp_at(cursor_temp));
                    dest += 1;
                    cursor_temp += 1;
                    length_a -= 1;
                    if length_a == 1 {
                        break 'merge MergeExit::CopyRest;
                    }
                }
                // Penalise leaving galloping mode.
                min_gallop += 1;
                self.min_gallop = min_gallop;
            }
        };

        match exit {
            MergeExit::Succeed => {
                if length_a > 0 {
                    self.copy_temp_to_work(cursor_temp, dest, length_a);
                }
            }
            MergeExit::CopyRest => {
                // The last element of run A belongs at the end of the merge.
                self.move_within_work(cursor_b, dest, length_b);
                self.set_work(dest + length_b, self.temp_at(cursor_temp));
            }
        }
    }

    /// `MergeHigh`: merges adjacent runs A and B back to front, copying B (the shorter) to the temp
    /// array.
    fn merge_high(&mut self, base_a: isize, length_a_arg: isize, base_b: isize, length_b_arg: isize) {
        let mut length_a = length_a_arg;
        let mut length_b = length_b_arg;

        self.temp.clear();
        self.temp.extend_from_slice(&self.work[base_b as usize..(base_b + length_b) as usize]);

        let mut dest = base_b + length_b - 1;
        let mut cursor_temp = length_b - 1;
        let mut cursor_a = base_a + length_a - 1;

        self.set_work(dest, self.work_at(cursor_a));
        dest -= 1;
        cursor_a -= 1;

        let exit = 'merge: {
            length_a -= 1;
            if length_a == 0 {
                break 'merge MergeExit::Succeed;
            }
            if length_b == 1 {
                break 'merge MergeExit::CopyRest;
            }

            let mut min_gallop = self.min_gallop;
            loop {
                let mut wins_a: isize = 0;
                let mut wins_b: isize = 0;

                loop {
                    let order = self.compare(self.temp_at(cursor_temp), self.work_at(cursor_a));
                    if order < 0.0 {
                        self.set_work(dest, self.work_at(cursor_a));
                        dest -= 1;
                        cursor_a -= 1;
                        wins_a += 1;
                        length_a -= 1;
                        wins_b = 0;
                        if length_a == 0 {
                            break 'merge MergeExit::Succeed;
                        }
                        if wins_a >= min_gallop {
                            break;
                        }
                    } else {
                        self.set_work(dest, self.temp_at(cursor_temp));
                        dest -= 1;
                        cursor_temp -= 1;
                        wins_b += 1;
                        length_b -= 1;
                        wins_a = 0;
                        if length_b == 1 {
                            break 'merge MergeExit::CopyRest;
                        }
                        if wins_b >= min_gallop {
                            break;
                        }
                    }
                }

                min_gallop += 1;
                let mut first_iteration = true;
                while wins_a >= MIN_GALLOP_WINS || wins_b >= MIN_GALLOP_WINS || first_iteration {
                    first_iteration = false;
                    min_gallop = (min_gallop - 1).max(1);
                    self.min_gallop = min_gallop;

                    let key = self.temp_at(cursor_temp);
                    let k = self.gallop_right(Buffer::Work, key, base_a, length_a, length_a - 1);
                    wins_a = length_a - k;
                    if wins_a > 0 {
                        dest -= wins_a;
                        cursor_a -= wins_a;
                        self.move_within_work(cursor_a + 1, dest + 1, wins_a);
                        length_a -= wins_a;
                        if length_a == 0 {
                            break 'merge MergeExit::Succeed;
                        }
                    }
                    self.set_work(dest, self.temp_at(cursor_temp));
                    dest -= 1;
                    cursor_temp -= 1;
                    length_b -= 1;
                    if length_b == 1 {
                        break 'merge MergeExit::CopyRest;
                    }

                    let key = self.work_at(cursor_a);
                    let k = self.gallop_left(Buffer::Temp, key, 0, length_b, length_b - 1);
                    wins_b = length_b - k;
                    if wins_b > 0 {
                        dest -= wins_b;
                        cursor_temp -= wins_b;
                        self.copy_temp_to_work(cursor_temp + 1, dest + 1, wins_b);
                        length_b -= wins_b;
                        if length_b == 1 {
                            break 'merge MergeExit::CopyRest;
                        }
                        // Impossible for a consistent comparator, but comparators here are not.
                        if length_b == 0 {
                            break 'merge MergeExit::Succeed;
                        }
                    }
                    self.set_work(dest, self.work_at(cursor_a));
                    dest -= 1;
                    cursor_a -= 1;
                    length_a -= 1;
                    if length_a == 0 {
                        break 'merge MergeExit::Succeed;
                    }
                }
                min_gallop += 1;
                self.min_gallop = min_gallop;
            }
        };

        match exit {
            MergeExit::Succeed => {
                if length_b > 0 {
                    self.copy_temp_to_work(0, dest - (length_b - 1), length_b);
                }
            }
            MergeExit::CopyRest => {
                // The first element of run B belongs at the front of the merge.
                dest -= length_a;
                cursor_a -= length_a;
                self.move_within_work(cursor_a + 1, dest + 1, length_a);
                self.set_work(dest, self.temp_at(cursor_temp));
            }
        }
    }

    /// `RunInvariantEstablished`: `length(n - 2) > length(n - 1) + length(n)`.
    fn run_invariant_established(&self, n: usize) -> bool {
        if n < 2 {
            return true;
        }
        let runs = &self.pending_runs;
        runs[n - 2].1 > runs[n - 1].1 + runs[n].1
    }

    /// `MergeCollapse`: merges adjacent pending runs until the stack invariants hold again.
    fn merge_collapse(&mut self) {
        while self.pending_runs.len() > 1 {
            let mut n = self.pending_runs.len() - 2;
            if !self.run_invariant_established(n + 1) || !self.run_invariant_established(n) {
                if self.pending_runs[n - 1].1 < self.pending_runs[n + 1].1 {
                    n -= 1;
                }
                self.merge_at(n);
            } else if self.pending_runs[n].1 <= self.pending_runs[n + 1].1 {
                self.merge_at(n);
            } else {
                break;
            }
        }
    }

    /// `MergeForceCollapse`: merges all pending runs into one at the end of the sort.
    fn merge_force_collapse(&mut self) {
        while self.pending_runs.len() > 1 {
            let mut n = self.pending_runs.len() - 2;
            if n > 0 && self.pending_runs[n - 1].1 < self.pending_runs[n + 1].1 {
                n -= 1;
            }
            self.merge_at(n);
        }
    }

    /// `ArrayTimSortImpl`: finds natural runs left to right, extends short ones to minrun with binary
    /// insertion, and merges them.
    fn tim_sort(&mut self, length: isize) {
        let mut remaining = length;
        let mut low: isize = 0;
        let min_run_length = compute_min_run_length(remaining);
        while remaining != 0 {
            let mut current_run_length = self.count_and_make_run(low, low + remaining);
            if current_run_length < min_run_length {
                let forced_run_length = min_run_length.min(remaining);
                self.binary_insertion_sort(low, low + current_run_length, low + forced_run_length);
                current_run_length = forced_run_length;
            }
            self.pending_runs.push((low, current_run_length));
            self.merge_collapse();
            low += current_run_length;
            remaining -= current_run_length;
        }
        self.merge_force_collapse();
    }
}

/// `ComputeMinRunLength`: `n` itself below 64, otherwise a value in 32..=64 such that `n / minrun` is
/// just below a power of two.
fn compute_min_run_length(n_arg: isize) -> isize {
    let mut n = n_arg;
    let mut r = 0;
    while n >= 64 {
        r |= n & 1;
        n >>= 1;
    }
    n + r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn min_run_length_matches_timsort_definition() {
        assert_eq!(compute_min_run_length(63), 63);
        assert_eq!(compute_min_run_length(64), 32);
        assert_eq!(compute_min_run_length(65), 33);
        assert_eq!(compute_min_run_length(4096), 32);
        assert_eq!(compute_min_run_length(5000), 40);
    }

    #[test]
    fn apply_order_moves_each_element_to_its_sorted_position() {
        let mut items = vec!['a', 'b', 'c', 'd', 'e'];
        apply_order(&mut items, vec![3, 0, 4, 1, 2]);
        assert_eq!(items, vec!['d', 'a', 'e', 'b', 'c']);
    }

    #[test]
    fn nan_comparator_result_counts_as_equal() {
        // With every comparison NaN (=> +0), V8 treats all elements as equal and keeps input order.
        let mut items: Vec<u32> = (0..100).rev().collect();
        let expected = items.clone();
        sort_like_v8(&mut items, |_, _| f64::NAN);
        assert_eq!(items, expected);
    }
}
