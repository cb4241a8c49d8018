//! Per-thread scratch memory for CPU ops (im2col columns, layer norm's per-sample sums): grown
//! on first use, then reused, so the step loop does not allocate.

use std::cell::RefCell;

thread_local! {
    static SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    static SCRATCH_F64: RefCell<Vec<f64>> = const { RefCell::new(Vec::new()) };
}

/// Run `f` with at least `len` floats of this thread's scratch (contents unspecified).
pub fn with_scratch<R>(len: usize, f: impl FnOnce(&mut [f32]) -> R) -> R {
    SCRATCH.with(|cell| borrow_grown(&mut cell.borrow_mut(), len, f))
}

/// The same in f64 (sums kept between a reduction and the pass that uses them).
pub fn with_f64_scratch<R>(len: usize, f: impl FnOnce(&mut [f64]) -> R) -> R {
    SCRATCH_F64.with(|cell| borrow_grown(&mut cell.borrow_mut(), len, f))
}

fn borrow_grown<T: Default + Clone, R>(buf: &mut Vec<T>, len: usize, f: impl FnOnce(&mut [T]) -> R) -> R {
    if buf.len() < len {
        buf.resize(len, T::default());
    }
    f(&mut buf[..len])
}
