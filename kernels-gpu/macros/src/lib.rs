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
//! at entry, which `setmaxnreg` needs). rustc has no attribute for it; the
//! macro exports a marker `u32` global `__xgk_maxntid_<name> = N`, which the root `build.rs`
//! turns into the directive on the entry `<name>`.

use proc_macro::TokenStream;
use quote::quote;
use syn::{parse_macro_input, spanned::Spanned, Error, FnArg, ItemFn, ReturnType};

#[proc_macro_attribute]
pub fn kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    let max_threads = if attr.is_empty() {
        None
    } else {
        match parse_max_threads(proc_macro2::TokenStream::from(attr)) {
            Ok(n) => Some(n),
            Err(err) => return err.to_compile_error().into(),
        }
    };
    let func = parse_macro_input!(item as ItemFn);
    match expand(func, max_threads) {
        Ok(tokens) => tokens.into(),
        Err(err) => err.to_compile_error().into(),
    }
}

/// `max_threads = N` with `N` a positive integer literal up to 1024.
fn parse_max_threads(attr: proc_macro2::TokenStream) -> syn::Result<u32> {
    let meta: syn::MetaNameValue = syn::parse2(attr.clone())?;
    if !meta.path.is_ident("max_threads") {
        return Err(Error::new(meta.path.span(), "#[kernel] takes only `max_threads = N`"));
    }
    let syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Int(n), .. }) = &meta.value else {
        return Err(Error::new(meta.value.span(), "max_threads must be an integer literal"));
    };
    let n: u32 = n.base10_parse()?;
    if n == 0 || n > 1024 {
        return Err(Error::new(meta.value.span(), "max_threads must be in 1..=1024"));
    }
    Ok(n)
}

fn expand(func: ItemFn, max_threads: Option<u32>) -> syn::Result<proc_macro2::TokenStream> {
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
    let bound = max_threads.map(|n| {
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
