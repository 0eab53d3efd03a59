//! The `void**` argument array of a kernel launch, built in place from typed values.

use std::ffi::c_void;

/// Most parameters of a kernel launched through [`KernelArgs`].
const MAX_KERNEL_ARGS: usize = 16;
/// Words of parameter values [`KernelArgs`] holds (the largest launch, a mix in one launch:
/// eight pointers, two parameter structs, a count and three 128-byte tensor maps, 89 words).
const KERNEL_ARG_WORDS: usize = 96;

/// Builds the `void**` argument array of `cuLaunchKernel` from typed values, in place: a launch
/// allocates nothing (the values are copied into an inline, 8-byte-aligned buffer).
pub struct KernelArgs {
    words: [u64; KERNEL_ARG_WORDS],
    /// Word offset of each parameter.
    offsets: [usize; MAX_KERNEL_ARGS],
    len: usize,
    used_words: usize,
}

impl Default for KernelArgs {
    fn default() -> Self {
        KernelArgs { words: [0; KERNEL_ARG_WORDS], offsets: [0; MAX_KERNEL_ARGS], len: 0, used_words: 0 }
    }
}

impl KernelArgs {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a by-value parameter (a pointer, a scalar, or a `#[repr(C)]` struct of scalars)
    /// at the next 8-byte boundary.
    ///
    /// # Panics
    /// Past [`MAX_KERNEL_ARGS`] parameters or [`KERNEL_ARG_WORDS`] words of values: the kernels'
    /// parameter lists are fixed and far smaller, so either is a bug here.
    pub fn push<T: Copy>(&mut self, value: T) -> &mut Self {
        let size = std::mem::size_of::<T>();
        let words = size.div_ceil(8).max(1);
        assert!(
            self.len < MAX_KERNEL_ARGS && self.used_words + words <= KERNEL_ARG_WORDS,
            "a kernel launch has more parameters than KernelArgs holds"
        );
        assert!(std::mem::align_of::<T>() <= 8, "kernel parameters are at most 8-byte aligned");
        // SAFETY: the destination holds `words * 8 >= size` bytes inside `self.words` (checked
        // above) and does not overlap `value`; a byte copy of a Copy value.
        unsafe {
            std::ptr::copy_nonoverlapping(
                &value as *const T as *const u8,
                self.words.as_mut_ptr().add(self.used_words) as *mut u8,
                size,
            );
        }
        self.offsets[self.len] = self.used_words;
        self.len += 1;
        self.used_words += words;
        self
    }

    /// Pointers to each parameter, for the launch: valid while `self` is borrowed by them (it
    /// cannot move or be pushed to meanwhile).
    pub fn pointers(&mut self) -> ArgPointers<'_> {
        let mut pointers = [std::ptr::null_mut(); MAX_KERNEL_ARGS];
        let base = self.words.as_mut_ptr();
        for (p, &offset) in pointers.iter_mut().zip(&self.offsets[..self.len]) {
            // SAFETY: every offset lies inside `words` (push checked it).
            *p = unsafe { base.add(offset) } as *mut c_void;
        }
        ArgPointers { pointers, len: self.len, _args: std::marker::PhantomData }
    }
}

/// The `void**` argument array of one launch, borrowing the [`KernelArgs`] it points into.
pub struct ArgPointers<'a> {
    pointers: [*mut c_void; MAX_KERNEL_ARGS],
    len: usize,
    _args: std::marker::PhantomData<&'a mut KernelArgs>,
}

impl std::ops::Deref for ArgPointers<'_> {
    type Target = [*mut c_void];
    fn deref(&self) -> &[*mut c_void] {
        &self.pointers[..self.len]
    }
}

impl std::ops::DerefMut for ArgPointers<'_> {
    fn deref_mut(&mut self) -> &mut [*mut c_void] {
        &mut self.pointers[..self.len]
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn kernel_args_point_at_aligned_copies_of_each_value() {
        #[derive(Clone, Copy)]
        #[repr(C)]
        struct Params {
            a: u32,
            b: f32,
            c: [u64; 3],
        }
        let mut args = super::KernelArgs::new();
        args.push(7u32).push(0x1234_5678_9abc_def0u64).push(Params { a: 1, b: 2.5, c: [3, 4, 5] }).push([9u64; 16]);
        let p = args.pointers();
        assert_eq!(p.len(), 4);
        assert!(p.iter().all(|q| (*q as usize).is_multiple_of(8)));
        // SAFETY: each pointer points at a copy of the value pushed in its place.
        unsafe {
            assert_eq!(*(p[0] as *const u32), 7);
            assert_eq!(*(p[1] as *const u64), 0x1234_5678_9abc_def0);
            let params = &*(p[2] as *const Params);
            assert_eq!((params.a, params.b, params.c), (1, 2.5, [3, 4, 5]));
            assert_eq!(*(p[3] as *const [u64; 16]), [9; 16]);
        }
        // The largest launches fit: a mix in one launch (eight pointers, the tile and the decode
        // parameters, the decode block count, the KV, Q and output tensor maps); the
        // warp-specialized kernel (the same with one parameter struct); the other attention
        // kernels (nine pointers and the parameters).
        let params = std::mem::size_of::<kernels_gpu::attention::RpaParams>().div_ceil(8);
        let map = std::mem::size_of::<kernels_gpu::tma::TensorMapImage>().div_ceil(8);
        assert!(8 + 2 * params + 1 + 3 * map <= super::KERNEL_ARG_WORDS && 9 + params <= super::KERNEL_ARG_WORDS);
    }
}
