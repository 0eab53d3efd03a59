//! `#[kernel]`: the attribute that marks a GPU entry point, with Rust-CUDA `cuda_std`'s rules,
//! implemented for stock rustc's NVPTX backend.
//!
//! Rules (same as `cuda_std::kernel`):
//! - the function must be `unsafe` (a kernel dereferences raw device pointers and races by design),
//! - every parameter must be `Copy` (it is copied into the kernel parameter space),
//! - no return value, no generics, no `async`/`const`.
//!
//! Expansion: on `target_arch = "nvptx64"` the function becomes `#[no_mangle] extern "gpu-kernel"`,
//! so it is exported from the PTX under its own name. On any other target it stays an ordinary
//! `unsafe fn`, so the crate (and its unit tests) still compile for the host, as with cuda_std.
//!
//! `#[kernel(max_threads = N)]` declares the most threads a block of the kernel is launched with
//! (CUDA's `__launch_bounds__(N, 1)`): the PTX then carries `.maxntid N, 1, 1` and
//! `.minnctapersm 1`, so ptxas gives each thread the registers `N` threads may hold (a count fixed
//! at entry, which `setmaxnreg` needs). `#[kernel(max_threads = N, min_blocks = M)]` is
//! `__launch_bounds__(N, M)`: `.minnctapersm M`, so ptxas keeps the registers per thread low
//! enough for `M` blocks of `N` threads per SM. rustc has no attribute for it; the macro exports a
//! marker `u32` global `__xgk_maxntid_<name> = N | M << 16`, which the root `build.rs` turns into
//! the directives on the entry `<name>`.

use proc_macro::TokenStream;
use quote::quote;
use syn::{parse_macro_input, spanned::Spanned, Error, FnArg, ItemFn, ReturnType};

#[proc_macro_attribute]
pub fn kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    let bounds = if attr.is_empty() {
        None
    } else {
        match parse_bounds(proc_macro2::TokenStream::from(attr)) {
            Ok(b) => Some(b),
            Err(err) => return err.to_compile_error().into(),
        }
    };
    let func = parse_macro_input!(item as ItemFn);
    match expand(func, bounds) {
        Ok(tokens) => tokens.into(),
        Err(err) => err.to_compile_error().into(),
    }
}

/// `max_threads = N` (a positive integer literal up to 1024), optionally followed by
/// `, min_blocks = M` (1 to 32): the marker value `N | M << 16` (M = 1 when absent).
fn parse_bounds(attr: proc_macro2::TokenStream) -> syn::Result<u32> {
    use syn::parse::Parser;
    let metas = syn::punctuated::Punctuated::<syn::MetaNameValue, syn::Token![,]>::parse_terminated.parse2(attr)?;
    let int = |meta: &syn::MetaNameValue, range: std::ops::RangeInclusive<u32>| -> syn::Result<u32> {
        // A literal forwarded by `macro_rules!` arrives in an invisible group.
        let mut value = &meta.value;
        while let syn::Expr::Group(g) = value {
            value = &g.expr;
        }
        let syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Int(n), .. }) = value else {
            return Err(Error::new(meta.value.span(), "expected an integer literal"));
        };
        let n: u32 = n.base10_parse()?;
        if !range.contains(&n) {
            return Err(Error::new(meta.value.span(), format!("must be in {}..={}", range.start(), range.end())));
        }
        Ok(n)
    };
    let mut iter = metas.iter();
    let first = iter.next().filter(|m| m.path.is_ident("max_threads"));
    let Some(first) = first else {
        return Err(Error::new(metas.span(), "#[kernel] takes `max_threads = N` and optionally `min_blocks = M`"));
    };
    let threads = int(first, 1..=1024)?;
    let blocks = match iter.next() {
        None => 1,
        Some(m) if m.path.is_ident("min_blocks") => int(m, 1..=32)?,
        Some(m) => return Err(Error::new(m.path.span(), "expected `min_blocks = M` after `max_threads = N`")),
    };
    if let Some(m) = iter.next() {
        return Err(Error::new(m.span(), "#[kernel] takes at most `max_threads = N, min_blocks = M`"));
    }
    Ok(threads | blocks << 16)
}

fn expand(func: ItemFn, bounds: Option<u32>) -> syn::Result<proc_macro2::TokenStream> {
    let sig = &func.sig;
    if sig.unsafety.is_none() {
        return Err(Error::new(sig.fn_token.span(), "kernels must be declared `unsafe fn`"));
    }
    if let ReturnType::Type(_, ty) = &sig.output {
        return Err(Error::new(ty.span(), "kernels cannot return a value"));
    }
    if !sig.generics.params.is_empty() {
        return Err(Error::new(sig.generics.span(), "kernels cannot be generic"));
    }
    if let Some(a) = &sig.asyncness {
        return Err(Error::new(a.span(), "kernels cannot be async"));
    }
    if let Some(c) = &sig.constness {
        return Err(Error::new(c.span(), "kernels cannot be const"));
    }
    if let Some(abi) = &sig.abi {
        return Err(Error::new(abi.span(), "#[kernel] sets the ABI itself; remove `extern`"));
    }
    let mut param_types = Vec::new();
    for input in &sig.inputs {
        match input {
            FnArg::Receiver(r) => return Err(Error::new(r.span(), "kernels cannot take self")),
            FnArg::Typed(pat) => param_types.push(pat.ty.clone()),
        }
    }

    let attrs = &func.attrs;
    let vis = &func.vis;
    let ident = &sig.ident;
    let inputs = &sig.inputs;
    let body = &func.block;
    let check_name = quote::format_ident!("__kernel_params_are_copy_{}", ident);
    let bound = bounds.map(|n| {
        let marker = quote::format_ident!("__xgk_maxntid_{}", ident);
        quote! {
            #[cfg(target_arch = "nvptx64")]
            #[unsafe(no_mangle)]
            #[used]
            #[allow(non_upper_case_globals)]
            pub static #marker: u32 = #n;
        }
    });

    Ok(quote! {
        #bound

        #[cfg(target_arch = "nvptx64")]
        #(#attrs)*
        #[unsafe(no_mangle)]
        #vis unsafe extern "gpu-kernel" fn #ident(#inputs) #body

        #[cfg(not(target_arch = "nvptx64"))]
        #(#attrs)*
        #[allow(dead_code, clippy::too_many_arguments)]
        #vis unsafe fn #ident(#inputs) #body

        #[allow(non_snake_case, dead_code)]
        fn #check_name() {
            fn assert_copy<T: ::core::marker::Copy>() {}
            #( assert_copy::<#param_types>(); )*
        }
    })
}
